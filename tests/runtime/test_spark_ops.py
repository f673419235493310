"""Each operation on the Spark runtime against the local runtime (the reference semantics)."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pytest

from airflow_trident.errors import BatchFailedError, ConfigurationError, FailedException
from airflow_trident.operation import (
    Aggregator,
    CombinerAggregator,
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
from airflow_trident.runtime.local import LocalBatchProcessor
from airflow_trident.runtime.result import ProcessResult
from airflow_trident.runtime.spark import SparkBatchProcessor, SparkProcessResult
from airflow_trident.spout.memory import FixedBatchSpout, MemoryTransactionalSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.stream import Stream
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentCollector, TridentTuple

Row = tuple[Any, ...]
PLAYS = {
    "p0": [("ann", 3, "the cow"), ("bob", 4, " jumped\tover "), ("ann", 5, None)],
    "p1": [],
    "p2": [("cid", 1, "the\xa0moon\u3000 and\x1cstars"), ("bob", 2, ""), ("dan", 7, "a  b")],
}


def stream(name: str = "t") -> tuple[TridentTopology, Stream]:
    t = TridentTopology(name)
    spout = MemoryTransactionalSpout({"p0": []}, ["user", "score", "text"], 3)  # tests give rows
    return t, t.new_stream("plays", spout)


def canonical(value: Any) -> Any:
    """Dicts and sets in a fixed order (their equality ignores it, ``repr`` does not)."""
    if isinstance(value, dict):
        return ("dict", sorted((repr(k), canonical(v)) for k, v in value.items()))
    if isinstance(value, set | frozenset):
        return ("set", sorted(repr(v) for v in value))
    if isinstance(value, tuple | list):
        return tuple(canonical(v) for v in value)
    return value


def multiset(rows: Iterable[Sequence[Any]]) -> Counter[str]:
    return Counter(repr(canonical(tuple(r))) for r in rows)


def run_both(
    spark: Any,
    t: TridentTopology,
    sources: Any = None,
    txid: int = 1,
    outputs: Sequence[str] = (),
    **kwargs: Any,
) -> tuple[ProcessResult, SparkProcessResult]:
    """Batch ``txid`` on both runtimes (Spark keeps every field of ``outputs`` stages only)."""
    sources = {"plays": PLAYS} if sources is None else sources
    local = LocalBatchProcessor(t).process(txid, sources)
    processor = SparkBatchProcessor(t, **kwargs)
    return local, processor.process(spark, txid, sources, outputs=outputs)


def last_rows(
    local: ProcessResult, remote: SparkProcessResult, stage: str | None = None
) -> tuple[Counter[str], Counter[str]]:
    """A stage's output tuples (the last stage's by default) on both runtimes."""
    stage = stage or remote.stages[-1]
    expected = multiset(r for part in local.outputs[stage] for r in part)
    return expected, multiset(remote.output_rows(stage))


def plan_of(df: Any) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain()
    return out.getvalue()


class Upper(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((tuple_[0].upper(),))


class HighScore(Filter):
    def is_keep(self, tuple_: TridentTuple) -> bool:
        return bool(tuple_[0] > 2)


class Swap(MapFunction):
    def execute(self, tuple_: TridentTuple) -> Sequence[Any]:
        return (tuple_.get("score"), tuple_.get("user"))


class Twice(FlatMapFunction):
    def execute(self, tuple_: TridentTuple) -> Iterable[Sequence[Any]]:
        return [tuple_.values, tuple_.values]


class Look(Consumer):
    def accept(self, tuple_: TridentTuple) -> None:
        assert len(tuple_) == 2


class Names(CombinerAggregator[Any]):
    """A set of names: Arrow cannot type sets, so the partials travel pickled."""

    def init(self, tuple_: TridentTuple) -> Any:
        return {tuple_[0]}

    def combine(self, val1: Any, val2: Any) -> Any:
        return val1 | val2

    def zero(self) -> Any:
        return set()


class Concat(ReducerAggregator[str]):
    def init(self) -> str:
        return ""

    def reduce(self, curr: str, tuple_: TridentTuple) -> str:
        return "".join(sorted(curr + tuple_[0]))


class PerUser(Aggregator[dict[str, int]]):
    """Seed 003's per-partition aggregator: counts per user, emitted as one map."""

    def init(self, batch_id: int, collector: TridentCollector) -> dict[str, int]:
        return {}

    def aggregate(
        self, state: dict[str, int], tuple_: TridentTuple, collector: TridentCollector
    ) -> dict[str, int]:
        state[tuple_[0]] = state.get(tuple_[0], 0) + 1
        return state

    def complete(self, state: dict[str, int], collector: TridentCollector) -> None:
        collector.emit((state,))


def test_split_runs_as_spark_sql_with_python_whitespace(spark: Any) -> None:
    # Given sentences with tabs, no-break and ideographic spaces, separators and a None
    t, s = stream()
    s.each(["text"], Split(), ["word"]).project(["user", "word"])
    # When both runtimes split them
    local, remote = run_both(spark, t)
    expected, got = last_rows(local, remote)
    # Then the words are str.split()'s, with no Python worker involved
    assert got == expected
    assert "('cid', 'stars')" in got
    assert "('ann', 'None')" not in got  # None has no words (on both runtimes)
    assert "MapInArrow" not in plan_of(remote.output(remote.stages[-1]))


def test_split_whitespace_is_pythons_for_every_character(spark: Any) -> None:
    # Given "a<c>b" for every character of the basic multilingual plane
    t = TridentTopology("chars")
    t.new_stream("chars", FixedBatchSpout(["s"], 1, ("a",))).each(["s"], Split(), ["w"])
    chars = [chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF]
    sources = {"chars": {"0": [(f"a{c}b",) for c in chars]}}
    remote = SparkBatchProcessor(t).process(spark, 1, sources)
    # Then Spark splits exactly where str.split() does
    words = Counter(row[1] for row in remote.output_rows(remote.stages[-1]))
    spaces = sum(c.isspace() for c in chars)
    assert spaces == 29
    assert words["a"] == words["b"] == spaces
    assert sum(words.values()) == 2 * spaces + len(chars) - spaces


def test_python_steps_fuse_into_one_arrow_map(spark: Any) -> None:
    # Given a function, a filter, a map, a flat map, a peek and a projection
    t, s = stream()
    (
        s.each(["user"], Upper(), ["upper"])
        .filter(["score"], HighScore())
        .project(["user", "score"])
        .map(Swap(), ["score", "user"])
        .flat_map(Twice(), ["s", "u"])
        .peek(Look())
    )
    local, remote = run_both(spark, t)
    expected, got = last_rows(local, remote)
    # Then the rows are the local runtime's, computed by two Arrow maps (the projection splits)
    assert got == expected
    assert sum(got.values()) == 8
    assert plan_of(remote.output(remote.stages[-1])).count("MapInArrow") == 2


def test_builtin_aggregations_stage_one_row_per_group(spark: Any) -> None:
    # Given chained built-in aggregations per user and a grouped persistent Sum
    t, s = stream()
    (
        s.group_by(["user"])
        .chained_agg()
        .aggregate([], Count(), ["n"])
        .aggregate(["score"], Sum(), ["total"])
        .aggregate(["score"], Min(), ["low"])
        .aggregate(["score"], Max(), ["high"])
        .chain_end()
    )
    s.group_by(["user"]).persistent_aggregate(
        memory_state("scores"), ["score"], Sum(), ["sum"], name="scores"
    )
    local, remote = run_both(spark, t, outputs=["stage_3"])
    expected, got = last_rows(local, remote, "stage_3")
    assert got == expected
    assert got[repr(("ann", 2, 8, 3, 5))] == 1
    # Then the staged Sum has one combined row per user, computed by Spark alone
    staged = remote.collect("scores")
    assert sorted(staged.partitions[0]) == [("ann", 8), ("bob", 6), ("cid", 1), ("dan", 7)]
    assert "MapInArrow" not in plan_of(remote.staged["scores"].frame)


def test_user_combiner_values_travel_pickled(spark: Any) -> None:
    # Given a combiner of sets (Arrow has no set type)
    t, s = stream()
    s.group_by(["score"]).persistent_aggregate(
        memory_state("names"), ["user"], Names(), ["names"], name="names"
    )
    s.persistent_aggregate(memory_state("all_names"), ["user"], Names(), ["all"], name="all")
    local, remote = run_both(spark, t)
    # Then the staged rows are the sets, one per group, after combining
    staged = remote.collect("names")
    assert remote.staged["names"].pickled == frozenset({"names"})
    assert dict((k, v) for k, v in staged.partitions[0]) == {
        3: {"ann"},
        4: {"bob"},
        5: {"ann"},
        1: {"cid"},
        2: {"bob"},
        7: {"dan"},
    }
    assert remote.collect("all").partitions == [[({"ann", "bob", "cid", "dan"},)]]
    local_all = set().union(*(r[0] for p in local.staged["all"].partitions for r in p))
    assert local_all == {"ann", "bob", "cid", "dan"}


def test_partition_aggregate_sees_each_source_partition(spark: Any) -> None:
    # Given three source partitions, one of them empty, read by two per-partition counts
    t, s = stream()
    s.partition_aggregate([], Count(), ["n"])
    s.each(["user"], Upper(), ["u"]).partition_aggregate([], Count(), ["n"])
    local, remote = run_both(spark, t)
    # Then every partition, the empty one too, counts its tuples (Trident's per-task batches)
    for stage in remote.stages[1:]:
        expected, got = last_rows(local, remote, stage)
        assert got == expected == multiset([(3,), (0,), (3,)])


def test_partition_aggregate_after_a_spark_aggregation_gets_the_hinted_partitions(
    spark: Any,
) -> None:
    # Given a built-in grouped count in 2 partitions, then a count per partition
    t, s = stream()
    s.group_by(["user"]).aggregate([], Count(), ["n"]).parallelism_hint(2).partition_aggregate(
        [], Count(), ["groups"]
    )
    _, remote = run_both(spark, t)
    rows = remote.output_rows(remote.stages[-1])
    # Then there are exactly two partitions holding the four groups (Spark hashes, not CRC32)
    assert len(rows) == 2
    assert sum(r[0] for r in rows) == 4


def test_empty_batch_ungrouped_aggregates_emit_zero_once(spark: Any) -> None:
    # Given an empty batch and ungrouped/grouped aggregations, built-in and user-defined
    t, s = stream()
    s.persistent_aggregate(memory_state("count"), Count(), ["n"], name="count")
    s.persistent_aggregate(memory_state("names0"), ["user"], Names(), ["v"], name="names0")
    s.persistent_aggregate(memory_state("concat"), ["user"], Concat(), ["v"], name="concat")
    s.group_by(["user"]).persistent_aggregate(memory_state("g"), Count(), ["n"], name="grouped")
    s.aggregate(["user"], Concat(), ["joined"])
    local, remote = run_both(spark, t, {"plays": {}})
    # Then each ungrouped combiner stages zero() exactly once, the grouped one nothing
    assert remote.collect("count").partitions == [[(0,)]]
    assert remote.collect("names0").partitions == [[(set(),)]]
    assert remote.collect("grouped").partitions == [[]]
    assert remote.collect("concat").partitions == [[]]
    expected, got = last_rows(local, remote)
    assert got == expected == multiset([("",)])
    assert local.staged["count"].partitions == [[(0,)]]


@pytest.mark.parametrize(
    ("move", "expected"),
    [
        (lambda s: s.broadcast().parallelism_hint(3), [(6,), (6,), (6,)]),
        (lambda s: s.partition(lambda row, n: [row[1] % n]).parallelism_hint(2), [(2,), (4,)]),
        (lambda s: s.batch_global(), [(6,)]),
    ],
    ids=["broadcast", "custom", "batch_global"],
)
def test_repartitions_give_trident_partitions(
    spark: Any, move: Callable[[Stream], Stream], expected: list[Row]
) -> None:
    # Given a repartition, then a per-partition count
    t, s = stream()
    move(s).partition_aggregate([], Count(), ["n"])
    local, remote = run_both(spark, t)
    got, want = last_rows(local, remote)
    # Then partitions hold what the local runtime puts in them
    assert got == want == multiset(expected)


def test_shuffle_and_partition_by_keep_every_tuple(spark: Any) -> None:
    t, s = stream()
    s.shuffle().parallelism_hint(2).each(["user"], Upper(), ["u"]).partition_by(["u"]).project(
        ["u", "score"]
    )
    local, remote = run_both(spark, t)
    expected, got = last_rows(local, remote)
    assert got == expected


def test_merge_and_joins(spark: Any) -> None:
    # Given two streams with a user key, merged, inner-joined and outer-joined
    t = TridentTopology("j")
    a = t.new_stream("a", FixedBatchSpout(["user", "score"], 3, ("ann", 1)))
    b = t.new_stream("b", FixedBatchSpout(["name", "city"], 3, ("ann", "x")))
    t.merge(a, b.project(["name", "city"]))
    t.join([a, b], [["user"], ["name"]], ["key", "score", "city"])
    t.join([a, b], [["user"], ["name"]], ["k", "s", "c"], join_types="outer")
    sources = {
        "a": {"0": [("ann", 1), ("bob", 2), ("ann", 3), (None, 9)]},
        "b": {"0": [("ann", "paris"), ("cid", "oslo")], "1": [(None, "nowhere")]},
    }
    local = LocalBatchProcessor(t).process(1, sources)
    stages = [s.id for s in SparkBatchProcessor(t).plan.stages]
    remote = SparkBatchProcessor(t).process(spark, 1, sources, outputs=stages)
    # Then every stage output matches (None keys join each other, as Python's dict does)
    for stage in stages[-3:]:
        expected = multiset(r for part in local.outputs[stage] for r in part)
        assert multiset(remote.output_rows(stage)) == expected, stage
    inner = multiset(remote.output_rows(stages[-2]))
    assert inner == multiset([("ann", 1, "paris"), ("ann", 3, "paris"), (None, 9, "nowhere")])


def test_reducer_and_updater_stage_their_input_fields(spark: Any) -> None:
    class Keep(StateUpdater[Any]):
        def update_state(self, state: Any, tuples: Any, collector: TridentCollector) -> None:
            return None

    t, s = stream()
    s.group_by(["user"]).persistent_aggregate(
        memory_state("r"), ["text"], Concat(), ["c"], name="reduced"
    )
    s.partition_persist(memory_state("u"), ["score", "user"], Keep(), name="updated")
    local, remote = run_both(spark, t)
    for name in ("reduced", "updated"):
        staged = remote.collect(name)
        assert (staged.kind, staged.fields) == (local.staged[name].kind, local.staged[name].fields)
        assert multiset(staged.partitions[0]) == multiset(
            r for part in local.staged[name].partitions for r in part
        )


def test_seed_003_partition_then_global_aggregate(spark: Any) -> None:
    # Given partition_by(user) -> partition_aggregate(per-user map) x3 -> global -> aggregate
    t, s = stream()
    (
        s.partition_by(["user"])
        .partition_aggregate(["user"], PerUser(), ["counts"])
        .parallelism_hint(3)
        .global_()
        .aggregate(["counts"], MergeCounts(), ["agg"])
    )
    local, remote = run_both(spark, t)
    expected, got = last_rows(local, remote)
    # Then the one merged map counts every user, as locally (maps arrive as dicts)
    assert got == expected == multiset([({"ann": 2, "bob": 2, "cid": 1, "dan": 1},)])
    # And the partition_aggregate ran in exactly 3 partitions, as the hint says
    stages = SparkBatchProcessor(t).plan.stages
    assert stages[1].parallelism == 3


class MergeCounts(CombinerAggregator[dict[str, int]]):
    def init(self, tuple_: TridentTuple) -> dict[str, int]:
        return dict(tuple_[0])

    def combine(self, val1: dict[str, int], val2: dict[str, int]) -> dict[str, int]:
        out = dict(val1)
        for k, v in val2.items():
            out[k] = out.get(k, 0) + v
        return out

    def zero(self) -> dict[str, int]:
        return {}


class Late(Function):
    """``None`` in the sample, ints later: the inferred type cannot hold them."""

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((None if tuple_[0] < 4 else tuple_[0] * 10,))


class PinnedLate(Late):
    output_types: ClassVar[dict[str, pa.DataType]] = {"tens": pa.int64()}


def test_output_types_pin_what_the_sample_cannot_show(spark: Any) -> None:
    sources = {"plays": {"p0": [("ann", 3, "a"), ("bob", 5, "b")]}}
    t, s = stream()
    s.each(["score"], Late(), ["tens"])
    _, remote = run_both(spark, t, sources, sample_rows=1)
    with pytest.raises(BatchFailedError, match=r"'Late'.*txid 1.*output_types"):
        remote.output_rows(remote.stages[-1])
    t, s = stream()
    s.each(["score"], PinnedLate(), ["tens"])
    local, remote = run_both(spark, t, sources, sample_rows=1)
    expected, got = last_rows(local, remote)
    assert got == expected == multiset([("ann", 3, "a", None), ("bob", 5, "b", 50)])


class Boom(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        if tuple_[0] == "dan":
            raise ZeroDivisionError("no dan")
        collector.emit((1,))


class Stop(Filter):
    def is_keep(self, tuple_: TridentTuple) -> bool:
        if tuple_[0] == 7:
            raise FailedException("stop at seven")
        return True


def test_a_failing_record_fails_the_batch_like_locally(spark: Any) -> None:
    # Given a function raising on one record that is not in the driver's sample
    t, s = stream()
    s.each(["user"], Boom(), ["one"], name="boom").group_by(["one"]).persistent_aggregate(
        memory_state("b"), Count(), ["n"], name="b"
    )
    with pytest.raises(BatchFailedError) as local_error:
        LocalBatchProcessor(t).process(7, {"plays": PLAYS})
    remote = SparkBatchProcessor(t, sample_rows=1).process(spark, 7, {"plays": PLAYS})
    # When the staged rows are computed
    with pytest.raises(BatchFailedError) as spark_error:
        remote.collect("b")
    # Then the error names the step, the txid and the record as locally (fields the step does
    # not read were not shipped to the worker: they show as <pruned>)
    pruned = str(local_error.value).replace("7, 'a  b'", "<pruned>, <pruned>")
    assert str(spark_error.value) == pruned
    message = str(spark_error.value)
    for part in ("'boom'", "txid 7", "('dan', <pruned>, <pruned>)", "ZeroDivisionError: no dan"):
        assert part in message
    # And a FailedException fails the batch naming the step and txid, as locally
    t, s = stream()
    s.filter(["score"], Stop(), name="stop").project(["user"])
    remote = SparkBatchProcessor(t, sample_rows=1).process(spark, 2, {"plays": PLAYS})
    with pytest.raises(BatchFailedError) as failed:
        remote.output_rows(remote.stages[-1])
    assert str(failed.value).startswith(
        "step 'stop' failed in batch txid 2 on record ('dan', 7, <pruned>): "
        "FailedException: stop at seven; the batch is not committed"
    )


class Logged(Function):
    """Appends prepare / cleanup to a file (Spark's Python workers are other processes);
    refuses tuples outside prepare() .. cleanup()."""

    def __init__(self, log: Path, fail_on: str | None = None) -> None:
        self.log = str(log)
        self.fail_on = fail_on
        self.open = False
        self.token = ""

    def _write(self, *parts: Any) -> None:
        with open(self.log, "a", encoding="utf-8") as out:
            out.write(" ".join(str(p) for p in parts) + "\n")

    def prepare(self, context: OperationContext) -> None:
        self.open, self.token = True, uuid.uuid4().hex
        self._write("prepare", self.token, os.getpid(), context.topology, context.step)
        self._write("where", self.token, context.txid, context.partition_index)

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        if not self.open:
            raise AssertionError("execute outside prepare() .. cleanup()")
        if tuple_[0] == self.fail_on:
            self._write("fail", self.token)
            raise ValueError(f"{self.fail_on} is not allowed")
        collector.emit((1,))

    def cleanup(self) -> None:
        self.open = False
        self._write("cleanup", self.token, os.getpid())


def worker_events(log: Path) -> dict[str, list[list[str]]]:
    """The events of the Python workers (not the driver's sample), by token."""
    lines = [line.split() for line in log.read_text(encoding="utf-8").splitlines()]
    workers = {p[1] for p in lines if p[0] == "prepare" and p[2] != str(os.getpid())}
    events: dict[str, list[list[str]]] = {}
    for parts in lines:
        if parts[1] in workers:
            events.setdefault(parts[1], []).append(parts)
    return events


def test_python_steps_prepare_and_clean_up_once_per_task(spark: Any, tmp_path: Path) -> None:
    # Given a logged function over one partition of 25,000 tuples (several Arrow batches)
    log = tmp_path / "events.log"
    t, s = stream("logged")
    s.each(["user"], Logged(log), ["one"], name="logged")
    rows = [(f"u{i}", i, "x") for i in range(25_000)]
    remote = SparkBatchProcessor(t).process(spark, 4, {"plays": {"p0": rows}})
    # When Spark computes the step
    assert len(remote.output_rows(remote.stages[-1])) == 25_000
    # Then every worker task prepared once, before its tuples, and cleaned up once after
    events = worker_events(log)
    assert events, "no Python worker ran the step"
    kinds = sorted(tuple(e[0] for e in task) for task in events.values())
    assert set(kinds) == {("prepare", "where", "cleanup")}
    prepares = [task[0] for task in events.values()]
    assert {(p[3], p[4]) for p in prepares} == {("logged", "logged")}
    where = [task[1] for task in events.values()]
    assert {w[2] for w in where} == {"4"}
    partitions = [w[3] for w in where]
    assert len(partitions) == len(set(partitions)), "a partition was prepared twice"


def test_python_steps_clean_up_when_the_batch_fails(spark: Any, tmp_path: Path) -> None:
    # Given a logged function that fails on dan, not in the driver's sample
    log = tmp_path / "events.log"
    t, s = stream("logged_fail")
    s.each(["user"], Logged(log, fail_on="dan"), ["one"], name="logged")
    remote = SparkBatchProcessor(t, sample_rows=1).process(spark, 5, {"plays": PLAYS})
    # When the batch fails on Spark
    with pytest.raises(BatchFailedError, match=r"step 'logged' .*txid 5.*dan is not allowed"):
        remote.output_rows(remote.stages[-1])
    # Then the failing task still cleaned up (other tasks may have been cancelled meanwhile)
    kinds = [[e[0] for e in task] for task in worker_events(log).values()]
    failed = [k for k in kinds if "fail" in k]  # the local re-run of the record fails again
    assert [list(dict.fromkeys(k)) for k in failed] == [["prepare", "where", "fail", "cleanup"]]
    assert failed[0][-1] == "cleanup"
    assert failed[0].count("cleanup") == 1


SQL_FILE = Path(tempfile.gettempdir()) / "airflow_trident_spark_state_query.db"


def query_topology() -> TridentTopology:
    """Totals per user in SQLite, queried per tuple (the workers import this by reference)."""
    from airflow_trident.state.sql import sql_state

    t, s = stream("query")
    totals = s.group_by(["user"]).persistent_aggregate(
        sql_state(f"sqlite:///{SQL_FILE}", "totals", "opaque"),
        ["score"],
        Sum(),
        ["total"],
        name="totals",
    )
    s.state_query(totals, ["user"], MapGet(), ["total"]).project(["user", "total"])
    return t


class LockedFactory:
    """A state factory that cannot be pickled (it holds a lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def make_state(self, partition_index: int = 0, num_partitions: int = 1) -> Any:
        return memory_state("locked").make_state(partition_index, num_partitions)


def test_state_query_reads_a_sql_state_in_the_workers(spark: Any) -> None:
    from airflow_trident.runtime.commit import StateCommitter

    # Given committed totals in a SQL state
    SQL_FILE.unlink(missing_ok=True)
    t = query_topology()
    first = LocalBatchProcessor(t).process(1, {"plays": PLAYS})
    committer = StateCommitter(t)
    states = committer.make_states(first.staged)
    for state, apply in committer.updates(first.staged, states, {}):
        state.begin_commit(1)
        apply()
        state.commit(1)
    # When the workers query it, with the persist step pickled or the topology imported
    for reference in (None, f"{__name__}:query_topology"):
        local, remote = run_both(spark, t, txid=2, reference=reference)
        expected, got = last_rows(local, remote)
        # Then they read the committed totals
        assert got == expected
        assert got[repr(("ann", 8))] == 2


def test_state_query_of_an_unpicklable_state_asks_for_a_reference(spark: Any) -> None:
    t, s = stream()
    locked = s.group_by(["user"]).persistent_aggregate(
        LockedFactory(), ["score"], Sum(), ["total"], name="locked"
    )
    s.state_query(locked, ["user"], MapGet(), ["total"])
    with pytest.raises(ConfigurationError, match=r"'locked'.*reference='module:attribute'"):
        SparkBatchProcessor(t).process(spark, 1, {"plays": PLAYS})
