"""SparkSessions: local (tests, benchmarks, demos), spark-submit's, and Spark Connect's.

The processor takes any session. Spark's Python workers must run the same interpreter as the
driver (``PYSPARK_PYTHON``; else they start the ``python3`` on ``PATH``, which may lack pyarrow
and this package). This is the one place sessions are built, so the Airflow adapters reach Spark
through the runtime and never import ``pyspark`` themselves.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import importlib.metadata
import logging
import os
import sys
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pyspark
from pyspark.sql import SparkSession

from airflow_trident.errors import ConfigurationError
from airflow_trident.runtime.spark.compat import close_release_pool_without_waiting

__all__ = [
    "check_pyspark_files",
    "is_connect",
    "local_session",
    "remote_session",
    "shared_session_id",
    "spark_session",
]

log = logging.getLogger(__name__)


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


def is_connect(spark: object) -> bool:
    """Whether ``spark`` is a Spark Connect client's session (no ``SparkContext``, no JVM).

    >>> is_connect(object())
    False
    """
    return type(spark).__module__.startswith("pyspark.sql.connect")


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


_GENERATIONS = 32
"""How many shared session ids of one day :func:`remote_session` tries before it opens a
session of its own (each released or expired session id is refused by the server for good)."""


def shared_session_id(key: str, *, day: str, generation: int = 0) -> str:
    """The Spark Connect session id every task sharing ``key`` attaches to on ``day``.

    A UUID (version 4 in form, as the Connect client requires) derived from the key, so tasks
    on any machine find the same session without asking anyone; ``generation`` moves past ids
    the server no longer accepts (released, or expired after its idle timeout).

    >>> a = shared_session_id("wc|code", day="2026-11-25")
    >>> a == shared_session_id("wc|code", day="2026-11-25"), uuid.UUID(a).version
    (True, 4)
    >>> len({a, shared_session_id("wc|code", day="2026-11-26"),
    ...      shared_session_id("wc|code", day="2026-11-25", generation=1)})
    3
    """
    digest = hashlib.sha256(f"{key}|{day}|{generation}".encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def _with_session_id(url: str, session_id: str) -> str:
    """``url`` with its ``session_id`` parameter set (other parameters, e.g. a token, kept).

    >>> _with_session_id("sc://h:15002", "S")
    'sc://h:15002/;session_id=S'
    >>> _with_session_id("sc://h:15002/;use_ssl=true;session_id=old", "S")
    'sc://h:15002/;use_ssl=true;session_id=S'
    >>> _with_session_id("sc://h:15002/", "S")  # as the Spark provider's hook builds it
    'sc://h:15002/;session_id=S'
    """
    base, _, params = url.partition(";")
    base = base.rstrip("/")
    kept = [p for p in params.split(";") if p and not p.startswith("session_id=")]
    return f"{base}/;" + ";".join([*kept, f"session_id={session_id}"])


def _is_closed_session(exc: BaseException) -> bool:
    return "SESSION_CLOSED" in str(exc)


def _stop(spark: SparkSession, *, release: bool) -> None:
    """Stop a Spark Connect session; ``release=False`` detaches, leaving it on the server."""
    connect: Any = spark  # pyspark.sql.connect.session.SparkSession
    connect.release_session_on_close = release
    connect.stop()


def _attach_shared(url: str, share: str) -> tuple[SparkSession, bool]:
    """A session attached to ``share``'s shared id (``True``), else, when every generation of
    today's ids is closed, a session of its own (``False``)."""
    day = datetime.datetime.now(datetime.UTC).date().isoformat()
    for generation in range(_GENERATIONS):
        session_id = shared_session_id(share, day=day, generation=generation)
        spark = SparkSession.builder.remote(_with_session_id(url, session_id)).create()
        try:
            spark.version  # noqa: B018 - the first request: a closed id is refused here
        except Exception as exc:
            _stop(spark, release=False)
            if not _is_closed_session(exc):
                raise
            continue
        return spark, True
    log.warning("every shared Spark Connect session id of today is closed: a session of its own")
    return SparkSession.builder.remote(url).create(), False


@contextlib.contextmanager
def remote_session(url: str, *, share: str | None = None) -> Iterator[SparkSession]:
    """A session on a Spark Connect server, stopped when the block ends.

    Parameters
    ----------
    url
        The server's ``sc://host:port`` URL (a token rides in it as ``/;token=...``: never log
        it).
    share
        A key naming a server-side session that outlives the block: every block given the same
        key (in any process, on any machine) attaches to that session, and leaving the block
        detaches without releasing it. The session's Python workers, which a new session starts
        again for its first Python step (seconds), stay warm between batches; the server
        releases the session after its idle timeout
        (``spark.connect.session.manager.defaultSessionTimeout``, 60 min by default), and the
        next block attaches to a new one. ``None``: a session of the block's own, released at
        its end.

    Example: ``with remote_session("sc://127.0.0.1:15002") as spark: spark.range(3).count()``
    (needs a running server: ``spark-submit --class org.apache.spark.sql.connect.service.
    SparkConnectServer``, or a Spark distribution's ``sbin/start-connect-server.sh``;
    docs/howto/operators.md).
    """
    # pyspark marks the whole process as a Connect client (SPARK_CONNECT_MODE_ENABLED, ...): a
    # spark-submit started later by the same worker process (a Spark commit, under `airflow dags
    # test` or a reused Celery worker) would inherit it and fail with CONNECT_URL_NOT_SET
    before = {key: os.environ.get(key) for key in _CONNECT_ENV}
    close_release_pool_without_waiting()  # PySpark 4.1's client can deadlock closing sessions
    if share is None:
        spark, shared = SparkSession.builder.remote(url).getOrCreate(), False
    else:
        spark, shared = _attach_shared(url, share)
    try:
        yield spark
    finally:
        _stop(spark, release=not shared)
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
