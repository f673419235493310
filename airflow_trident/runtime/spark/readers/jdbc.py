"""A database table range read by Spark (:mod:`airflow_trident.spout.database_table`: a
:class:`~airflow_trident.spout.ranges.ReadSpec` of format ``"jdbc"``, whose ``options`` are
Spark's JDBC reader options saying which rows): read by the executors in parallel, each field
cast to its spec's type."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_trident.errors import ConfigurationError
from airflow_trident.runtime.spark.readers.base import Ranged, by_partition
from airflow_trident.runtime.spark.session import is_connect
from airflow_trident.spout.ranges import ReadSpec

__all__ = ["JDBC", "JdbcReader"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JdbcReader:
    """The :class:`~airflow_trident.runtime.spark.readers.base.SparkReader` of database
    tables."""

    def read(self, spark: SparkSession, spec: ReadSpec, where: str) -> DataFrame:
        """The DataFrame of ``spec``: its fields, typed, from exactly the rows its options say
        (the spec's JDBC driver added to the session when it cannot load it)."""
        if spec.driver is not None:
            _with_driver(spark, *spec.driver)
        df = spark.read.format("jdbc").options(**spec.options).load()
        return df.select(*[F.col(f"`{n}`").cast(k).alias(n) for n, k in spec.schema])

    def read_all(
        self, spark: SparkSession, ranges: Sequence[Ranged], column: str | None
    ) -> list[DataFrame]:
        """One read of ranges that read alike (per source partition with ``column``)."""
        return by_partition(spark, ranges, column, self.read)

    def first_malformed(self, spark: SparkSession, specs: Sequence[ReadSpec]) -> str | None:
        """``None``: a table's rows are typed by the database."""
        return None


JDBC = JdbcReader()


def _with_driver(spark: SparkSession, driver: str, jar: str) -> None:
    """Add ``jar`` to the session when it cannot load the JDBC ``driver`` class (the user's
    ``spark.jars`` may have it already); a missing jar is a ``ConfigurationError``.

    A Spark Connect client cannot ask the server's JVM: it adds the jar when the file is here
    (a server on this machine), else relies on the server's own ``spark.jars`` (its ``--jars``
    at start), whose lack Spark reports as "No suitable driver"."""
    if not is_connect(spark):  # classic: ask the driver JVM
        jvm = spark.sparkContext._jvm
        if jvm is not None and jvm.org.apache.spark.util.Utils.classIsLoadable(driver):
            return
    elif not os.path.isfile(jar):
        log.info("JDBC driver jar %s is not here: the Connect server's spark.jars has it?", jar)
        return
    if not os.path.isfile(jar):
        msg = (
            f"the Spark session cannot load the JDBC driver {driver} and its jar {jar} does not "
            f"exist; hint: put the driver on the session's spark.jars (Maven Central: "
            f"org.postgresql:postgresql, see docs/jvm.md), give the spout jdbc_jar=<path>, or "
            f"install Debian's libpostgresql-jdbc-java"
        )
        raise ConfigurationError(msg)
    spark.sql(f"ADD JAR '{jar}'")
