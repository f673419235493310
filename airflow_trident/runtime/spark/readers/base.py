"""What every Spark reader of source ranges shares: the :class:`SparkReader` protocol, a range
as a reader gets it (:class:`Ranged`), the read specs' kinds of field as Spark and Arrow types,
and the reads of ranges that read alike (:func:`merged`, :func:`by_partition`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple, Protocol, runtime_checkable

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_trident.spout.ranges import ReadSpec

__all__ = [
    "ARROW_TYPES",
    "SQL_TYPES",
    "Ranged",
    "SparkReader",
    "by_partition",
    "merged",
    "read_kind",
    "union",
]

ARROW_TYPES: dict[str, Any] = {  # a read spec's kind of field: its Arrow type
    "string": pa.string(),
    "bigint": pa.int64(),
    "int": pa.int32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "null": pa.null(),
    "binary": pa.binary(),
}

SQL_TYPES: dict[str, T.DataType] = {  # a read spec's kind of field: its Spark type
    "string": T.StringType(),
    "bigint": T.LongType(),
    "int": T.IntegerType(),
    "double": T.DoubleType(),
    "boolean": T.BooleanType(),
    "null": T.NullType(),
    "binary": T.BinaryType(),
}


class Ranged(NamedTuple):
    """One range of a batch as a reader gets it: the index of its source partition (over
    every partition of the batch, as in process), its spec and what its errors name."""

    partition: int
    spec: ReadSpec
    where: str


@runtime_checkable
class SparkReader(Protocol):
    """Reads the ranges whose specs declare its kind (``ReadSpec.format``; the registry:
    :mod:`airflow_trident.runtime.spark.readers`) as DataFrames of the specs' fields, typed."""

    def read(self, spark: SparkSession, spec: ReadSpec, where: str) -> DataFrame:
        """The DataFrame of one range (``where``: what its errors name)."""

    def read_all(
        self, spark: SparkSession, ranges: Sequence[Ranged], column: str | None
    ) -> list[DataFrame]:
        """The DataFrames of ``ranges`` (in the in-process order), read together where they
        read alike; with ``column``, a column of that name holds each row's source partition
        index (``Ranged.partition``)."""

    def first_malformed(self, spark: SparkSession, specs: Sequence[ReadSpec]) -> str | None:
        """The error of the first malformed record of ``specs`` (in the in-process order)
        when the reader's Spark tasks fail on such a record without knowing of each other (so
        the task failing first may not hold it), else ``None`` (a second job, asked only when
        a batch fails)."""


def read_kind(spec: ReadSpec) -> tuple[object, ...]:
    """What ranges share to be read by one read of all their paths."""
    return (spec.format, spec.schema, spec.on_malformed, tuple(sorted(spec.options.items())))


_Read = Callable[[SparkSession, ReadSpec, str], DataFrame]


def merged(spark: SparkSession, ranges: Sequence[Ranged], read: _Read) -> list[DataFrame]:
    """``ranges`` read by ``read``: one read of all the paths of ranges that read alike
    (:func:`read_kind`), its errors naming the first one's spout (its ``where`` without the
    partition)."""
    groups: dict[tuple[object, ...], list[ReadSpec]] = {}
    wheres: dict[tuple[object, ...], str] = {}
    for _, spec, where in ranges:
        key = read_kind(spec)
        groups.setdefault(key, []).append(spec)
        wheres.setdefault(key, where.split(", partition ")[0])
    return [
        read(spark, replace(specs[0], paths=tuple(p for s in specs for p in s.paths)), wheres[key])
        for key, specs in groups.items()
    ]


def by_partition(
    spark: SparkSession, ranges: Sequence[Ranged], column: str | None, read: _Read
) -> list[DataFrame]:
    """:func:`merged`, each source partition's ranges apart when ``column`` is given: their
    rows then tagged with its index in that column."""
    if column is None:
        return merged(spark, ranges, read)
    parts: dict[int, list[Ranged]] = {}
    for ranged in ranges:
        parts.setdefault(ranged.partition, []).append(ranged)
    return [
        frame.withColumn(column, F.lit(index).cast("int"))
        for index, group in parts.items()
        for frame in merged(spark, group, read)
    ]


def union(frames: Sequence[DataFrame]) -> DataFrame:
    """The frames' rows in one DataFrame (by column name)."""
    return functools.reduce(DataFrame.unionByName, frames)
