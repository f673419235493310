"""Delta tables written by both writers and read back by Spark SQL: the scenarios, run in a child
process whose Spark has Delta's connector (:mod:`tests.harness.lakehouse_spark`; a session with
Delta needs ``spark.sql.extensions`` and ``DeltaCatalog`` at its start, which the session-wide
test session has not).

Scenarios (the topology :func:`delta_words`, 3 commit partitions, is loaded by reference, as
``commit_mode="spark"`` loads it):

``python``
    txids 1..3 committed by the Python writer (delta-rs) in this process, txid 2's commit dying
    after its Delta commit (the compare-and-set never ran) and retried, txid 3 and txid 1
    applied again; then Spark SQL reads the table.
``spark``
    txid 1 committed through Spark's Delta writer; txid 2 appended by Spark's writer and its
    compare-and-set lost, then retried by the Python writer; txid 3 appended by the Python
    writer and its compare-and-set lost, then retried on Spark; txid 4's Spark commit dying
    between its data commit and its app-level record, retried on Spark; then Spark SQL reads.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from airflow_trident.operation import Split
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.delta import DeltaWriter, delta_state
from airflow_trident.topology import TridentTopology
from tests.harness.iceberg_sinks import SENTENCES
from tests.harness.lakehouse_steps import commit_with_replays, crash_once, staged

__all__ = [
    "PATH_ENV",
    "REFERENCE",
    "delta_words",
    "lakehouse_session",
    "scenario_python",
    "scenario_spark",
]

REFERENCE = "tests.harness.delta_spark:delta_words"
PATH_ENV = "TRIDENT_TEST_DELTA_PATH"


def delta_words() -> TridentTopology:
    """Sentences -> split -> every word appended to the Delta table at ``$TRIDENT_TEST_DELTA_PATH``
    by :class:`DeltaWriter` (3 commit partitions)."""
    topology = TridentTopology("delta_words")
    (
        topology.new_stream(
            "sentences", MemoryTransactionalSpout(SENTENCES, ["sentence"], take_per_batch=2)
        )
        .each(["sentence"], Split(), ["word"])
        .partition_persist(
            delta_state(os.environ[PATH_ENV], "delta_words.events"),
            ["word"],
            DeltaWriter(),
            name="events",
        )
    )
    return topology


def lakehouse_session() -> Any:
    """A local[2] session with the ``spark`` and ``delta`` jars and Delta's session extension
    and catalog (docs/jvm.md, "Lakehouse connectors")."""
    from airflow_trident.runtime.spark.session import local_session
    from tests.harness.jars import jars, require_jars
    from tests.harness.jvm import quick_jit_conf

    conf = {
        "spark.jars": ",".join([*jars("spark"), *require_jars("delta")]),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    }
    session = local_session(
        "local[2]", shuffle_partitions=4, app_name="delta-spark", conf=quick_jit_conf(conf)
    )  # C1 only: tests/harness/jvm.py
    session.sparkContext.setLogLevel("ERROR")
    return session


def _spark_view(spark: Any, path: str) -> dict[str, Any]:
    """What Spark SQL reads of the table: words counted, rows, and its commits by engine."""
    rows = spark.sql(f"SELECT word, count(*) AS n FROM delta.`{path}` GROUP BY word").collect()
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    engines = Counter(
        "spark" if (h["engineInfo"] or "").startswith("Apache-Spark") else "delta-rs"
        for h in history
    )
    total = spark.sql(f"SELECT count(*) AS n FROM delta.`{path}`").collect()[0]["n"]
    return {"words": {r["word"]: r["n"] for r in rows}, "rows": total, "engines": dict(engines)}


def _steps(work: Path) -> Any:
    from airflow_trident.batch.steps import BatchSteps
    from airflow_trident.coordination.memory import MemoryCoordinatorStore
    from airflow_trident.runtime.reference import load_topology
    from airflow_trident.runtime.staging import StagingArea

    topology = load_topology(REFERENCE)
    store = MemoryCoordinatorStore(topology.name)
    return BatchSteps(topology, store, StagingArea(str(work / "staging"), topology.name))


def scenario_python(spark: Any, work: Path) -> dict[str, Any]:
    steps = _steps(work)
    commit_with_replays(steps)
    return {
        "committed": steps.store.commits.committed_txid(),
        **_spark_view(spark, os.environ[PATH_ENV]),
    }


def scenario_spark(spark: Any, work: Path) -> dict[str, Any]:
    from airflow_trident.runtime.spark import lakehouse
    from airflow_trident.runtime.spark.commit import SparkBatchApplier

    steps = _steps(work)
    applier = SparkBatchApplier(spark, REFERENCE, steps.staging, lambda t: {}, steps.states)
    found: dict[str, Any] = {}
    txid, _, _ = staged(steps, "r1")
    steps.commit(txid, applier=applier)
    # txid 2: Spark's writer commits to the table, the compare-and-set is lost; the Python
    # writer's retry
    txid, plan, manifest = staged(steps, "r2")
    applier.apply_staged(plan, manifest)
    found["after_spark_2"] = _spark_view(spark, os.environ[PATH_ENV])["rows"]
    steps.commit(txid)
    found["after_python_retry_2"] = _spark_view(spark, os.environ[PATH_ENV])["rows"]
    # txid 3: the Python writer commits to the table, the compare-and-set is lost; Spark retries
    txid, plan, manifest = staged(steps, "r3")
    steps.apply_staged(plan, manifest)
    found["after_python_3"] = _spark_view(spark, os.environ[PATH_ENV])["rows"]
    steps.commit(txid, applier=applier)
    found["after_spark_retry_3"] = _spark_view(spark, os.environ[PATH_ENV])["rows"]
    # txid 4: Spark's data commit lands, the driver dies before the app-level record
    txid, _, _ = staged(steps, "r4")
    found["crash"] = crash_once(
        lakehouse,
        "record_app_transaction",
        "injected: the driver died before the app-level record",
        lambda: steps.commit(txid, applier=applier),
    )
    from deltalake import DeltaTable

    table = DeltaTable(os.environ[PATH_ENV])
    found["app_before_retry"] = table.transaction_version("delta_words.events")
    steps.commit(txid, applier=applier)
    table = DeltaTable(os.environ[PATH_ENV])
    found["app_after_retry"] = table.transaction_version("delta_words.events")
    found["partitions"] = {
        i: table.transaction_version(f"delta_words.events.p{i}of3") for i in range(3)
    }
    return {
        "committed": steps.store.commits.committed_txid(),
        **found,
        **_spark_view(spark, os.environ[PATH_ENV]),
    }
