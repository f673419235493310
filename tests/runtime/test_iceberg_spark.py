"""The Iceberg sink with batches processed on Spark: committed in the worker (the commit task's
process) and, with ``commit_mode="spark"``, by Spark tasks that each commit one staged partition
into the table (the topology loaded by reference on the executors, the catalog being the run's
state database carried in the task closure). Failures before and after the Iceberg commit,
retries, replays of the newest and an older txid and a backfill over committed txids leave the
table, read back with pyiceberg, equal to the reference: every word once per batch.
(Spark cannot read the table here: no Iceberg runtime jar; pyiceberg reads it.)"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_trident.batch.on_spark import commit_on_spark, process_on_spark
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.errors import StateError
from airflow_trident.runtime.reference import load_topology
from airflow_trident.runtime.spark.commit import SparkBatchApplier
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.iceberg import iceberg_state
from tests.harness.iceberg_sinks import (
    TABLE,
    FailOnce,
    expected_words,
    table_rows,
    words_topology,
)

pytestmark = pytest.mark.integration

REFERENCE = "tests.harness.iceberg_sinks:iceberg_words"


def words(factory: Any) -> Counter[str]:
    return Counter(r["word"] for r in table_rows(factory))


def processed(steps: BatchSteps, spark: Any, run_id: str) -> int:
    txid = int(steps.begin(run_id)["txid"])
    process_on_spark(steps, spark, txid, 0.0)
    return txid


def test_processed_on_spark_committed_in_the_worker(
    spark: Any, tmp_path: Path, pg_url: str
) -> None:
    # Given word events processed on Spark into an Iceberg table whose catalog is PostgreSQL
    catalog = {
        "catalog_name": f"t{uuid.uuid4().hex[:8]}",
        "type": "sql",
        "uri": pg_url,
        "warehouse": f"file://{tmp_path}/warehouse",
    }
    name = f"trident_tests.w{uuid.uuid4().hex[:8]}"
    sink = FailOnce(iceberg_state(name, "iceberg_spark.events", catalog=catalog))
    topology = words_topology(f"iceberg_spark_{uuid.uuid4().hex[:6]}", sink)
    store = MemoryCoordinatorStore(topology.name)
    steps = BatchSteps(topology, store, StagingArea(str(tmp_path / "staging"), topology.name))
    assert steps.commit(processed(steps, spark, "r1"))["applied"]
    # When txid 2's commit dies before its Iceberg commit, txid 3's after it; each is retried
    for run, when in (("r2", "before"), ("r3", "after")):
        txid = processed(steps, spark, run)
        sink.arm(when)
        with pytest.raises(StateError, match=f"{when} its Iceberg commit"):
            steps.commit(txid)
        assert store.commits.committed_txid() == txid - 1
        assert steps.commit(txid)["applied"]
    # And the newest and an older txid are replayed on Spark, then committed again
    for txid in (3, 1):
        process_on_spark(steps, spark, txid, 0.0)
        steps.commit(txid)
    # Then the table holds each word of batches 1..3 once
    assert words(sink.inner) == expected_words(3)


def test_committed_by_spark_tasks(spark: Any, tmp_path: Path) -> None:
    # Given the harness topology (by reference), its catalog the run's SQLite state database
    binding = StateBinding(f"sqlite:///{tmp_path}/state.db")
    topology = load_topology(REFERENCE)
    store = MemoryCoordinatorStore(topology.name)
    steps = BatchSteps(
        topology, store, StagingArea(str(tmp_path / "staging"), topology.name), states=binding
    )
    factory = binding.factory(iceberg_state(TABLE, "iceberg_words.events"))
    for run in ("r1", "r2"):
        txid = processed(steps, spark, run)
        assert commit_on_spark(steps, spark, REFERENCE, txid, 0.0)["applied"]
    # When txid 3's partitions are committed by Spark tasks and the compare-and-set never runs
    # (the commit died in between), then the commit runs again
    txid = processed(steps, spark, "r3")
    plan = steps.plan(txid)
    applier = SparkBatchApplier(spark, REFERENCE, steps.staging, lambda t: {}, binding)
    applier.apply_staged(plan, steps.staging.verified_manifest(plan.attempt, plan.metas))
    assert store.commits.committed_txid() == 2
    assert commit_on_spark(steps, spark, REFERENCE, txid, 0.0)["applied"]
    # And committed txids 1..3 are backfilled (processed and committed again on Spark)
    for t in (1, 2, 3):
        process_on_spark(steps, spark, t, 0.0)
        commit_on_spark(steps, spark, REFERENCE, t, 0.0)
    # Then each word of batches 1..3 is in the table once, written by Spark tasks' partitions
    assert words(factory) == expected_words(3)
    summaries = [s.summary.additional_properties for s in factory.load_table().metadata.snapshots]
    assert sorted({s["trident.txid"] for s in summaries}) == ["1", "2", "3"]
    assert {s["trident.partition"].split("/")[1] for s in summaries} != {"1"}  # several tasks
