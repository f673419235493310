"""Spark's readers of source ranges, one per kind of read, behind one protocol
(:class:`~airflow_trident.runtime.spark.readers.base.SparkReader`), chosen by the kind a
range's spec declares (``ReadSpec.format``): files (:mod:`.files`: ``"json"``, ``"csv"``,
``"parquet"``), database tables (:mod:`.jdbc`: ``"jdbc"``), Kafka (:mod:`.kafka`:
``"kafka"``). A new kind of read is a reader module and its line in :data:`READERS`.

>>> reader_of(ReadSpec("parquet", ("/data/a.parquet",), (("n", "bigint"),))) is FILES
True
"""

from __future__ import annotations

from airflow_trident.runtime.spark.readers.base import SparkReader
from airflow_trident.runtime.spark.readers.files import FILES
from airflow_trident.runtime.spark.readers.jdbc import JDBC
from airflow_trident.runtime.spark.readers.kafka import KAFKA
from airflow_trident.spout.ranges import ReadSpec

__all__ = ["READERS", "reader_of"]

READERS: dict[str, SparkReader] = {
    "json": FILES,
    "csv": FILES,
    "parquet": FILES,
    "jdbc": JDBC,
    "kafka": KAFKA,
}
"""The reader of each kind of spec (``ReadSpec.format``)."""


def reader_of(spec: ReadSpec) -> SparkReader:
    """The reader of ``spec``: by its kind; files (read as CSV) for a kind not listed."""
    return READERS.get(spec.format, FILES)
