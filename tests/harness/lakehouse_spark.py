"""Delta and Iceberg tables written by both writers and read back by Spark SQL, in one child
process whose Spark runs both connectors.

A Spark with Delta's or Iceberg's connector needs the session extension at its start, which the
session-wide test session (:func:`tests.conftest.spark`) has not, and a JVM is one per process:
so ``python -m tests.harness.lakehouse_spark WORK_DIR [BACKEND] [FORMATS]`` starts one local[2]
session with the formats' extensions and runs the scenarios of :mod:`tests.harness.delta_spark`
(``python``, ``spark``) and of :mod:`tests.harness.iceberg_spark` (``python``, ``spark``) in it,
each on a table of its own, then prints the findings as JSON on the last line for
``tests/runtime/test_lakehouse_spark.py`` to assert on. ``BACKEND`` is the run's state
database, which is also the Iceberg catalog: ``sqlite`` (a file in WORK_DIR) or ``postgresql``
(``$TRIDENT_PG_URL``); ``FORMATS``: ``delta,iceberg`` (the default), or one of them.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from tests.harness import delta_spark, iceberg_spark
from tests.harness.iceberg_sinks import expected_words

__all__ = ["lakehouse_session"]


def lakehouse_session(formats: tuple[str, ...] = ("delta", "iceberg")) -> Any:
    """A local[2] session with the ``spark`` jars and those of ``formats``, their session
    extensions, and Delta's catalog as the session catalog (Iceberg's are named catalogs)."""
    from airflow_trident.runtime.spark.iceberg import ICEBERG_EXTENSION
    from airflow_trident.runtime.spark.lakehouse import DELTA_EXTENSION
    from airflow_trident.runtime.spark.session import local_session
    from tests.harness.jars import jars, require_jars
    from tests.harness.jvm import quick_jit_conf

    extensions = {"delta": DELTA_EXTENSION, "iceberg": ICEBERG_EXTENSION}
    conf = {
        "spark.jars": ",".join([*jars("spark"), *(j for f in formats for j in require_jars(f))]),
        "spark.sql.extensions": ",".join(extensions[f] for f in formats),
    }
    if "delta" in formats:
        conf["spark.sql.catalog.spark_catalog"] = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        # Delta rebuilds a table's snapshot before each write with txnAppId in 50 tasks by
        # default: 2 here (local[2]) cut a Spark append from 4-6 s to ~2 s
        # (docs/performance.md, "Delta commit")
        conf["spark.databricks.delta.snapshotPartitions"] = "2"
    session = local_session(
        "local[2]", shuffle_partitions=4, app_name="lakehouse-spark", conf=quick_jit_conf(conf)
    )  # C1 only: tests/harness/jvm.py
    session.sparkContext.setLogLevel("ERROR")
    return session


def main(argv: list[str]) -> None:
    from airflow_trident.runtime.reference import cached_topology

    work = Path(argv[1])
    backend = argv[2] if len(argv) > 2 else "sqlite"
    formats = tuple(argv[3].split(",")) if len(argv) > 3 else ("delta", "iceberg")
    if backend == "postgresql":  # a SQL catalog on PostgreSQL names its warehouse
        os.environ["TRIDENT_STATE_URL"] = os.environ["TRIDENT_PG_URL"]
        os.environ[iceberg_spark.WAREHOUSE_ENV] = f"file://{work}/warehouse"
    else:
        os.environ["TRIDENT_STATE_URL"] = f"sqlite:///{work}/state.db"
    spark = lakehouse_session(formats)
    found: dict[str, dict[str, Any]] = {f: {} for f in formats}
    try:
        for name in ("python", "spark") if "delta" in formats else ():
            cached_topology.cache_clear()  # each scenario's topology names its own table
            scenario_dir = work / f"delta-{name}"
            scenario_dir.mkdir(parents=True)
            os.environ[delta_spark.PATH_ENV] = str(scenario_dir / "table")
            run = {"python": delta_spark.scenario_python, "spark": delta_spark.scenario_spark}
            found["delta"][name] = run[name](spark, scenario_dir)
        for name in ("python", "spark") if "iceberg" in formats else ():
            cached_topology.cache_clear()
            os.environ[iceberg_spark.TABLE_ENV] = f"trident_tests.w{uuid.uuid4().hex[:10]}"
            run = {"python": iceberg_spark.scenario_python, "spark": iceberg_spark.scenario_spark}
            found["iceberg"][name] = run[name](spark, work)
    finally:
        spark.stop()
    expected = {str(n): expected_words(n) for n in (3, 4, 5)}
    print(json.dumps({**found, "expected": expected}, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv)
