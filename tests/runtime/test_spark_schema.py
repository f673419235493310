"""A SQL state in a named PostgreSQL schema committed by Spark tasks (issue 20, finding 2): the
executors load the topology by reference, create the schema and the table in it and apply
their partitions there; the commit of a retried txid counts once. Before, loading the topology
failed (``'trident_spark_schema.counts'`` was an invalid table name)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.batch.spark_job import commit_on_spark, process_on_spark
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.runtime.reference import load_topology
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.state.binding import StateBinding
from tests.runtime import commit_topologies as ct

pytestmark = pytest.mark.integration

REFERENCE = "tests.runtime.commit_topologies:words_in_schema"


@pytest.fixture
def steps(pg_url: str, zk_config: ZkConfig, tmp_path: Path) -> Iterator[BatchSteps]:
    engine = sa.create_engine(pg_url)
    # emptied, not dropped: Spark's reused Python workers remember the table exists
    if sa.inspect(engine).has_table("counts", ct.SCHEMA):
        with engine.begin() as conn:
            conn.execute(sa.text(f"DELETE FROM {ct.SCHEMA}.counts"))
    engine.dispose()
    client = connect(zk_config)
    store = CoordinatorStore(client, CoordinatorPaths(zk_config.root, ct.SCHEMA_NAME))
    store.delete_all()
    topology = load_topology(REFERENCE)
    yield BatchSteps(
        topology,
        store,
        StagingArea(str(tmp_path / "staging"), topology.name),
        states=StateBinding(pg_url),
    )
    store.delete_all()
    client.stop()
    client.close()


def test_spark_tasks_commit_a_state_in_a_named_schema(
    steps: BatchSteps, spark: Any, pg_url: str
) -> None:
    for i, run in ((1, "r1"), (2, "r2")):
        txid = int(steps.begin(run)["txid"])
        process_on_spark(steps, spark, txid, 0.0)
        assert commit_on_spark(steps, spark, REFERENCE, txid, 0.0)["applied"] is True
        if i == 2:  # committed again (a cleared commit task): nothing changes
            commit_on_spark(steps, spark, REFERENCE, txid, 0.0)
    engine = sa.create_engine(pg_url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f"SELECT word, val FROM {ct.SCHEMA}.counts")).all()
    engine.dispose()
    assert {w: int(c) for w, c in rows} == dict(ct.expected_counts(2))
