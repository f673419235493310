"""The Kafka sink with batches on Spark: processed on Spark and committed in the worker, and
with ``commit_mode="spark"``: Spark tasks each commit one staged partition in its own Kafka
transaction (the topology loaded by reference on the executors, the ``kafka`` connection
carried in the task closure). A commit whose Spark tasks all committed to Kafka and whose
compare-and-set never ran, then retried, and a backfill of committed txids, leave each record
once for a ``read_committed`` consumer (real broker, docs/sinks/kafka.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_trident import connections
from airflow_trident.batch.on_spark import commit_on_spark, process_on_spark
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.runtime.reference import load_topology
from airflow_trident.runtime.spark.commit import SparkBatchApplier
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.state.binding import StateBinding
from tests.harness.kafka_sinks import (
    SPARK_CONNECTION,
    SPARK_TOPIC,
    assert_each_word_once,
    read_topic,
    reset_spark_target,
)

pytestmark = pytest.mark.integration

REFERENCE = "tests.harness.kafka_sinks:kafka_spark_words"


def test_committed_by_spark_tasks_each_record_once(
    spark: Any, kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the harness topology (by reference) producing through an Airflow kafka connection
    from airflow_trident.hooks.connections import install

    reset_spark_target(kafka_bootstrap)
    extra = json.dumps({"bootstrap.servers": kafka_bootstrap})
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{SPARK_CONNECTION.upper()}",
        json.dumps({"conn_type": "kafka", "extra": extra}),
    )
    install()
    try:
        binding = StateBinding(f"sqlite:///{tmp_path}/state.db")
        topology = load_topology(REFERENCE)
        store = MemoryCoordinatorStore(topology.name)
        staging = StagingArea(str(tmp_path / "staging"), topology.name)
        steps = BatchSteps(topology, store, staging, states=binding)

        def processed(run_id: str) -> int:
            txid = int(steps.begin(run_id)["txid"])
            process_on_spark(steps, spark, txid, 0.0)
            return txid

        # And txid 1 processed on Spark and committed in the worker, txid 2 by Spark tasks
        assert steps.commit(processed("r1"))["applied"]
        assert commit_on_spark(steps, spark, REFERENCE, processed("r2"), 0.0)["applied"]
        # When txid 3's partitions are committed by Spark tasks and the compare-and-set never
        # runs (the commit died in between), then the commit runs again on Spark
        txid = processed("r3")
        plan = steps.plan(txid)
        applier = SparkBatchApplier(spark, REFERENCE, steps.staging, lambda t: {}, binding)
        applier.apply_staged(plan, steps.staging.verified_manifest(plan.attempt, plan.metas))
        assert store.commits.committed_txid() == 2
        assert commit_on_spark(steps, spark, REFERENCE, txid, 0.0)["applied"]
        # And committed txids 1..3 are processed and committed again on Spark (a backfill)
        for t in (1, 2, 3):
            process_on_spark(steps, spark, t, 0.0)
            commit_on_spark(steps, spark, REFERENCE, t, 0.0)
    finally:
        connections.install_resolver(None)
    # Then a read_committed consumer reads each word of batches 1..3 once per occurrence,
    # produced by both commit partitions
    records = read_topic(kafka_bootstrap, SPARK_TOPIC)
    assert_each_word_once(records, 3)
    assert {r.headers["trident.partition"] for r in records} == {"0/2", "1/2"}
