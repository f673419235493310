"""DRPC requests against committed state: seed 001's word count, the stream API on a DRPC
stream, commits paused mid-way, and the errors a request can meet."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from airflow_trident.batch.runner import LocalRunner
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.drpc import DRPCExecutor
from airflow_trident.errors import (
    DRPCArgumentsError,
    DRPCCommitInProgressError,
    DRPCUnknownFunctionError,
    StateStoreUnavailableError,
    TopologyError,
)
from airflow_trident.operation import (
    Count,
    FilterNull,
    Function,
    MapGet,
    QueryFunction,
    Split,
    Sum,
    TupleCollectionGet,
)
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.memory import memory_state
from airflow_trident.state.sql import sql_state
from airflow_trident.stream import TridentState
from airflow_trident.testing.fault_points import FaultInjector, FaultyStateFactory, FaultyStore
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentCollector, TridentTuple

SEED_SENTENCES = [("how are you",), ("nice to meet you",), ("what a good day",)]
SEED_WORDS = ["how", "are", "you", "nice", "to", "meet", "what", "a", "good", "day"]


class QueryWordCountDB(QueryFunction[Any, int]):
    """Seed 001's ``QueryWordCountDB``: a word never seen counts 0."""

    def batch_retrieve(self, state: Any, args: Sequence[TridentTuple]) -> list[int]:
        return [0 if c is None else c for c in state.multi_get([t.values for t in args])]

    def execute(self, tuple_: TridentTuple, result: int, collector: TridentCollector) -> None:
        collector.emit((result,))


class ParseInt(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((int(tuple_.values[0]),))


def seed_topology(name: str, state_factory: Any, *, parallelism: int = 1) -> TridentTopology:
    """Seed 001: the word count, and its DRPC streams (MapGet after groupBy(args), the custom
    query function, a sum over several words, every tuple with broadcast + TupleCollectionGet).
    """
    topology = TridentTopology(name)
    spout = MemoryTransactionalSpout({"p0": SEED_SENTENCES}, ["sentence"], take_per_batch=1)
    counts: TridentState = (
        topology.new_stream("spout1", spout)
        .each(["sentence"], Split(), ["word"])
        .parallelism_hint(parallelism)
        .group_by(["word"])
        .persistent_aggregate(state_factory, Count(), ["count"], name="word_counts")
    )
    topology.new_drpc_stream("word").group_by(["args"]).state_query(
        counts, ["args"], MapGet(), ["count"]
    )
    topology.new_drpc_stream("word_db").state_query(counts, ["args"], QueryWordCountDB(), ["count"])
    (
        topology.new_drpc_stream("words")
        .each(["args"], Split(), ["word"])
        .group_by(["word"])
        .state_query(counts, ["word"], MapGet(), ["count"])
        .each(["count"], FilterNull())
        .aggregate(["count"], Sum(), ["sum"])
    )
    (
        topology.new_drpc_stream("all_words")
        .broadcast()
        .parallelism_hint(3)
        .state_query(counts, ["args"], TupleCollectionGet(), ["word", "count"])
        .project(["word", "count"])
    )
    topology.new_drpc_stream("plus_one").each(["args"], ParseInt(), ["n"]).project(["n"])
    return topology


@pytest.fixture
def pg_binding(pg_url: str) -> StateBinding:
    return StateBinding(pg_url)


@pytest.mark.integration
@pytest.mark.parametrize("state_type", ["transactional", "opaque"])
def test_seed_word_count_queries_answer_as_trident_does(
    zk_store: CoordinatorStore, pg_binding: StateBinding, unique_name: str, state_type: str
) -> None:
    # Given seed 001's topology, its three batches committed to PostgreSQL through ZooKeeper
    factory = sql_state(None, unique_name, state_type, key_fields=("word",), value_type="bigint")
    topology = seed_topology(unique_name, factory, parallelism=2)
    runner = LocalRunner(topology, store=zk_store, states=pg_binding)
    runner.run(3)
    drpc = DRPCExecutor(topology, store=zk_store, states=pg_binding)
    # When each word is asked for, Then each answers [[word, count]] (you: twice)
    answers = {w: drpc.execute_json("word", w) for w in SEED_WORDS}
    expected = {w: f'[["{w}",{2 if w == "you" else 1}]]' for w in SEED_WORDS}
    assert answers == expected
    # and a word never seen is null through MapGet (MemoryMapState's get), 0 through the
    # seed's QueryWordCountDB
    assert drpc.execute_json("word", "nope") == '[["nope",null]]'
    assert drpc.execute_json("word_db", "nope") == '[["nope",0]]'
    assert drpc.execute_json("word_db", "you") == '[["you",2]]'
    # and an aggregation after state_query sums the words asked for (unknown ones dropped)
    assert drpc.execute_json("words", "you how nope") == "[[3]]"
    # and broadcast + TupleCollectionGet over three query partitions yields every word once
    rows = drpc.execute("all_words", "")
    assert sorted(rows) == sorted((w, 2 if w == "you" else 1) for w in SEED_WORDS)


class Pause:
    """A fault action that holds the committing thread until released."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> None:
        self.reached.set()
        assert self.release.wait(60), "the test never released the paused commit"


@pytest.fixture
def paused() -> Iterator[Pause]:
    pause = Pause()
    yield pause
    pause.release.set()


def _commit_in_thread(runner: LocalRunner, pause: Pause) -> threading.Thread:
    thread = threading.Thread(target=runner.run_batch, daemon=True)
    thread.start()
    assert pause.reached.wait(60), "the commit never reached the fault point"
    return thread


@pytest.mark.integration
@pytest.mark.parametrize(
    "point", ["state.commit.after", "store.commit.before"], ids=["partial", "before-cas"]
)
def test_a_query_during_a_paused_opaque_commit_reads_committed_values_only(
    zk_store: CoordinatorStore,
    pg_binding: StateBinding,
    unique_name: str,
    paused: Pause,
    point: str,
) -> None:
    # Given opaque PostgreSQL state in two partitions, txids 1-2 committed
    injector = FaultInjector()
    inner = sql_state(None, unique_name, "opaque", key_fields=("word",), value_type="bigint")
    topology = seed_topology(unique_name, FaultyStateFactory(inner, injector), parallelism=2)
    runner = LocalRunner(topology, store=FaultyStore(zk_store, injector), states=pg_binding)
    runner.run(2)
    drpc = DRPCExecutor(topology, store=zk_store, states=pg_binding, commit_wait_s=0.2)
    before = {w: drpc.execute("word", w) for w in SEED_WORDS}
    # When txid 3 pauses after one state partition committed (or after every state was
    # written, before ZooKeeper's compare-and-set)
    injector.arm(point, action=paused)
    thread = _commit_in_thread(runner, paused)
    assert zk_store.commits.committed_txid() == 2
    # Then every query answers the values of txid 2 (txid 3's words read as absent)
    during = {w: drpc.execute("word", w) for w in SEED_WORDS}
    assert during == before
    assert drpc.execute_json("word", "day") == '[["day",null]]'
    assert sorted(drpc.execute("all_words", "")) == sorted(
        r for rows in before.values() for r in rows if r[1] is not None
    )
    # and once the commit finishes, txid 3's counts
    paused.release.set()
    thread.join(60)
    assert zk_store.commits.committed_txid() == 3
    assert drpc.execute_json("word", "day") == '[["day",1]]'


@pytest.mark.integration
def test_a_query_during_a_paused_transactional_commit_reads_prev_values(
    zk_store: CoordinatorStore, unique_name: str, paused: Pause
) -> None:
    # Given transactional memory state (it keeps each value's prev), txids 1-2 committed
    injector = FaultInjector()
    topology = seed_topology(unique_name, memory_state(unique_name, "transactional"))
    runner = LocalRunner(topology, store=FaultyStore(zk_store, injector))
    runner.run(2)
    drpc = DRPCExecutor(topology, store=zk_store)
    # When txid 3 ("what a good day") wrote its counts and pauses before the compare-and-set
    injector.arm("store.commit.before", action=paused)
    thread = _commit_in_thread(runner, paused)
    # Then its words are still unknown, and the others keep their committed counts
    assert drpc.execute_json("words", "what you how") == "[[3]]"
    assert drpc.execute_json("word", "good") == '[["good",null]]'
    paused.release.set()
    thread.join(60)
    assert drpc.execute_json("words", "what you how") == "[[4]]"


@pytest.mark.integration
@pytest.mark.parametrize("value_type", ["bigint", "json"])
def test_a_query_during_a_paused_transactional_sql_commit_reads_prev_values(
    zk_store: CoordinatorStore,
    pg_binding: StateBinding,
    unique_name: str,
    paused: Pause,
    value_type: str,
) -> None:
    # Given transactional PostgreSQL state (one value column: rows keep prev), txid 1 committed
    injector = FaultInjector()
    factory = sql_state(
        None, unique_name, "transactional", key_fields=("word",), value_type=value_type
    )
    topology = seed_topology(unique_name, factory)
    runner = LocalRunner(topology, store=FaultyStore(zk_store, injector), states=pg_binding)
    runner.run(1)
    drpc = DRPCExecutor(topology, store=zk_store, states=pg_binding)
    # When txid 2 ("nice to meet you") wrote its counts and pauses before the compare-and-set
    injector.arm("store.commit.before", action=paused)
    thread = _commit_in_thread(runner, paused)
    # Then "you" keeps its committed count 1 (2 is written) and "nice" is still unknown
    assert drpc.execute_json("words", "you how") == "[[2]]"
    assert drpc.execute_json("word", "nice") == '[["nice",null]]'
    paused.release.set()
    thread.join(60)
    assert drpc.execute_json("words", "you how") == "[[3]]"


@pytest.mark.integration
def test_table_shaped_transactional_state_asks_to_retry_during_a_commit(
    zk_store: CoordinatorStore, pg_binding: StateBinding, unique_name: str, paused: Pause
) -> None:
    # Given table-shaped transactional PostgreSQL state (a `count` column, no prev), txid 1
    injector = FaultInjector()
    factory = sql_state(
        None, unique_name, "transactional", key_fields=("word",), value_fields=("count",),
        value_type="bigint",
    )  # fmt: skip
    topology = seed_topology(unique_name, factory)
    runner = LocalRunner(topology, store=FaultyStore(zk_store, injector), states=pg_binding)
    runner.run(1)
    drpc = DRPCExecutor(topology, store=zk_store, states=pg_binding, commit_wait_s=0.2)
    # When txid 2 ("nice to meet you") wrote its counts and pauses before the compare-and-set
    injector.arm("store.commit.before", action=paused)
    thread = _commit_in_thread(runner, paused)
    # Then a word it did not write answers its committed count
    assert drpc.execute_json("word", "how") == '[["how",1]]'
    # and a word it wrote is refused as in progress (never the uncommitted count)
    with pytest.raises(DRPCCommitInProgressError, match=r"key \('you',\).*txid 2.*retry"):
        drpc.execute("word", "you")
    paused.release.set()
    thread.join(60)
    assert drpc.execute_json("word", "you") == '[["you",2]]'


def test_unknown_functions_and_bad_arguments_are_clear_errors(unique_name: str) -> None:
    # Given the seed topology in memory
    topology = seed_topology(unique_name, memory_state(unique_name, "transactional"))
    runner = LocalRunner(topology)
    runner.run(1)
    drpc = DRPCExecutor(topology, store=runner.store)
    # When a function that does not exist is asked for, Then the error names the functions
    with pytest.raises(DRPCUnknownFunctionError, match=r"no DRPC function 'wrod'.*'word'"):
        drpc.execute("wrod", "how")
    # When the arguments are not a string
    with pytest.raises(DRPCArgumentsError, match=r"must be one string.*got list"):
        drpc.execute("word", ["how"])
    # When a step of the stream fails on the arguments, Then the error names the step
    with pytest.raises(DRPCArgumentsError, match=r"'plus_one'.*'x'.*step 'ParseInt'.*ValueError"):
        drpc.execute("plus_one", "x")
    assert drpc.execute("plus_one", "41") == [(41,)]


@pytest.mark.integration
def test_an_unreachable_state_database_is_a_state_store_error(
    zk_store: CoordinatorStore, unique_name: str
) -> None:
    # Given a topology whose state database does not answer (nothing listens on port 1)
    factory = sql_state(None, unique_name, "transactional", key_fields=("word",))
    topology = seed_topology(unique_name, factory)
    binding = StateBinding("postgresql+psycopg://nobody:x@127.0.0.1:1/none?connect_timeout=2")
    drpc = DRPCExecutor(topology, store=zk_store, states=binding)
    # When a request queries it, Then the error says the database cannot be reached
    with pytest.raises(StateStoreUnavailableError):
        drpc.execute("word", "how")


def test_joining_or_merging_a_drpc_stream_with_a_batch_stream_fails_at_build_time() -> None:
    # Given a topology with a spout stream and a DRPC stream
    topology = TridentTopology("drpc_join")
    words = topology.new_stream(
        "words", MemoryTransactionalSpout({"p0": [("a",)]}, ["word"], take_per_batch=1)
    )
    requests = topology.new_drpc_stream("ask")
    # When they are joined or merged, Then the build fails naming both and why
    with pytest.raises(TopologyError, match=r"join: cannot join the DRPC stream.*'ask'.*batch"):
        topology.join([requests, words], [["args"], ["word"]], ["key"])
    with pytest.raises(TopologyError, match=r"merge: cannot merge the DRPC stream"):
        topology.merge(requests, words)
    # and two DRPC functions cannot meet either, while one DRPC stream joins its own branch
    other = topology.new_drpc_stream("other")
    with pytest.raises(TopologyError, match=r"streams of DRPC functions \['ask', 'other'\]"):
        topology.merge(requests, other)
    split = requests.each(["args"], Split(), ["w"])
    assert topology.join([requests, split], [["args"], ["args"]], ["args", "w"]).fields == (
        "args",
        "w",
    )
