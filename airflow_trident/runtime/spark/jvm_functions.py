r"""The package's JVM functions on a Spark session: ``str.split()`` as a Java function.

The wheel carries ``airflow_trident/jars/airflow-trident-functions.jar`` (built from
``jvm/functions/`` when the package is built; docs/jvm.md, "The functions jar"). Its
``StrSplit`` splits a string as Python's ``str.split()`` does, about 1.8x as fast as Spark's
``split`` on the same characters, whose regular expression is compiled for every row
(docs/performance.md, "The split on the JVM").

:func:`split_function` puts the jar on a session the first time a topology splits words there:
a classic session (``spark-submit``'s driver, a local session) by ``ADD JAR``, which also ships it
to the executors; a Spark Connect session by uploading it as an artifact of the session. It then
registers the function, runs it once on an executor over a probe string and compares the words
with Python's (a Spark Connect session shared by a topology's batches, ``[trident]
connect_session_reuse``, keeps it: later batches find it registered and skip all of this).
When any of that fails, or the package lost its jar (package data left out), the topology
splits with Spark's regular expression instead: the same words, one log line saying why.

>>> JAR.name, SPLIT_CLASS
('airflow-trident-functions.jar', 'io.github.airflowtrident.spark.StrSplit')
>>> PROBE.split()
['a', 'b', 'c', 'd', 'e', 'f', 'g']
"""

from __future__ import annotations

import logging
import threading
import weakref
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_trident.runtime.spark.session import is_connect

__all__ = ["JAR", "PROBE", "SPLIT", "SPLIT_CLASS", "split_function"]

log = logging.getLogger(__name__)

JAR = Path(__file__).resolve().parents[2] / "jars" / "airflow-trident-functions.jar"
"""The jar the package carries (committed, built by Maven from ``jvm/functions``)."""

SPLIT = "trident_str_split"
"""The name the split is registered under, a temporary function of the session."""

SPLIT_CLASS = "io.github.airflowtrident.spark.StrSplit"

PROBE = " a\tb\x1cc\u3000d\u2028e\xa0f\x85g "
"""The self-check's text (with an executor's row number after it): whitespace of each kind the
function's ranges hold, leading and trailing."""

_lock = threading.Lock()
_sessions: weakref.WeakKeyDictionary[SparkSession, str | None] = weakref.WeakKeyDictionary()


def split_function(spark: SparkSession) -> str | None:
    """The name of ``spark``'s ``str.split()`` function, registered on the first call; ``None``
    when the session cannot have it (the reason is logged once per session)."""
    with _lock:
        if spark in _sessions:
            return _sessions[spark]
        name = _register(spark)
        _sessions[spark] = name
        return name


def _register(spark: SparkSession) -> str | None:
    if not JAR.is_file():
        log.info("words split by Spark's regular expression: the package has no %s", JAR.name)
        return None
    try:
        if is_connect(spark) and spark.catalog.functionExists(SPLIT):
            # a shared session (``[trident] connect_session_reuse``): an earlier batch registered
            # it, and it is only kept registered when its self-check passed
            log.info(
                "words split by %s (%s, registered in this shared session)", SPLIT_CLASS, SPLIT
            )
            return SPLIT
        if is_connect(spark):
            spark.addArtifacts(str(JAR))
        else:
            spark.sql("ADD JAR '" + str(JAR).replace("\\", "\\\\").replace("'", "\\'") + "'")
        spark.udf.registerJavaFunction(SPLIT, SPLIT_CLASS, T.ArrayType(T.StringType()))
        text = F.concat(F.lit(PROBE), F.col("id").cast("string"))
        rows = spark.range(1, numPartitions=1).select(F.call_udf(SPLIT, text)).collect()
        got = list(rows[0][0])
    except Exception as exc:  # a session that refuses jars or Java functions: the regex
        _unregister(spark)
        log.warning(
            "words split by Spark's regular expression: %s could not be loaded (%s: %s)",
            JAR.name,
            type(exc).__name__,
            str(exc).splitlines()[0] if str(exc) else "",
        )
        return None
    if got != (PROBE + "0").split():
        log.warning(
            "words split by Spark's regular expression: %s split %r into %r, Python into %r",
            JAR.name, PROBE + "0", got, (PROBE + "0").split(),
        )  # fmt: skip
        _unregister(spark)
        return None
    log.info("words split by %s (%s, from %s)", SPLIT_CLASS, SPLIT, JAR)
    return SPLIT


def _unregister(spark: SparkSession) -> None:
    """Drop the function from ``spark`` (a shared session's later batches must not use one that
    failed its self-check); best effort."""
    try:
        spark.sql(f"DROP TEMPORARY FUNCTION IF EXISTS {SPLIT}")
    except Exception as exc:
        log.debug("could not drop %s: %s", SPLIT, exc)
