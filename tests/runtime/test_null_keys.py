"""A ``None`` group key is a key, end to end (issue 32, item 5): before, ``sql_state`` failed the
commit with a NOT NULL error on every retry (the batch could never commit), an Iceberg upsert
on the key raised pyiceberg's raw ``TypeError: Invalid literal value: None``, and a Delta MERGE
on it inserted the ``None`` key's row again each batch (``t.word = s.word`` is never true for
NULL). Now the counts hold ``None`` beside ``''`` and the tables one row per key — in process
and on Spark (worker and Spark commit), the state database SQLite and PostgreSQL, on the real
ZooKeeper; and the memory state too."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from deltalake import DeltaTable

from airflow_trident.batch.on_spark import commit_on_spark, process_on_spark
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.operation import Count
from airflow_trident.runtime.commit import query_state
from airflow_trident.runtime.reference import load_topology
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology
from tests.runtime import null_key_topologies as nk

pytestmark = pytest.mark.integration

REFERENCE = "tests.runtime.null_key_topologies:words"
KEYS: list[Any] = [None, "", "a", "b", "c"]


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


def _clean(url: str) -> None:
    """Empty the SQL states (Spark's reused workers remember a table exists), drop the
    Iceberg table, remove the Delta table and the warehouse."""
    engine = sa.create_engine(url)
    for table in (nk.COUNTS, nk.OPAQUE):
        if sa.inspect(engine).has_table(table):
            with engine.begin() as conn:
                conn.execute(sa.text(f'DELETE FROM "{table}"'))
    catalog = nk.ICEBERG.located_at(url).load_catalog()
    try:
        if catalog.table_exists(nk.TABLE):
            catalog.drop_table(nk.TABLE)
    except FileNotFoundError:  # its files went first (an interrupted run)
        with engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM iceberg_tables WHERE table_name = :t"),
                         {"t": nk.TABLE.split(".")[1]})  # fmt: skip
    engine.dispose()
    shutil.rmtree(nk.ROOT, ignore_errors=True)


@pytest.fixture
def steps(state_url: str, zk_config: ZkConfig, tmp_path: Path) -> Iterator[BatchSteps]:
    _clean(state_url)
    client = connect(zk_config)
    store = CoordinatorStore(client, CoordinatorPaths(zk_config.root, nk.NAME))
    store.delete_all()
    topology = load_topology(REFERENCE)
    yield BatchSteps(
        topology,
        store,
        StagingArea(str(tmp_path / "staging"), topology.name),
        states=StateBinding(state_url),
    )
    store.delete_all()
    client.stop()
    client.close()
    _clean(state_url)


def batch(steps: BatchSteps, mode: str, spark: Any, txid: int | None = None) -> dict[str, Any]:
    txid = int(steps.begin(None, txid)["txid"])
    if mode == "local":
        steps.process_local(txid)
    else:
        process_on_spark(steps, spark, txid, 0.0)
    if mode == "spark_commit":
        return commit_on_spark(steps, spark, REFERENCE, txid, 0.0)
    return steps.commit(txid)


def table(rows: list[dict[str, Any]]) -> dict[Any, int]:
    words = [r["word"] for r in rows]
    assert len(words) == len(set(words)), f"a key upserted twice: {words}"
    return {r["word"]: r["count"] for r in rows}


@pytest.mark.parametrize("mode", ["local", "spark_worker_commit", "spark_commit"])
def test_a_none_group_key_is_counted_and_upserted_as_a_key(
    steps: BatchSteps, mode: str, request: pytest.FixtureRequest
) -> None:
    spark = None if mode == "local" else request.getfixturevalue("spark")
    for b in range(1, nk.BATCHES + 1):
        assert batch(steps, mode, spark)["applied"]
        want = nk.expected(b)
        expected = [want.get(k) for k in KEYS]
        for state in ("counts", "opaque_counts"):
            got = query_state(steps.topology, state, steps.states).multi_get([(k,) for k in KEYS])
            assert got == expected, state
        iceberg = steps.states.factory(nk.ICEBERG).load_table().scan().to_arrow().to_pylist()
        assert table(iceberg) == dict(want)
        delta = pq.read_table(DeltaTable(str(nk.ROOT / "delta")).file_uris()).to_pylist()
        assert table(delta) == dict(want)
    # and a committed txid replayed changes nothing
    assert not batch(steps, mode, spark, txid=2)["applied"]


def test_a_none_key_in_memory_state() -> None:
    t = TridentTopology("null_key_memory")
    spout = MemoryTransactionalSpout(nk.WORDS, ["word"], take_per_batch=nk.TAKE)
    t.new_stream("words", spout).group_by(["word"]).persistent_aggregate(
        memory_state("null_key_memory", "opaque"), Count(), ["count"], name="counts"
    )
    steps = BatchSteps(t, MemoryCoordinatorStore(t.name))
    for _ in range(nk.BATCHES):
        steps.run_batch()
    want = nk.expected(nk.BATCHES)
    assert query_state(t, "counts").multi_get([(k,) for k in KEYS]) == [want.get(k) for k in KEYS]
