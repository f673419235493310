"""Each operation of the stream API on the in-process runtime."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import pytest

from airflow_trident.batch.runner import LocalRunner
from airflow_trident.errors import BatchFailedError, FailedException, TopologyError
from airflow_trident.operation import (
    Aggregator,
    Consumer,
    Count,
    Filter,
    FlatMapFunction,
    Function,
    MapFunction,
    MapGet,
    Max,
    Min,
    OperationContext,
    ReducerAggregator,
    Split,
    StateUpdater,
    Sum,
)
from airflow_trident.planner.planner import build_plan
from airflow_trident.runtime.local import LocalBatchProcessor
from airflow_trident.spout.memory import FixedBatchSpout, MemoryTransactionalSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.stream import Stream
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentCollector, TridentTuple

SENTENCES = [
    ("the cow jumped over the moon",),
    ("the man went to the store and bought some candy",),
    ("four score and seven years ago",),
    ("how many apples can you eat",),
]
PLAYS = [("ann", 3), ("bob", 4), ("ann", 5), ("cid", 1), ("bob", 2), ("ann", 1)]


def outputs(
    topology: TridentTopology, stream: Stream, rows: Sequence[tuple[Any, ...]], partitions: int = 1
) -> list[tuple[Any, ...]]:
    """Run one batch of ``rows`` (split over ``partitions`` source partitions); return the
    tuples at the end of ``stream``."""
    processor = LocalBatchProcessor(topology)
    spout_id = next(iter(topology.spouts.values()))
    sources = {spout_id: {str(i): list(rows[i::partitions]) for i in range(partitions)}}
    result = processor.process(1, sources)
    stage = next(
        s
        for s in reversed(processor.plan.stages)
        if (s.ops and s.ops[-1].id == stream.node_id)
        or (s.source is not None and s.source.id == stream.node_id)
    )
    return [r for part in result.outputs[stage.id] for r in part]


def plays() -> tuple[TridentTopology, Stream]:
    t = TridentTopology("plays")
    return t, t.new_stream("plays", MemoryTransactionalSpout({"p0": PLAYS}, ["user", "score"], 10))


class Upper(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((tuple_[0].upper(), len(tuple_[0])))


class HighScore(Filter):
    def is_keep(self, tuple_: TridentTuple) -> bool:
        return bool(tuple_[0] >= 3)


class Double(MapFunction):
    def execute(self, tuple_: TridentTuple) -> Sequence[Any]:
        return (tuple_[0], tuple_[1] * 2)


class Repeat(FlatMapFunction):
    def execute(self, tuple_: TridentTuple) -> Iterable[Sequence[Any]]:
        return [tuple_.values] * tuple_[1]


class Collect(Consumer):
    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def accept(self, tuple_: TridentTuple) -> None:
        self.seen.append(tuple_.values)


class Total(ReducerAggregator[int]):
    def init(self) -> int:
        return 0

    def reduce(self, curr: int, tuple_: TridentTuple) -> int:
        return curr + tuple_[0]


class Users(Aggregator[set[str]]):
    def init(self, batch_id: int, collector: TridentCollector) -> set[str]:
        return set()

    def aggregate(
        self, state: set[str], tuple_: TridentTuple, collector: TridentCollector
    ) -> set[str]:
        state.add(tuple_[0])
        return state

    def complete(self, state: set[str], collector: TridentCollector) -> None:
        for user in sorted(state):
            collector.emit((user,))


def test_each_appends_function_fields() -> None:
    t, s = plays()
    out = s.each(["user"], Upper(), ["upper", "length"])
    assert out.fields == ("user", "score", "upper", "length")
    assert outputs(t, out, PLAYS)[0] == ("ann", 3, "ANN", 3)


def test_each_with_a_filter_and_filter() -> None:
    t, s = plays()
    out = s.each(["score"], HighScore()).filter(["user"], _not_bob())
    assert outputs(t, out, PLAYS) == [("ann", 3), ("ann", 5)]


def _not_bob() -> Filter:
    class NotBob(Filter):
        def is_keep(self, tuple_: TridentTuple) -> bool:
            return bool(tuple_[0] != "bob")

    return NotBob()


def test_map_flat_map_peek_project() -> None:
    t, s = plays()
    seen = Collect()
    out = s.map(Double()).flat_map(Repeat()).peek(seen).project(["score"])
    scores = outputs(t, out, PLAYS[:2])
    assert scores == [(6,)] * 6 + [(8,)] * 8
    assert len(seen.seen) == 14


def test_partition_aggregate_runs_per_partition() -> None:
    t, s = plays()
    out = s.partition_aggregate(["score"], Sum(), ["total"])
    assert sorted(outputs(t, out, PLAYS, partitions=2)) == [(6,), (10,)]


def test_aggregate_combiner_reducer_and_aggregator_over_the_batch() -> None:
    for agg, expected in ((Sum(), [(16,)]), (Total(), [(16,)])):
        t, s = plays()
        out = s.aggregate(["score"], agg, ["total"])
        assert outputs(t, out, PLAYS, partitions=3) == expected
    t, s = plays()
    out = s.aggregate(["user"], Users(), ["user"])
    assert outputs(t, out, PLAYS, partitions=2) == [("ann",), ("bob",), ("cid",)]


def test_empty_batch_emits_zero_once() -> None:
    t, s = plays()
    out = s.aggregate(["score"], Count(), ["n"])
    assert outputs(t, out, [], partitions=3) == [(0,)]
    t, s = plays()
    grouped = s.group_by(["user"]).aggregate(["score"], Count(), ["n"])
    assert outputs(t, grouped, [], partitions=3) == []


def test_group_by_aggregate_and_chained_aggregates() -> None:
    t, s = plays()
    out = (
        s.group_by(["user"])
        .chained_agg()
        .aggregate([], Count(), ["n"])
        .aggregate(["score"], Sum(), ["total"])
        .aggregate(["score"], Max(), ["best"])
        .chain_end()
    )
    assert out.fields == ("user", "n", "total", "best")
    assert sorted(outputs(t, out, PLAYS, partitions=2)) == [
        ("ann", 3, 9, 5),
        ("bob", 2, 6, 4),
        ("cid", 1, 1, 1),
    ]


def test_partition_by_brings_each_key_to_one_partition() -> None:
    t, s = plays()
    out = (
        s.partition_by(["user"])
        .parallelism_hint(3)
        .partition_aggregate(["user"], Users(), ["user"])
    )
    users = [u for (u,) in outputs(t, out, PLAYS, partitions=2)]
    assert sorted(users) == ["ann", "bob", "cid"]  # each user listed by exactly one partition


def test_global_shuffle_broadcast_custom() -> None:
    for build, expected in (
        (lambda s: s.global_().parallelism_hint(3), [6, 0, 0]),
        (lambda s: s.shuffle().parallelism_hint(3), [2, 2, 2]),
        (lambda s: s.broadcast().parallelism_hint(2), [6, 6]),
        (
            lambda s: s.partition(lambda row, n: [0 if row[0] == "ann" else 1]).parallelism_hint(2),
            [3, 3],
        ),
    ):
        t, s = plays()
        out = build(s).partition_aggregate([], Count(), ["n"])
        assert [n for (n,) in outputs(t, out, PLAYS, partitions=2)] == expected


def test_min_max_by() -> None:
    t, s = plays()
    lo = s.min_by("score")
    hi = s.max_by("score")
    assert outputs(t, lo, PLAYS, 2) == [("cid", 1)]
    assert outputs(t, hi, PLAYS, 2) == [("ann", 5)]
    t, s = plays()
    assert outputs(t, s.max(lambda v: -v[1]), PLAYS) == [("cid", 1)]


def test_merge_and_join() -> None:
    t = TridentTopology("joins")
    a = t.new_stream("a", FixedBatchSpout(["user", "score"], 10, *PLAYS))
    b = t.new_stream("b", FixedBatchSpout(["name", "city"], 10, ("ann", "Oslo"), ("dan", "Rome")))
    joined = t.join([a, b], [["user"], ["name"]], ["user", "score", "city"])
    outer = t.join(
        [a, b],
        [["user"], ["name"]],
        ["user", "score", "city"],
        join_types=["outer", "inner"],
        name="outer_join",
    )
    merged = t.merge(a.project(["user"]), b.project(["name"]))
    processor = LocalBatchProcessor(t)
    result = processor.process(
        1, {"a": {"0": list(PLAYS)}, "b": {"0": [("ann", "Oslo"), ("dan", "Rome")]}}
    )

    def rows(stream: Stream) -> list[tuple[Any, ...]]:
        stage = next(s for s in processor.plan.stages if s.ops and s.ops[-1].id == stream.node_id)
        return sorted(r for p in result.outputs[stage.id] for r in p)

    assert rows(joined) == [("ann", 1, "Oslo"), ("ann", 3, "Oslo"), ("ann", 5, "Oslo")]
    assert rows(outer)[-1] == ("dan", None, "Rome")
    assert len(rows(merged)) == 8


def word_count(name: str = "wc") -> tuple[TridentTopology, Any]:
    t = TridentTopology(name)
    spout = MemoryTransactionalSpout({"p0": SENTENCES[:2], "p1": SENTENCES[2:]}, ["sentence"], 1)
    counts = (
        t.new_stream("sentences", spout)
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(
            memory_state(f"{name}_counts", "transactional"), Count(), ["count"], name="counts"
        )
    )
    return t, counts


def test_persistent_aggregate_grouped_counts_exactly_once() -> None:
    t, _ = word_count()
    runner = LocalRunner(t)
    reports = [runner.run_batch(run_id=f"r{i}") for i in (1, 2, 2, 3)]  # r2 retried
    assert [r.txid for r in reports] == [1, 2, 2, 3]
    expected = Counter(w for (s,) in SENTENCES for w in s.split())
    state = runner.state("counts")
    assert dict(zip(expected, state.multi_get([(w,) for w in expected]), strict=True)) == expected


def test_persistent_aggregate_global_and_reducer() -> None:
    t = TridentTopology("global_count")
    s = t.new_stream("plays", MemoryTransactionalSpout({"p0": PLAYS}, ["user", "score"], 4))
    s.persistent_aggregate(memory_state("g_count"), Count(), ["count"], name="count")
    s.persistent_aggregate(memory_state("g_total"), ["score"], Total(), ["total"], name="total")
    s.group_by(["user"]).persistent_aggregate(
        memory_state("g_low"), ["score"], Min(), ["low"], name="low"
    )
    runner = LocalRunner(t)
    runner.run(3)  # the third batch is empty
    assert runner.state("count").get() == 6
    assert runner.state("total").get() == 16
    assert runner.state("low").multi_get([("ann",), ("bob",)]) == [1, 2]


class Remember(StateUpdater[Any]):
    def update_state(
        self, state: Any, tuples: Sequence[TridentTuple], collector: TridentCollector
    ) -> None:
        keys = [(t[0],) for t in tuples]
        state.multi_put(keys, [t[1] for t in tuples])
        for t in tuples:
            collector.emit((t[0], t[1]))


def test_partition_persist_and_new_values_stream() -> None:
    t, s = plays()
    latest = s.partition_persist(
        memory_state("latest"), ["user", "score"], Remember(), ["user", "score"], name="latest"
    )
    seen = Collect()
    latest.new_values_stream().peek(seen)
    runner = LocalRunner(t)
    runner.run_batch()
    assert runner.state("latest").multi_get([("ann",), ("cid",)]) == [1, 1]
    assert seen.seen == list(PLAYS)


def test_state_query_reads_committed_counts() -> None:
    t, counts = word_count("wcq")
    query = (
        t.new_drpc_stream("counts_of")
        .each(["args"], Split(), ["word"])
        .state_query(counts, ["word"], MapGet(), ["count"])
        .project(["word", "count"])
    )
    runner = LocalRunner(t)
    runner.run(4)
    assert runner.drpc("counts_of", "the moon zebra") == [("the", 4), ("moon", 1), ("zebra", None)]
    assert query.fields == ("word", "count")


class Explode(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        if tuple_[0] == "bob":
            raise ValueError("bob is not allowed")
        collector.emit((1,))


class Flaky(Function):
    calls = 0

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        Flaky.calls += 1
        if Flaky.calls == 1:
            raise FailedException("source not ready, replay this batch")
        collector.emit((1,))


def test_failing_function_fails_the_batch_naming_step_txid_record() -> None:
    t, s = plays()
    s.each(["user"], Explode(), ["one"], name="explode").group_by(["user"]).persistent_aggregate(
        memory_state("boom"), Count(), ["n"], name="boom"
    )
    runner = LocalRunner(t)
    with pytest.raises(BatchFailedError, match=r"step 'explode' .* txid 1 .*'bob', 4.*not allowed"):
        runner.run_batch(run_id="r1")
    assert runner.store.commits.committed_txid() == 0
    assert runner.state("boom").multi_get([("ann",)]) == [None]


def test_failed_exception_fails_only_that_batch_which_is_replayed() -> None:
    # Given a function raising FailedException on its first call
    Flaky.calls = 0
    t, s = plays()
    s.each(["user"], Flaky(), ["one"], name="flaky_step").persistent_aggregate(
        memory_state("flaky"), Count(), ["n"], name="flaky"
    )
    runner = LocalRunner(t)
    # When the batch runs
    with pytest.raises(BatchFailedError) as failed:
        runner.run_batch(run_id="r1")
    # Then it fails as a batch failure naming the step and txid, the user's exception kept
    assert str(failed.value).startswith(
        "step 'flaky_step' failed in batch txid 1 on record ('ann', 3): FailedException: "
        "source not ready, replay this batch; the batch is not committed"
    )
    assert isinstance(failed.value.__cause__, FailedException)
    # And the replay of the same txid commits, numbered as a cleared DAG run's (begin 2,
    # processing attempt 3; the failed run processed as attempt 1)
    report = runner.run_batch(run_id="r1")
    assert (report.txid, report.attempt_id, runner.state("flaky").get()) == (1, 3, 6)


def test_failed_exception_in_an_aggregator_names_the_step() -> None:
    # Given an aggregator that fails the batch on purpose
    class Refuse(Users):
        def complete(self, state: set[str], collector: TridentCollector) -> None:
            raise FailedException("totals are not ready")

    t, s = plays()
    out = s.partition_aggregate(["user"], Refuse(), ["user"], name="refuse")
    # When the batch is processed
    with pytest.raises(BatchFailedError, match=r"^step 'refuse' failed in batch txid 1: Failed"):
        outputs(t, out, PLAYS)


class Tracked(Function):
    """Records prepare / execute / cleanup, and refuses tuples outside prepare..cleanup."""

    events: ClassVar[list[tuple[Any, ...]]] = []

    def __init__(self, fail_on: str | None = None) -> None:
        self.fail_on = fail_on
        self.open = False

    def prepare(self, context: OperationContext) -> None:
        self.open = True
        where = (context.topology, context.step, context.txid)
        Tracked.events.append(("prepare", *where, context.partition_index, context.num_partitions))

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        if not self.open:
            raise AssertionError("execute outside prepare() .. cleanup()")
        if tuple_[0] == self.fail_on:
            raise ValueError(f"{self.fail_on} is not allowed")
        Tracked.events.append(("execute", tuple_[0]))
        collector.emit((1,))

    def cleanup(self) -> None:
        self.open = False
        Tracked.events.append(("cleanup",))


class TrackedCount(Count):
    events: ClassVar[list[str]] = []

    def prepare(self, context: OperationContext) -> None:
        TrackedCount.events.append(f"prepare {context.step} {context.partition_index}")

    def cleanup(self) -> None:
        TrackedCount.events.append("cleanup")


def test_prepare_and_cleanup_bracket_each_partition_of_an_operation() -> None:
    # Given a tracked function over a batch of three source partitions
    Tracked.events = []
    t, s = plays()
    out = s.each(["user"], Tracked(), ["one"], name="tracked")
    # When the batch is processed
    outputs(t, out, PLAYS, partitions=3)
    # Then each partition is prepared once before its first tuple and cleaned up after its last
    assert Tracked.events == [
        ("prepare", "plays", "tracked", 1, 0, 3),
        ("execute", "ann"),
        ("execute", "cid"),
        ("cleanup",),
        ("prepare", "plays", "tracked", 1, 1, 3),
        ("execute", "bob"),
        ("execute", "bob"),
        ("cleanup",),
        ("prepare", "plays", "tracked", 1, 2, 3),
        ("execute", "ann"),
        ("execute", "ann"),
        ("cleanup",),
    ]


def test_aggregators_are_prepared_in_each_stage_that_runs_them() -> None:
    # Given a combiner counted per partition, then combined after the repartition
    TrackedCount.events = []
    t, s = plays()
    out = s.aggregate([], TrackedCount(), ["n"], name="n")
    # When a batch of two partitions runs
    assert outputs(t, out, PLAYS, partitions=2) == [(6,)]
    # Then the partial step is prepared per partition, the final step once, each cleaned up
    assert TrackedCount.events == [
        "prepare n.partial 0",
        "cleanup",
        "prepare n.partial 1",
        "cleanup",
        "prepare n 0",
        "cleanup",
    ]


def test_cleanup_runs_when_the_batch_fails() -> None:
    # Given a tracked function that fails on bob
    Tracked.events = []
    t, s = plays()
    out = s.each(["user"], Tracked(fail_on="bob"), ["one"], name="tracked")
    # When the batch fails
    with pytest.raises(BatchFailedError, match=r"step 'tracked' .*txid 1.*bob is not allowed"):
        outputs(t, out, PLAYS)
    # Then the operation was still cleaned up, once
    assert Tracked.events == [
        ("prepare", "plays", "tracked", 1, 0, 1),
        ("execute", "ann"),
        ("cleanup",),
    ]


def test_a_failing_prepare_or_cleanup_fails_the_batch_naming_the_step() -> None:
    class BadPrepare(Tracked):
        def prepare(self, context: OperationContext) -> None:
            raise ConnectionError("lookup service down")

    class BadCleanup(Tracked):
        def cleanup(self) -> None:
            raise OSError("cannot close the file")

    t, s = plays()
    out = s.each(["user"], BadPrepare(), ["one"], name="bad_prepare")
    with pytest.raises(
        BatchFailedError,
        match=r"^step 'bad_prepare' failed in batch txid 1: prepare\(\) raised ConnectionError",
    ):
        outputs(t, out, PLAYS)
    t, s = plays()
    out = s.each(["user"], BadCleanup(), ["one"], name="bad_cleanup")
    with pytest.raises(
        BatchFailedError,
        match=r"^step 'bad_cleanup' failed in batch txid 1: cleanup\(\) raised OSError",
    ):
        outputs(t, out, PLAYS)


def test_graph_errors_name_the_step() -> None:
    _t, s = plays()
    with pytest.raises(TopologyError, match=r"step 'each': unknown field\(s\) \['nope'\]"):
        s.each(["nope"], Upper(), ["x", "y"])
    s.each(["user"], Upper(), ["u", "n"], name="upper")
    with pytest.raises(TopologyError, match="step 'upper' already exists"):
        s.each(["user"], Upper(), ["u", "n"], name="upper")


def test_building_runs_nothing_and_plan_ids_are_stable() -> None:
    class Exploding(MemoryTransactionalSpout):
        def get_partitioned_coordinator(self) -> Any:  # pragma: no cover
            raise AssertionError("building a topology must not plan batches")

        def get_partitioned_emitter(self) -> Any:  # pragma: no cover
            raise AssertionError("building a topology must not emit")

    def build() -> str:
        t = TridentTopology("stable")
        (
            t.new_stream("s", Exploding({"p0": [("a",)]}, ["w"], 1))
            .each(["w"], Upper(), ["u", "n"])
            .group_by(["u"])
            .persistent_aggregate(memory_state("stable"), Count(), ["c"])
        )
        return build_plan(t).describe()

    assert build() == build()


def test_persistent_aggregate_stages_one_combined_row_per_group() -> None:
    # Given partials from two source partitions
    t, _ = word_count("wc_rows")
    processor = LocalBatchProcessor(t)
    result = processor.process(1, {"sentences": {"p0": [("a b a",)], "p1": [("d a",)]}})
    # Then each word is staged once, with its whole-batch count
    assert sorted(r for p in result.staged["counts"].partitions for r in p) == [
        ("a", 3),
        ("b", 1),
        ("d", 1),
    ]
