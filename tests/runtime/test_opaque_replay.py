"""An opaque batch whose replay reads less than its failed first attempt (issue 8, hole 1).

Attempt 1 of txid 2 reads every partition, writes its counts to the opaque state and dies before
ZooKeeper's compare-and-set. The replay of txid 2 runs while partition ``p03`` is unreadable, so
it does not write the keys only ``p03`` brought; ``p03``'s tuples come again in txid 3. The
commit of txid 2 must put those keys back to their value before txid 2, or they are counted
twice (the global total stays right, the per-key counts do not).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.operation import Count, Split
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.memory import MemoryOpaqueSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology

pytestmark = pytest.mark.integration

# Two sentences per partition per batch. In txid 2, p03 brings "apple" (counted in txid 1 too:
# an update), "plum" and "kiwi" (new keys) that no other partition writes in txid 2, and "the",
# which other partitions write as well.
DATA = {
    "p00": [("the cat sat",), ("on the mat",), ("the dog ran",), ("a cat ran",), ("the end",)],
    "p01": [("a b c",), ("the b",), ("c c a",), ("b a",), ("the",), ("b",)],
    "p02": [("x y",), ("y",), ("the x",), ("z",), ("x x",)],
    "p03": [("apple pear the",), ("apple",), ("apple plum",), ("kiwi the",), ("apple fig",)],
}
REFERENCE = Counter(w for rows in DATA.values() for (s,) in rows for w in s.split())
TAKE = 2
N = 2  # the txid whose first attempt dies after writing state


@pytest.fixture(params=["sqlite", "postgresql"])
def state_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        url: str = request.getfixturevalue("pg_url")
        return url
    return f"sqlite:///{tmp_path}/state.db"


@pytest.fixture
def table(state_url: str, unique_name: str) -> Iterator[str]:
    yield unique_name
    engine = sa.create_engine(state_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f'DROP TABLE IF EXISTS "{unique_name}"'))
    engine.dispose()


class WrappedFactory:
    """A user's factory over the opaque SQL state that declares no ``state_type`` (issue 19,
    symptom 8: the per-key revert was decided from that attribute alone)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def make_state(self, partition_index: int = 0, num_partitions: int = 1) -> Any:
        return self.inner.make_state(partition_index, num_partitions)


def word_count_steps(
    store: CoordinatorStore, staging: Path, url: str, table: str, *, wrapped: bool = False
) -> tuple[BatchSteps, MemoryOpaqueSpout]:
    spout = MemoryOpaqueSpout(DATA, ["sentence"], take_per_batch=TAKE)
    topology = TridentTopology(store.paths.topology)
    factory: Any = sql_state(url, table, "opaque", key_fields=("word",), value_type="bigint")
    if wrapped:
        factory = WrappedFactory(factory)
    (
        topology.new_stream("sentences", spout)
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(factory, Count(), ["count"], name="counts")
    )
    steps = BatchSteps(topology, store, StagingArea(str(staging), topology.name))
    return steps, spout


def stored_counts(url: str, table: str) -> dict[str, int]:
    """Every key of the state table with its current count."""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f'SELECT word, val FROM "{table}"')).all()
    engine.dispose()
    return {str(r[0]): int(r[1]) for r in rows}


Process = Callable[[BatchSteps, int], Any]


def replay_reading_less(
    steps: BatchSteps,
    spout: MemoryOpaqueSpout,
    process: Process,
    stored: Callable[[], dict[str, int]],
) -> None:
    """Txid 1 commits; txid 2's attempt 1 writes state and dies before the compare-and-set;
    txid 2 is processed again with p03 unreadable and commits; then p03 is readable again and
    batches run to the end of the data."""
    # Given txid 1 committed with every partition readable
    assert int(steps.begin("r1")["txid"]) == 1
    process(steps, 1)
    assert steps.commit(1)["applied"]
    steps.success(1)
    # And txid N's attempt 1 wrote its states and died before ZooKeeper's compare-and-set
    assert int(steps.begin("r2")["txid"]) == N
    process(steps, N)
    plan = steps.plan(N)
    steps.apply_staged(plan, steps.staging.verified_manifest(plan.attempt, plan.metas))
    assert steps.store.commits.committed_txid() == 1
    assert {"plum", "kiwi"} <= set(stored())  # p03's keys of txid N are in the state
    # When p03 becomes unreadable, and txid N is processed again and committed
    spout.set_unreadable("p03")
    process(steps, N)
    assert steps.commit(N)["applied"]
    steps.success(N)
    # And p03 is readable again and later batches run to the end of the data
    spout.set_unreadable()
    for i in range(3, 10):
        txid = int(steps.begin(f"r{i}")["txid"])
        process(steps, txid)
        summary = steps.commit(txid)
        steps.success(txid)
        if summary["records_in"] == 0:
            break
    else:
        pytest.fail("the data did not run out in 9 batches")


@pytest.mark.parametrize("wrapped", [False, True], ids=["sql_state", "wrapped_factory"])
def test_opaque_replay_reading_less_counts_each_key_once(
    zk_store: CoordinatorStore, tmp_path: Path, state_url: str, table: str, wrapped: bool
) -> None:
    steps, spout = word_count_steps(
        zk_store, tmp_path / "staging", state_url, table, wrapped=wrapped
    )

    def process(s: BatchSteps, txid: int) -> Any:
        return s.process_local(txid)

    replay_reading_less(steps, spout, process, lambda: stored_counts(state_url, table))
    # Then the state holds the word counts of the source data, key by key
    assert stored_counts(state_url, table) == dict(REFERENCE)


@pytest.mark.parametrize("wrapped", [False, True], ids=["sql_state", "wrapped_factory"])
def test_opaque_replay_reading_less_on_spark_counts_each_key_once(
    zk_store: CoordinatorStore,
    tmp_path: Path,
    pg_url: str,
    unique_name: str,
    spark: Any,
    wrapped: bool,
) -> None:
    steps, spout = word_count_steps(
        zk_store, tmp_path / "staging", pg_url, unique_name, wrapped=wrapped
    )
    from airflow_trident.batch.on_spark import process_on_spark

    def process(s: BatchSteps, txid: int) -> Any:
        return process_on_spark(s, spark, txid, 0.0)

    try:
        replay_reading_less(steps, spout, process, lambda: stored_counts(pg_url, unique_name))
        # Then the state holds the word counts of the source data, key by key
        assert stored_counts(pg_url, unique_name) == dict(REFERENCE)
    finally:
        engine = sa.create_engine(pg_url)
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP TABLE IF EXISTS "{unique_name}"'))
        engine.dispose()
