"""A file log with ``infer_schema=True`` whose first batch has a field no record gives (all
``None``: no type yet) into evolving Iceberg and Delta sinks (issue 32, item 4): before, the
first commit failed on every retry with pyiceberg's raw ``ValueError: Null type ... not
supported`` and the committed txid stayed 0 even after typed data landed. Now txid 1 commits
without the column, txid 2 adds it, and a replay of txid 1 changes nothing — in process and
on Spark (worker and Spark commit), the Iceberg catalog on SQLite and PostgreSQL, on the real
ZooKeeper."""

from __future__ import annotations

import json
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
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.runtime.reference import load_topology
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.state.binding import StateBinding
from tests.runtime import null_typed_topologies as nt

pytestmark = pytest.mark.integration

REFERENCE = "tests.runtime.null_typed_topologies:events"


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


def _drop(state_url: str) -> None:
    """Drop the Iceberg table from the catalog (its files too, with :data:`nt.ROOT`)."""
    catalog = nt.ICEBERG.located_at(state_url).load_catalog()
    try:
        if catalog.table_exists(nt.TABLE):
            catalog.drop_table(nt.TABLE)
    except FileNotFoundError:  # its files went before it (an interrupted run)
        engine = sa.create_engine(state_url)
        with engine.begin() as conn:
            conn.execute(
                sa.text("DELETE FROM iceberg_tables WHERE table_name = :name"),
                {"name": nt.TABLE.split(".")[1]},
            )
        engine.dispose()
    shutil.rmtree(nt.ROOT, ignore_errors=True)


@pytest.fixture
def steps(state_url: str, zk_config: ZkConfig, tmp_path: Path) -> Iterator[BatchSteps]:
    _drop(state_url)
    client = connect(zk_config)
    store = CoordinatorStore(client, CoordinatorPaths(zk_config.root, nt.NAME))
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
    _drop(state_url)


def land(partition: str, name: str, records: list[dict[str, Any]]) -> None:
    folder = nt.LOG / partition
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"_{name}"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    tmp.rename(folder / name)


def batch(steps: BatchSteps, mode: str, spark: Any, txid: int | None = None) -> dict[str, Any]:
    txid = int(steps.begin(None, txid if txid is not None else steps.begins.pending_txid())["txid"])
    if mode == "local":
        steps.process_local(txid)
    else:
        process_on_spark(steps, spark, txid, 0.0)
    if mode == "spark_commit":
        return commit_on_spark(steps, spark, REFERENCE, txid, 0.0)
    return steps.commit(txid)


def iceberg_rows(steps: BatchSteps) -> list[tuple[Any, ...]]:
    table = steps.states.factory(nt.ICEBERG).load_table()
    found = table.scan().to_arrow().to_pylist()
    return sorted((r["word"], r["n"], r.get("lang"), r["trident_txid"]) for r in found)


def delta_rows() -> list[tuple[Any, ...]]:
    found = pq.read_table(DeltaTable(str(nt.DELTA)).file_uris()).to_pylist()
    return sorted((r["word"], r["n"], r.get("lang"), r["trident_txid"]) for r in found)


@pytest.mark.parametrize("mode", ["local", "spark_worker_commit", "spark_commit"])
def test_a_first_batch_without_a_field_commits_and_the_field_comes_later(
    steps: BatchSteps, mode: str, request: pytest.FixtureRequest
) -> None:
    spark = None if mode == "local" else request.getfixturevalue("spark")
    # Given a first batch in which no record has ``lang``
    land("a", "0.jsonl", [{"word": "a", "n": 1}, {"word": "b", "n": 2}])
    land("b", "0.jsonl", [{"word": "c", "n": 3}])
    # Then txid 1 commits (the tables are made without the column)
    assert batch(steps, mode, spark)["applied"]
    assert steps.store.commits.committed_txid() == 1
    # When a later batch types it (in one partition; the other still has none)
    land("a", "1.jsonl", [{"word": "d", "n": 4, "lang": "en"}])
    land("b", "1.jsonl", [{"word": "e", "n": 5}])
    assert batch(steps, mode, spark)["applied"]
    # And txid 1 is replayed
    assert not batch(steps, mode, spark, txid=1)["applied"]
    # Then each record is in each table once, ``None`` where it had no ``lang``
    expected = [
        ("a", 1, None, 1), ("b", 2, None, 1), ("c", 3, None, 1), ("d", 4, "en", 2),
        ("e", 5, None, 2),
    ]  # fmt: skip
    assert iceberg_rows(steps) == expected
    assert delta_rows() == expected
