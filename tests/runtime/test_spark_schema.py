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

from airflow_trident.batch.on_spark import commit_on_spark, process_on_spark
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.client import ZkConfig
from tests.runtime import commit_topologies as ct
from tests.runtime.zk_steps import zk_batch_steps

pytestmark = pytest.mark.integration

REFERENCE = "tests.runtime.commit_topologies:words_in_schema"


@pytest.fixture
def steps(pg_url: str, zk_config: ZkConfig, tmp_path: Path) -> Iterator[BatchSteps]:
    with zk_batch_steps(REFERENCE, "counts", schema=ct.SCHEMA, pg_url=pg_url,
                        zk_config=zk_config, tmp_path=tmp_path) as steps:  # fmt: skip
        yield steps


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
