"""Iceberg tables written by both writers and read back by Spark SQL: the scenarios, run in a
child process whose Spark has Iceberg's connector (:mod:`tests.harness.lakehouse_spark`). The run's
state database (``$TRIDENT_STATE_URL``) is the Iceberg catalog.

Scenarios, each on a table of its own (``$TRIDENT_TEST_ICEBERG_TABLE``; the topology
:func:`iceberg_spark_words`, 3 commit partitions, loaded by reference as ``commit_mode="spark"``
loads it):

``python``
    txids 1..3 committed by the Python writer (pyiceberg), txid 2's commit dying after its
    Iceberg commits (the compare-and-set never ran) and retried, txids 3 and 1 applied again;
    Spark SQL reads the table.
``spark``
    txid 1 committed through Spark's Iceberg writer; txid 2 appended by Spark's writer and its
    compare-and-set lost, retried by the Python writer; txid 3 the other way round; txid 4's
    Spark commit dying between Spark's append and the commit that publishes it, retried on
    Spark; txid 5's publish finding that another writer moved ``main`` meanwhile (a zombie
    attempt, or another topology), so Spark appends again; Spark SQL and pyiceberg read it.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from airflow_trident.operation import Split
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.iceberg import IcebergWriter, iceberg_state
from airflow_trident.topology import TridentTopology
from tests.harness.iceberg_sinks import SENTENCES
from tests.harness.lakehouse_steps import commit_with_replays, crash_once, staged

__all__ = [
    "REFERENCE",
    "iceberg_session",
    "iceberg_spark_words",
    "scenario_python",
    "scenario_spark",
]

REFERENCE = "tests.harness.iceberg_spark:iceberg_spark_words"
TABLE_ENV = "TRIDENT_TEST_ICEBERG_TABLE"
WAREHOUSE_ENV = "TRIDENT_TEST_ICEBERG_WAREHOUSE"
APP_ID = "iceberg_spark_words.events"


def iceberg_spark_words() -> TridentTopology:
    """Sentences -> split -> every word appended by :class:`IcebergWriter` (3 commit partitions)
    to the table ``$TRIDENT_TEST_ICEBERG_TABLE`` of the run's state database's catalog."""
    topology = TridentTopology("iceberg_spark_words")
    (
        topology.new_stream(
            "sentences", MemoryTransactionalSpout(SENTENCES, ["sentence"], take_per_batch=2)
        )
        .each(["sentence"], Split(), ["word"])
        .partition_persist(
            iceberg_state(os.environ[TABLE_ENV], APP_ID, warehouse=os.environ.get(WAREHOUSE_ENV)),
            ["word"],
            IcebergWriter(),
            name="events",
        )
    )
    return topology


def iceberg_session() -> Any:
    """A local[2] session with the ``spark`` and ``iceberg`` jars and Iceberg's session
    extension (docs/jvm.md, "Lakehouse connectors")."""
    from airflow_trident.runtime.spark.iceberg import ICEBERG_EXTENSION
    from airflow_trident.runtime.spark.session import local_session
    from tests.harness.jars import jars, require_jars
    from tests.harness.jvm import quick_jit_conf

    conf = {
        "spark.jars": ",".join([*jars("spark"), *require_jars("iceberg")]),
        "spark.sql.extensions": ICEBERG_EXTENSION,
    }
    session = local_session(
        "local[2]", shuffle_partitions=4, app_name="iceberg-spark", conf=quick_jit_conf(conf)
    )  # C1 only: tests/harness/jvm.py
    session.sparkContext.setLogLevel("ERROR")
    return session


def _factory() -> Any:
    from airflow_trident.runtime.reference import load_topology

    topology = load_topology(REFERENCE)
    node: Any = topology.nodes[topology.states["events"]]
    return node.factory.located_at(_state_url())


def _state_url() -> str:
    return os.environ["TRIDENT_STATE_URL"]


def _spark_view(spark: Any) -> dict[str, Any]:
    """What Spark SQL reads of the table: words counted, rows, and its snapshots by writer."""
    from airflow_trident.runtime.spark.iceberg import use_catalog

    ident = use_catalog(spark, _factory())
    spark.sql(f"REFRESH TABLE {ident}")
    rows = spark.sql(f"SELECT word, count(*) AS n FROM {ident} GROUP BY word").collect()
    total = spark.sql(f"SELECT count(*) AS n FROM {ident}").collect()[0]["n"]
    snapshots = spark.sql(f"SELECT summary FROM {ident}.snapshots ORDER BY committed_at").collect()
    writers = Counter(
        "spark" if "spark.app.id" in (s["summary"] or {}) else "pyiceberg" for s in snapshots
    )
    txids = [(s["summary"] or {}).get("trident.txid") for s in snapshots if s["summary"]]
    return {
        "words": {r["word"]: r["n"] for r in rows},
        "rows": total,
        "writers": dict(writers),
        "txids": [t for t in txids if t is not None],
    }


def _steps(work: Path) -> Any:
    from airflow_trident.batch.steps import BatchSteps
    from airflow_trident.coordination.memory import MemoryCoordinatorStore
    from airflow_trident.runtime.reference import load_topology
    from airflow_trident.runtime.staging import StagingArea
    from airflow_trident.state.binding import StateBinding

    topology = load_topology(REFERENCE)
    store = MemoryCoordinatorStore(topology.name)
    staging = StagingArea(str(work / f"staging-{uuid.uuid4().hex[:6]}"), topology.name)
    return BatchSteps(topology, store, staging, states=StateBinding(_state_url()))


def _main_txids(table: Any) -> list[str | None]:
    """The ``trident.txid`` of each snapshot of ``main``'s history, oldest first."""
    txids: list[str | None] = []
    snapshot = table.current_snapshot()
    while snapshot is not None:
        txids.append(snapshot.summary.get("trident.txid") if snapshot.summary else None)
        parent = snapshot.parent_snapshot_id
        snapshot = None if parent is None else table.snapshot_by_id(parent)
    return txids[::-1]


def _pyiceberg_rows() -> int:
    table = _factory().load_table()
    return 0 if table is None else table.scan().to_arrow().num_rows


def scenario_python(spark: Any, work: Path) -> dict[str, Any]:
    steps = _steps(work)
    commit_with_replays(steps)
    return {"committed": steps.store.commits.committed_txid(), **_spark_view(spark)}


def scenario_spark(spark: Any, work: Path) -> dict[str, Any]:
    from airflow_trident.runtime.spark import iceberg
    from airflow_trident.runtime.spark.commit import SparkBatchApplier

    steps = _steps(work)
    applier = SparkBatchApplier(spark, REFERENCE, steps.staging, lambda t: {}, steps.states)
    found: dict[str, Any] = {}
    txid, _, _ = staged(steps, "r1")
    steps.commit(txid, applier=applier)
    found["after_spark_1"] = _pyiceberg_rows()
    # txid 2: Spark's writer commits to the table, the compare-and-set is lost; the Python
    # writer's retry
    txid, plan, manifest = staged(steps, "r2")
    applier.apply_staged(plan, manifest)
    found["after_spark_2"] = _pyiceberg_rows()
    steps.commit(txid)
    found["after_python_retry_2"] = _pyiceberg_rows()
    # txid 3: the Python writer commits to the table, the compare-and-set is lost; Spark retries
    txid, plan, manifest = staged(steps, "r3")
    steps.apply_staged(plan, manifest)
    found["after_python_3"] = _pyiceberg_rows()
    steps.commit(txid, applier=applier)
    found["after_spark_retry_3"] = _pyiceberg_rows()
    # txid 4: Spark's append lands on its branch, the driver dies before publishing it
    txid, _, _ = staged(steps, "r4")
    publish = iceberg._publish
    found["crash"] = crash_once(
        iceberg, "_publish", "injected: the driver died between Spark's append and its publish",
        lambda: steps.commit(txid, applier=applier),
    )
    table = _factory().load_table()
    found["refs_after_crash"] = sorted(table.metadata.refs)
    found["after_crash_4"] = _pyiceberg_rows()
    steps.commit(txid, applier=applier)
    found["after_spark_retry_4"] = _pyiceberg_rows()
    # txid 5: another writer moves main between Spark's append and the publish
    txid, _, _ = staged(steps, "r5")
    moved: list[int] = []

    def races(factory: Any, state: Any, staged: int, base: Any, txid: int) -> None:
        if not moved:
            import pyarrow as pa

            other = factory.load_table()
            rows = pa.table({"word": ["intruder"], "trident_txid": pa.array([0], pa.int64())})
            other.append(rows.cast(other.schema().as_arrow()))
            moved.append(1)
        publish(factory, state, staged, base, txid)

    iceberg._publish = races
    try:
        steps.commit(txid, applier=applier)
    finally:
        iceberg._publish = publish
    table = _factory().load_table()
    found["raced"] = len(moved)
    found["refs_at_end"] = sorted(table.metadata.refs)
    found["properties"] = {
        k: v for k, v in table.properties.items() if k.startswith("trident.txid.")
    }
    found["pyiceberg_rows"] = table.scan().to_arrow().num_rows
    found["main_txids"] = _main_txids(table)
    return {"committed": steps.store.commits.committed_txid(), **found, **_spark_view(spark)}
