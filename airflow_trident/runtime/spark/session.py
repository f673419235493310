"""SparkSessions: local (tests, benchmarks, demos), spark-submit's, and Spark Connect's.

The processor takes any session. Spark's Python workers must run the same interpreter as the
driver (``PYSPARK_PYTHON``; else they start the ``python3`` on ``PATH``, which may lack pyarrow
and this package). This is the one place sessions are built, so the Airflow adapters reach Spark
through the runtime and never import ``pyspark`` themselves.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import sys
from collections.abc import Iterator, Mapping

import pyspark
from pyspark.sql import SparkSession

from airflow_trident.errors import ConfigurationError

__all__ = ["check_pyspark_files", "local_session", "remote_session", "spark_session"]


def check_pyspark_files() -> None:
    """Refuse a ``pyspark`` package whose Python files are not the ``pyspark`` distribution's.

    The Spark provider (6.x) requires ``pyspark-client``, which installs its own copy of the
    ``pyspark`` package over the same directory: after a plain ``pip install`` the Python side
    may be pyspark-client's version while the JVM side (jars, ``spark-submit``) is pyspark's.
    pyspark must win (docs/installation.md); a mismatch is refused here, before a JVM starts.

    Raises
    ------
    ConfigurationError
        If ``pyspark.__version__`` differs from the installed ``pyspark`` distribution's.
    """
    try:
        distribution = importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:  # pyspark-client alone: no local JVM here
        return
    if pyspark.__version__ != distribution:
        msg = (
            f"the pyspark package's Python files are version {pyspark.__version__}, but the "
            f"installed pyspark distribution (its jars and spark-submit) is {distribution}: "
            f"another distribution (pyspark-client, required by the Spark provider) overwrote "
            f"them; hint: pip install --force-reinstall --no-deps pyspark=={distribution}"
        )
        raise ConfigurationError(msg)


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
    check_pyspark_files()
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
    check_pyspark_files()
    return (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )


_CONNECT_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


@contextlib.contextmanager
def remote_session(url: str) -> Iterator[SparkSession]:
    """A session on a Spark Connect server, stopped when the block ends.

    Parameters
    ----------
    url
        The server's ``sc://host:port`` URL (a token rides in it as ``/;token=...``: never log
        it).

    Example: ``with remote_session("sc://127.0.0.1:15002") as spark: spark.range(3).count()``
    (needs a running server, ``pyspark/sbin/start-connect-server.sh``; docs/howto/operators.md).
    """
    # pyspark marks the whole process as a Connect client (SPARK_CONNECT_MODE_ENABLED, ...): a
    # spark-submit started later by the same worker process (a Spark commit, under `airflow dags
    # test` or a reused Celery worker) would inherit it and fail with CONNECT_URL_NOT_SET
    before = {key: os.environ.get(key) for key in _CONNECT_ENV}
    spark = SparkSession.builder.remote(url).getOrCreate()
    try:
        yield spark
    finally:
        spark.stop()
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
