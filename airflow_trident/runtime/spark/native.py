"""Source ranges read by Spark (:mod:`airflow_trident.spout.ranges`): a spout's batch as a
DataFrame that reads exactly the ranges' data in parallel; the driver never holds the tuples.

Each range is read by the reader of the kind its spec declares
(:func:`~airflow_trident.runtime.spark.readers.reader_of`: files, database tables, Kafka),
which reads the ranges of a batch that read alike at once.

Ranges that leave their record count to the job (a file log planned without counting) are
counted by the same job, in the same pass: each row is tagged with its partition as it is read,
and one observation (Spark's observed metrics) counts each partition's rows, which the batch's
emitted counts (the manifest's) take once the job ran
(:meth:`~airflow_trident.spout.ranges.PartitionRows.records`).
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
import warnings
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_trident.errors import MalformedRecordError, TridentError
from airflow_trident.runtime.spark.readers import reader_of
from airflow_trident.runtime.spark.readers.base import SQL_TYPES, Ranged, SparkReader, union
from airflow_trident.spout.ranges import AgesOut, PartitionRows, ReadSpec, SourceRange

__all__ = [
    "first_malformed",
    "native_partitions",
    "native_types",
    "range_gone",
    "read_range",
    "read_spec",
]

log = logging.getLogger(__name__)

_MOVED = {  # deprecated names of this module: where they are now (issue 54)
    "ARROW_TYPES": "airflow_trident.runtime.spark.readers.base",
    "CORRUPT": "airflow_trident.runtime.spark.readers.files",
}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    import importlib

    warnings.warn(f"{__name__}.{name} moved to {_MOVED[name]}.{name}", DeprecationWarning,
                  stacklevel=2)  # fmt: skip
    return getattr(importlib.import_module(_MOVED[name]), name)


def read_spec(spark: SparkSession, spec: ReadSpec, where: str = "") -> DataFrame:
    """The DataFrame of ``spec``: its fields, typed, from exactly its data (its kind's reader)."""
    return reader_of(spec).read(spark, spec, where)


def read_range(spark: SparkSession, source: SourceRange) -> DataFrame:
    """The DataFrame of one range."""
    return read_spec(spark, source.read_spec(), str(getattr(source, "where", "")))


def native_partitions(
    spark: SparkSession, parts: Sequence[tuple[str, PartitionRows]], pid: str | None
) -> DataFrame:
    """The union of every range of ``parts`` (source partitions, in order); with ``pid`` a
    column of that name holds each row's source partition index.

    Without ``pid`` and with every record count known, one read of the ranges that read alike
    over all partitions. Otherwise each reader still reads the ranges of all partitions it can
    tag as it reads them (line files, Kafka) at once, the others a read per partition (tagged by
    a literal); the partitions whose ranges leave their count to the job are counted as the job
    reads them, by one observation (see the module docs).
    """
    ranges = [
        Ranged(index, source.read_spec(), str(getattr(source, "where", "")))
        for index, (_, rows) in enumerate(parts)  # the index over every partition, as locally
        for source in rows.ranges
    ]
    if pid is None and all(rows.counted for _, rows in parts):
        # one scan per kind of file: Spark packs the splits of all partitions
        return union(_read_all(spark, ranges, None))
    column = pid or _PID
    df = union(_read_all(spark, ranges, column))
    uncounted = [(i, rows) for i, (_, rows) in enumerate(parts) if rows.ranges and not rows.counted]
    if uncounted:
        df = _observed(df, uncounted, column)
    return df if pid is not None else df.drop(column)


_PID = "_trident_source_partition"


def _by_reader(ranges: Sequence[Ranged]) -> dict[SparkReader, list[Ranged]]:
    """``ranges`` by their reader, in order (readers as first met)."""
    readers: dict[SparkReader, list[Ranged]] = {}
    for ranged in ranges:
        readers.setdefault(reader_of(ranged.spec), []).append(ranged)
    return readers


def _read_all(spark: SparkSession, ranges: Sequence[Ranged], column: str | None) -> list[DataFrame]:
    return [
        frame
        for reader, group in _by_reader(ranges).items()
        for frame in reader.read_all(spark, group, column)
    ]


def native_types(parts: Sequence[tuple[str, PartitionRows]]) -> dict[str, T.DataType] | None:
    """The Spark types of :func:`native_partitions`' fields (every read casts to its spec's
    types), so that planning need not ask the server; ``None`` when the ranges' schemas differ
    or a type has no entry here."""
    schemas = {source.read_spec().schema for _, rows in parts for source in rows.ranges}
    if len(schemas) != 1:
        return None
    schema = schemas.pop()
    if any(kind not in SQL_TYPES for _, kind in schema):
        return None
    return {name: SQL_TYPES[kind] for name, kind in schema}


def _observed(df: DataFrame, parts: Sequence[tuple[int, PartitionRows]], pid: str) -> DataFrame:
    """``df`` counting the rows of each of ``parts`` (partition index, rows) as the job reads
    them (Spark's observed metrics, one observation); each ``rows.observed`` then gives its
    count."""
    observation = Observation(f"trident_emitted_{uuid.uuid4().hex}")
    counts = []
    for index, rows in parts:
        name = f"n{index}"
        rows.observed = functools.partial(_seen, observation, name)
        counts.append(F.count(F.when(F.col(pid) == index, F.lit(1))).alias(name))
    return df.observe(observation, *counts)


_LISTENER_WAIT_S = 2.0
"""How long a look at an observation waits for Spark's listener bus to deliver its metrics."""


def _seen(observation: Observation, name: str) -> int | None:
    """The rows the job counted; ``None`` before it ran, or when it ran without its metrics
    (the partition's records are then counted in this process, as before any job ran)."""
    if not _done(observation):
        return None
    jo = getattr(observation, "_jo", None)
    if jo is not None and jo.getRow().length() == 0:
        # Classic Spark completes an observation with an empty row (which Observation.get
        # cannot convert) when the plan that ran lost its CollectMetrics: adaptive execution
        # replaces a subtree whose shuffle stage wrote no rows by an empty relation (a batch
        # whose ranges hold no record: a Kafka range of aborted transactions only).
        log.info("Spark ran observation %s without its metrics: counted here", observation._name)
        return None
    value = observation.get.get(name)
    return None if value is None else int(value)


def first_malformed(
    spark: SparkSession, parts: Sequence[PartitionRows]
) -> MalformedRecordError | None:
    """The error of the first malformed record of ``parts`` (every source partition of a
    batch, in the in-process runtime's order: spouts as their stages run, each one's
    partitions as emitted, each range in offset order) among the ranges whose Spark tasks
    fail on such a record without knowing of the others (Kafka ranges:
    :meth:`~airflow_trident.runtime.spark.readers.base.SparkReader.first_malformed`); ``None``
    when they hold none. The driver raises it instead of the error of the task that failed
    first, so both runtimes name the same record."""
    ranges = [Ranged(0, source.read_spec(), "") for rows in parts for source in rows.ranges]
    for reader, group in _by_reader(ranges).items():
        message = reader.first_malformed(spark, [ranged.spec for ranged in group])
        if message is not None:
            return MalformedRecordError(message)
    return None


def range_gone(parts: Sequence[PartitionRows]) -> TridentError | None:
    """The refusal of the first range of ``parts`` (in the in-process runtime's order) whose
    records the source no longer holds (a Kafka range aged out by retention:
    :class:`~airflow_trident.spout.ranges.AgesOut`), ``None`` when every one is still held:
    asked when a batch fails on Spark, so the batch fails with the error the in-process read
    raises instead of the connector's."""
    for rows in parts:
        for source in rows.ranges:
            if isinstance(source, AgesOut) and (error := source.gone()) is not None:
                return error
    return None


def _done(observation: Any, wait_s: float = _LISTENER_WAIT_S) -> bool:
    jo = getattr(observation, "_jo", None)
    if jo is not None:
        # classic: the metrics' future completes in a listener of the query, which Spark
        # calls on its listener bus, asynchronously: the action can return first (a look at
        # once then found nothing and counted the records here again). Wait for it a little.
        future = jo.future()
        deadline = time.monotonic() + wait_s
        while not future.isCompleted():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True
    return bool(getattr(observation, "_result", None))  # Spark Connect: filled by the action
