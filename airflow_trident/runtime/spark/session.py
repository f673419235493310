"""A local SparkSession for tests, benchmarks and demos (the processor takes any session).

Spark's Python workers must run the same interpreter as the driver (``PYSPARK_PYTHON``; else
they start the ``python3`` on ``PATH``, which may lack pyarrow and this package).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

__all__ = ["local_session", "spark_session"]


def local_session(
    master: str = "local[2]",
    *,
    shuffle_partitions: int = 4,
    app_name: str = "airflow-trident",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A local-mode session: UI off, Arrow on, workers on this interpreter, loopback only.

    Example: ``spark = local_session("local[2]")`` (starts a JVM: a few seconds).
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def spark_session(app_name: str = "airflow-trident") -> SparkSession:
    """The session of a ``spark-submit`` application (master and resources come from
    spark-submit), with Arrow on."""
    return (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
