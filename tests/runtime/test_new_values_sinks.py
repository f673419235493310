"""States fed by a state's new values (issue 32, item 3): ``new_values_stream()`` into
``partition_persist`` (an Iceberg upsert, SQL) and ``persistent_aggregate`` wrote nothing — the
commit phase ran the stream (a ``peek`` saw its values) but never applied the states it ends in.

Every runtime and commit mode (processed in process and committed by the worker; processed on
Spark and committed by the worker; processed on Spark and committed by Spark tasks), on the
real ZooKeeper, with the run's state database on SQLite and PostgreSQL (also the Iceberg
catalog). A commit dying after the downstream Iceberg commit is retried, and a committed txid
replayed: the tables hold each word's running total once, and the chain's peek sees them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.on_spark import commit_on_spark, process_on_spark
from airflow_trident.batch.rebuild import rebuild_states
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import ConfigurationError, StateStoreUnavailableError
from airflow_trident.operation import Count, Split
from airflow_trident.runtime.commit import query_state
from airflow_trident.runtime.reference import load_topology
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology
from tests.harness.iceberg_sinks import table_rows
from tests.runtime import new_values_topologies as nv

pytestmark = pytest.mark.integration

REFERENCE = "tests.runtime.new_values_topologies:totals"
MODES = ["local", "spark_worker_commit", "spark_commit"]


# PostgreSQL state through Spark's two commit modes is the long tier's here: the test command
# runs them on SQLite in this file, PostgreSQL in process here, and PostgreSQL through Spark's
# commits in tests/runtime/test_spark_commit.py and the compact layout's DAG runs
LONG_PARAMS = [
    {"state_url": "postgresql", "mode": "spark_worker_commit"},
    {"state_url": "postgresql", "mode": "spark_commit"},
]


@pytest.fixture(params=["sqlite", "postgresql"])
def state_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        url: str = request.getfixturevalue("pg_url")
        return url
    return f"sqlite:///{tmp_path}/state.db"


def _empty(url: str) -> None:
    """Empty the SQL states (Spark's reused Python workers remember a table exists) and this
    topology's ledger and rebuild rows, and drop the Iceberg table from the catalog in ``url``."""
    engine = sa.create_engine(url)
    for table in (nv.COUNTS, nv.UPDATES, nv.LATEST):
        if sa.inspect(engine).has_table(table):
            with engine.begin() as conn:
                conn.execute(sa.text(f'DELETE FROM "{table}"'))
    for table in ("trident_commit_ledger", "trident_rebuild_progress"):
        if sa.inspect(engine).has_table(table):
            with engine.begin() as conn:
                conn.execute(sa.text(f'DELETE FROM "{table}" WHERE topology = :t'), {"t": nv.NAME})
    engine.dispose()
    catalog = nv.TOTALS.inner.located_at(url).load_catalog()
    try:
        if catalog.table_exists(nv.TOTALS_TABLE):
            catalog.drop_table(nv.TOTALS_TABLE)
    except FileNotFoundError:  # its files went first (an interrupted run)
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM iceberg_tables WHERE table_name = :t"),
                         {"t": nv.TOTALS_TABLE.split(".")[1]})  # fmt: skip
        engine.dispose()


@pytest.fixture
def steps(state_url: str, zk_config: ZkConfig, tmp_path: Path) -> Iterator[BatchSteps]:
    _empty(state_url)
    nv.Seen.rows.clear()
    nv.TOTALS.armed("after")  # disarm
    client = connect(zk_config)
    store = CoordinatorStore(client, CoordinatorPaths(zk_config.root, nv.NAME))
    store.delete_all()
    topology = load_topology(REFERENCE)
    yield BatchSteps(
        topology,
        store,
        StagingArea(str(tmp_path / "staging"), topology.name),
        ledger=CommitLedger(state_url),
        states=StateBinding(state_url),
    )
    store.delete_all()
    client.stop()
    client.close()


def process(steps: BatchSteps, mode: str, spark: Any, txid: int) -> None:
    if mode == "local":
        steps.process_local(txid)
    else:
        process_on_spark(steps, spark, txid, 0.0)


def commit(steps: BatchSteps, mode: str, spark: Any, txid: int) -> dict[str, Any]:
    if mode == "spark_commit":
        return commit_on_spark(steps, spark, REFERENCE, txid, 0.0)
    return steps.commit(txid)


def totals_table(steps: BatchSteps) -> dict[str, int]:
    rows = table_rows(steps.states.factory(nv.TOTALS).inner)
    words = [r["word"] for r in rows]
    assert len(words) == len(set(words)), f"a word upserted twice: {sorted(words)}"
    return {r["word"]: r["count"] for r in rows}


def sql_values(steps: BatchSteps, state: str, keys: list[tuple[Any, ...]]) -> list[Any]:
    found: list[Any] = query_state(steps.topology, state, steps.states).multi_get(keys)
    return found


def updates(steps: BatchSteps) -> int:
    """The global count of keys the batches updated."""
    return int(query_state(steps.topology, "updates", steps.states).get())


@pytest.mark.parametrize("mode", MODES)
def test_states_fed_by_new_values_are_written(
    steps: BatchSteps, mode: str, request: pytest.FixtureRequest
) -> None:
    spark = None if mode == "local" else request.getfixturevalue("spark")
    for batch in range(1, nv.BATCHES + 1):
        txid = int(steps.begin(f"r{batch}")["txid"])
        process(steps, mode, spark, txid)
        if batch == 2:  # the downstream sink dies after its Iceberg commit: the txid stays open
            nv.TOTALS.arm("after")
            with pytest.raises(StateStoreUnavailableError, match="after its Iceberg commit"):
                commit(steps, mode, spark, txid)
            assert steps.store.commits.committed_txid() == 1
        assert commit(steps, mode, spark, txid)["applied"]
        expected = nv.expected_totals(batch)
        assert totals_table(steps) == expected
        words = sorted(expected)
        assert sql_values(steps, "latest", [(w,) for w in words]) == [expected[w] for w in words]
        assert updates(steps) == nv.expected_updates(batch)
    # a committed txid replayed changes nothing
    process(steps, mode, spark, 2)
    assert not commit(steps, mode, spark, 2)["applied"]
    expected = nv.expected_totals(nv.BATCHES)
    assert totals_table(steps) == expected
    assert updates(steps) == nv.expected_updates(nv.BATCHES)
    # the chain's peek saw the last batch's new values of ``latest``
    last = nv.batch_words(nv.BATCHES)
    assert {w: c for w, c in nv.Seen.rows[-len(last) :]} == {w: expected[w] for w in last}


def test_in_process_chain_of_new_values_streams() -> None:
    # Given counts -> new values -> partition_persist (memory) -> its new values -> counts
    t = TridentTopology("nv_chain")
    spout = MemoryTransactionalSpout({"p0": [("a b",), ("b c",), ("c",)]}, ["s"], 1)
    counts = (
        t.new_stream("lines", spout)
        .each(["s"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(
            memory_state("nv_chain_counts", "transactional"), Count(), ["count"], name="counts"
        )
    )
    latest = counts.new_values_stream().partition_persist(
        memory_state("nv_chain_latest", "transactional"),
        ["word", "count"],
        nv.PutLatest(),
        ["word", "count"],
        name="latest",
    )
    latest.new_values_stream().group_by(["word"]).persistent_aggregate(
        memory_state("nv_chain_seen", "transactional"), Count(), ["times"], name="times"
    )
    steps = BatchSteps(t, MemoryCoordinatorStore(t.name))
    for _ in range(3):
        steps.run_batch()
    keys = [("a",), ("b",), ("c",)]
    assert query_state(t, "latest").multi_get(keys) == [1, 2, 2]
    # how many batches updated each word (through two new-values streams)
    assert query_state(t, "times").multi_get(keys) == [1, 2, 2]


def test_rebuild_applies_states_fed_by_new_values(steps: BatchSteps, tmp_path: Path) -> None:
    # Given three committed batches (their metadata in the ledger)
    for batch in range(1, nv.BATCHES + 1):
        txid = int(steps.begin(f"r{batch}")["txid"])
        steps.process_local(txid)
        assert steps.commit(txid)["applied"]
    assert steps.ledger is not None
    # When a state fed by new values is rebuilt without the state feeding it, it is refused
    binding = StateBinding(f"sqlite:///{tmp_path}/rebuilt.db")
    topology = load_topology(REFERENCE)
    with pytest.raises(ConfigurationError, match="fed by the new values of state 'counts'"):
        rebuild_states(topology, steps.ledger, 1, 3, states=["latest"], binding=binding)
    # And with it, both are rebuilt (the commit phase runs after each txid's states)
    chosen = ["counts", "latest", "updates"]
    summaries = rebuild_states(topology, steps.ledger, 1, 3, states=chosen, binding=binding)
    assert [s["keys_written"]["latest"] for s in summaries] == [
        len(nv.batch_words(b)) for b in range(1, nv.BATCHES + 1)
    ]
    expected = nv.expected_totals(nv.BATCHES)
    words = sorted(expected)
    latest = query_state(topology, "latest", binding).multi_get([(w,) for w in words])
    assert latest == [expected[w] for w in words]
    assert query_state(topology, "updates", binding).get() == nv.expected_updates(nv.BATCHES)
