"""Kafka ranges read by Spark (:class:`~airflow_trident.spout.kafka_records.KafkaReadSpec`):
``spark.read.format("kafka")`` of the ranges' spans (their per-partition ``startingOffsets`` /
``endingOffsets``), ``includeHeaders`` and the spout's isolation level, then the spout's own
record parser on the executors, so both runtimes emit the same tuples.

The parser runs in a scalar Arrow UDF (``arrow_udf``) over the columns it needs, each record's
``key``, ``value``, ``headers``, its offset and the index of its topic partition (for its
errors): it gives the key's text, the value's fields, the headers' text and whether the record
is kept. The topic, partition, offset and timestamp of the tuple stay in the JVM, so about half
the bytes a ``mapInArrow`` of whole rows moved cross to Python and back (docs/performance.md,
"Kafka"). The UDF is nondeterministic to Spark, so the optimizer never evaluates it twice for a
record.

JSON values take the file log's fast path when they can
(:meth:`~airflow_trident.spout.file_records.LineParser.parse_column`: Arrow's JSON reader in
C++, which declines a batch holding anything it might not parse exactly as the per-record
parser does; a value with a line break is left to the parser too): a batch it takes gives the
same tuples, a batch it declines is parsed record by record, so errors are the parser's.

A malformed record fails the job with the in-process error. Tasks read partitions in
parallel, so the task that fails first may hold a later partition's record than the one the
in-process read (partition by partition, in offset order) names: :func:`first_malformed`
reads the batch's ranges again, keeping only their malformed records, and gives the first
in the in-process order, which the driver raises instead (a second job, only when a batch fails).

A batch's ranges that read alike (one parser but for the partition it names in errors, one
connection, one isolation level) are one ``format("kafka")`` read of all their topic partitions
(:func:`read_kafka_ranges`): one Spark scan, a task per topic partition as before, each
record's errors naming the batch partition they do in process.

The connector jar (``org.apache.spark:spark-sql-kafka-0-10``) is on the session's
``spark.jars`` (docs/jvm.md). The options hold the connection's ``kafka.*`` settings (SASL's
JAAS line among them): they go to the reader, never to a log.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.functions import arrow_udf

from airflow_trident.errors import MalformedRecordError, TridentError
from airflow_trident.runtime.spark.python_ops import failure_text
from airflow_trident.runtime.spark.readers.base import ARROW_TYPES, SQL_TYPES, Ranged
from airflow_trident.spout.kafka_records import (
    META_FIELDS,
    KafkaReadSpec,
    KafkaRecordParser,
    KafkaSpan,
    RawRecord,
    headers_json,
    text,
)
from airflow_trident.spout.ranges import ReadSpec

__all__ = [
    "KAFKA",
    "KafkaReader",
    "fast_columns",
    "first_malformed",
    "read_kafka",
    "read_kafka_ranges",
]


@dataclass(frozen=True)
class KafkaReader:
    """The :class:`~airflow_trident.runtime.spark.readers.base.SparkReader` of Kafka ranges
    (specs of kind ``"kafka"``: :class:`~airflow_trident.spout.kafka_records.KafkaReadSpec`)."""

    def read(self, spark: SparkSession, spec: ReadSpec, where: str) -> DataFrame:
        """The DataFrame of one range (its parser names it in errors)."""
        return read_kafka(spark, cast(KafkaReadSpec, spec))

    def read_all(
        self, spark: SparkSession, ranges: Sequence[Ranged], column: str | None
    ) -> list[DataFrame]:
        """One read of the ranges that read alike (:func:`read_kafka_ranges`)."""
        specs = [(ranged.partition, cast(KafkaReadSpec, ranged.spec)) for ranged in ranges]
        return read_kafka_ranges(spark, specs, column)

    def first_malformed(self, spark: SparkSession, specs: Sequence[ReadSpec]) -> str | None:
        """See :func:`first_malformed`."""
        return first_malformed(spark, [cast(KafkaReadSpec, spec) for spec in specs])


KAFKA = KafkaReader()


@dataclass(frozen=True)
class _ParseValues:
    """The scalar Arrow UDF over the connector's rows (``arrow_udf``): each record's
    ``key``, ``value`` and ``headers`` made the parts of the spout's tuple they give (the key's
    text, the value's fields, the headers' text), and whether the record is kept (``False``: a
    malformed value of a parser that drops them). The record's topic, partition, offset and
    timestamp stay in the JVM: only these columns cross to Python and back (about half the
    bytes a ``mapInArrow`` of whole rows moves; docs/performance.md).

    ``places``: ``(topic, partition, where)`` of each topic partition read; ``place`` is each
    record's index into it, its errors naming that ``where``."""

    parser: KafkaRecordParser
    places: tuple[tuple[str, int, str], ...]

    def __call__(
        self, key: pa.Array, value: pa.Array, place: pa.Array, offset: pa.Array, headers: pa.Array
    ) -> pa.Array:
        try:
            columns = self.columns(key, value, place, offset, headers)
        except TridentError as exc:
            raise RuntimeError(failure_text(exc)) from None
        return pa.StructArray.from_arrays(columns, fields=list(self.arrow))

    @functools.cached_property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of the tuple's parts made here: the key, the value's fields, the headers."""
        return (*(kind for _, kind in self.parser.out_schema[: -len(META_FIELDS)]), "string")

    @functools.cached_property
    def arrow(self) -> pa.Schema:
        """The struct's fields: ``f<i>`` for each of the tuple's parts made here, then ``keep``."""
        fields = [pa.field(f"f{i}", ARROW_TYPES[kind]) for i, kind in enumerate(self.kinds)]
        return pa.schema([*fields, pa.field("keep", pa.bool_())])

    @functools.cached_property
    def struct(self) -> T.StructType:
        """:attr:`arrow` as Spark's type (the UDF's return type)."""
        fields = [T.StructField(f"f{i}", SQL_TYPES[kind]) for i, kind in enumerate(self.kinds)]
        return T.StructType([*fields, T.StructField("keep", T.BooleanType())])

    @functools.cached_property
    def parsers(self) -> list[KafkaRecordParser]:
        """The parser of each place (its ``where`` the place's)."""
        return [replace(self.parser, where=where) for _, _, where in self.places]

    def columns(
        self, key: pa.Array, value: pa.Array, place: pa.Array, offset: pa.Array, headers: pa.Array
    ) -> list[pa.Array]:
        """The struct's columns (see the class docs)."""
        n = len(value)
        fast = fast_columns(self.parser, key, value, headers)
        if fast is not None:
            return [*fast, pa.repeat(pa.scalar(True), n)]
        kinds = [field.type for field in self.arrow][:-1]
        cols: list[list[object]] = [[] for _ in kinds]
        keep: list[bool] = []
        places, offsets = place.to_pylist(), offset.to_pylist()
        keys, values, heads = key.to_pylist(), value.to_pylist(), headers.to_pylist()
        parsers = self.parsers
        for i in range(n):
            topic, partition, _ = self.places[places[i]]
            raw = (keys[i], values[i], topic, partition, offsets[i], None, _header_pairs(heads[i]))
            row = parsers[places[i]].parse(raw)
            keep.append(row is not None)
            parts = (*row[: len(kinds) - 1], row[-1]) if row is not None else (None,) * len(kinds)
            for col, part in zip(cols, parts, strict=True):
                col.append(part)
        return [*(pa.array(c, t) for c, t in zip(cols, kinds, strict=True)), pa.array(keep)]


@dataclass(frozen=True)
class _Malformed:
    """``mapInArrow`` over the connector's rows: the malformed records, as ``(offset, error)``
    rows (nothing fails; :func:`first_malformed`)."""

    parser: KafkaRecordParser

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for raws in _raws(batches):
            offsets, errors = [], []
            for raw in raws:
                try:
                    self.parser.parse(raw)
                except MalformedRecordError as exc:
                    offsets.append(int(raw[4]))
                    errors.append(str(exc))
            yield pa.RecordBatch.from_arrays(
                [pa.array(offsets, pa.int64()), pa.array(errors, pa.string())],
                schema=_MALFORMED_ARROW,
            )


_MALFORMED_ARROW = pa.schema([pa.field("offset", pa.int64()), pa.field("error", pa.string())])
_MALFORMED = T.StructType([T.StructField("offset", T.LongType()),
                           T.StructField("error", T.StringType())])  # fmt: skip


def _raws(batches: Iterable[pa.RecordBatch]) -> Iterator[list[RawRecord]]:
    """The connector's rows of each batch as raw records (see ``kafka_records``)."""
    for batch in batches:
        yield _batch_raws(batch)


def _batch_raws(batch: pa.RecordBatch) -> list[RawRecord]:
    cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    raws: list[RawRecord] = []
    for i in range(batch.num_rows):
        pairs = _header_pairs(cols["headers"][i])
        raws.append((cols["key"][i], cols["value"][i], cols["topic"][i], cols["partition"][i],
                     cols["offset"][i], cols["ts"][i], pairs))  # fmt: skip
    return raws


def fast_columns(
    parser: KafkaRecordParser, key: pa.Array, value: pa.Array, headers: pa.Array
) -> list[pa.Array] | None:
    """The key's text, the value's fields and the headers' text of the connector's rows
    (``key``, ``value``, ``headers`` columns), the JSON values parsed whole by Arrow's reader
    (see the module docs); ``None`` when the batch is not for it (another value format,
    ``rescue``, a tombstone, a value with a line break, anything ``parse_column`` declines):
    the caller then parses record by record.

    >>> parser = KafkaRecordParser("json", (("n", "bigint"),))
    >>> keys = pa.array([b"a", None], pa.binary())
    >>> values = pa.array([b'{"n": 1}', b'{"n": 2}'], pa.binary())
    >>> headers = pa.array([None, '[{"key": "h", "value": "dg=="}]'])
    >>> [c.to_pylist() for c in fast_columns(parser, keys, values, headers)]
    [['a', None], [1, 2], [None, '[["h", "v"]]']]
    """
    if parser.value_format != "json" or parser.rescue or len(value) == 0:
        return None
    if value.type != pa.binary() or value.null_count:  # (large_binary: Spark's large types)
        return None
    from airflow_trident.spout.file_records import LineParser

    lines = value.view(pa.string())  # parse_column checks the UTF-8 and the line breaks
    line_parser = LineParser("json", parser.schema, rescue=False, drop=False, where=parser.where)
    parsed = line_parser.parse_column(lines)
    if parsed is None:
        return None
    return [_key_text(key), *parsed.columns, _headers_text(headers)]


def _key_text(keys: pa.Array) -> pa.Array:
    """``text(key)`` of each key: UTF-8 as is, else decoded record by record."""
    if keys.type == pa.binary():
        as_text = keys.view(pa.string())
        try:
            as_text.validate(full=True)
        except pa.ArrowInvalid:
            pass
        else:
            return as_text
    return pa.array([text(k) for k in keys.to_pylist()], pa.string())


def _headers_text(headers: pa.Array) -> pa.Array:
    """The ``headers`` field of each record (see :func:`_connector_rows`' ``headers``)."""
    if headers.null_count == len(headers):
        return pa.nulls(len(headers), pa.string())
    return pa.array([headers_json(_header_pairs(h)) for h in headers.to_pylist()], pa.string())


def _header_pairs(headers: str | None) -> list[tuple[str, bytes | None]] | None:
    """A record's headers from the JSON text Spark made of them (values in base64)."""
    if headers is None:
        return None
    return [(h["key"], None if h.get("value") is None else base64.b64decode(h["value"]))
            for h in json.loads(headers)]  # fmt: skip


def _connector_rows(spark: SparkSession, spec: KafkaReadSpec) -> DataFrame:
    """The connector's rows, ``headers`` as JSON text made in the JVM (``null`` without
    headers; values in base64): Spark hands an ``array<struct>`` column to Python ~3x slower
    than the record's other columns together, with or without headers (docs/performance.md)."""
    return (
        spark.read.format("kafka").options(**spec.reader_options()).load()
        .selectExpr("key", "value", "topic", "partition", "offset",
                    "unix_millis(timestamp) AS ts",
                    "CASE WHEN size(headers) > 0 THEN to_json(headers) END AS headers")
    )  # fmt: skip


def first_malformed(spark: SparkSession, specs: Sequence[KafkaReadSpec]) -> str | None:
    """The error of the first malformed record of ``specs`` (the ranges in the in-process
    read's order, each read in offset order), ``None`` when none is; one job reading them
    all, only their malformed records leaving the executors. Ranges whose parser drops
    malformed records (dead-lettered) have none."""
    frames = [
        _connector_rows(spark, spec)
        .mapInArrow(_Malformed(spec.parser), _MALFORMED)
        .withColumn("seq", F.lit(seq))
        for seq, spec in enumerate(specs)
        if spec.parser is not None and not spec.parser.drop
    ]
    if not frames:
        return None
    union = functools.reduce(DataFrame.unionByName, frames)
    first = union.orderBy("seq", "offset").limit(1).collect()
    return str(first[0]["error"]) if first else None


def _arrow_udf(parse: _ParseValues) -> Any:
    """``parse`` as a scalar Arrow UDF (a function whose type hints say so, as PySpark asks)."""

    def parts(
        key: pa.Array, value: pa.Array, place: pa.Array, offset: pa.Array, headers: pa.Array
    ) -> pa.Array:
        return parse(key, value, place, offset, headers)

    return arrow_udf(parts, parse.struct)  # type: ignore[call-overload]


def read_kafka_ranges(
    spark: SparkSession, specs: Sequence[tuple[int, KafkaReadSpec]], column: str | None
) -> list[DataFrame]:
    """The DataFrames of Kafka ranges ``specs`` (each with its source partition's index):
    one ``format("kafka")`` read per group of ranges that read alike, of distinct topic
    partitions (any other range is read alone); with ``column``, a column of that name holds
    each record's source partition index (from its topic and partition)."""
    groups: dict[tuple[object, ...], list[tuple[int, KafkaReadSpec]]] = {}
    for index, spec in specs:
        assert spec.parser is not None
        alike = tuple(sorted(spec.options.items()))
        groups.setdefault((replace(spec.parser, where=""), alike), []).append((index, spec))
    frames = []
    for members in groups.values():
        ranges = [(index, spec, span) for index, spec in members for span in spec.spans]
        if len({(s.topic, s.partition) for _, _, s in ranges}) < len(ranges):  # a partition twice
            frames += [_tagged(read_kafka(spark, spec), [(index, spec, span)], column)
                       for index, spec, span in ranges]  # fmt: skip
            continue
        frames.append(_tagged(_read_together(spark, members[0][1], ranges), ranges, column))
    return frames


_Ranges = Sequence[tuple[int, KafkaReadSpec, KafkaSpan]]
"""Each topic partition read: its source partition's index, its range's spec, its span."""


def _read_together(spark: SparkSession, first: KafkaReadSpec, ranges: _Ranges) -> DataFrame:
    """One read of every topic partition of ``ranges`` (they read alike: ``first``'s way)."""
    wheres = []
    for _, spec, span in ranges:
        assert spec.parser is not None
        wheres.append((span.topic, span.partition, spec.parser.where))
    together = replace(first, spans=tuple(span for _, _, span in ranges))
    return read_kafka(spark, together, wheres=tuple(wheres))


def _tagged(df: DataFrame, ranges: _Ranges, column: str | None) -> DataFrame:
    """``df`` with ``column``: each record's source partition index, by its topic partition
    (the parsed tuple's ``topic`` and ``partition`` fields)."""
    if column is None:
        return df
    topic, partition = (F.col(f"`{name}`") for name in META_FIELDS[:2])
    index = _index_of(topic, partition, [(s.topic, s.partition, i) for i, _, s in ranges])
    return df.withColumn(column, index)


def _index_of(topic: Column, partition: Column, keys: Sequence[tuple[str, int, int]]) -> Column:
    """The ``int`` index of each record's topic partition: ``i`` of its ``(topic, partition,
    i)`` in ``keys`` (at least one)."""
    index: Column | None = None
    for t, p, i in keys:
        hit = (topic == F.lit(t)) & (partition == F.lit(p))
        index = F.when(hit, F.lit(i)) if index is None else index.when(hit, F.lit(i))
    assert index is not None
    return index.cast("int")


def read_kafka(
    spark: SparkSession, spec: KafkaReadSpec, wheres: tuple[tuple[str, int, str], ...] = ()
) -> DataFrame:
    """The DataFrame of a Kafka range: the spout's fields, typed, parsed as in process
    (``wheres``: a read of several ranges, ``(topic, partition, where)`` of each, the ``where``
    its records' errors name; the parser's own ``where`` otherwise)."""
    parser = spec.parser
    assert parser is not None
    places = wheres or tuple((s.topic, s.partition, parser.where) for s in spec.spans)
    place = _index_of(F.col("topic"), F.col("partition"),
                      [(t, p, i) for i, (t, p, _) in enumerate(places)])  # fmt: skip
    parse = _ParseValues(parser, places)
    # once per record, never re-run (a nondeterministic UDF is not duplicated by the optimizer)
    udf = _arrow_udf(parse).asNondeterministic()
    parts = udf("key", "value", place, "offset", "headers").alias("_parts")
    raw = _connector_rows(spark, spec).select(parts, "topic", "partition", "offset", "ts")
    names = [name for name, _ in parser.out_schema]
    made = len(names) - len(META_FIELDS)  # the key and the value's fields, from the UDF
    columns = [F.col(f"_parts.f{i}").alias(names[i]) for i in range(made)]
    meta = [F.col("topic").cast("string"), F.col("partition").cast("int"),
            F.col("offset").cast("long"), F.col("ts").cast("long"), F.col(f"_parts.f{made}")]
    columns += [c.alias(n) for c, n in zip(meta, names[made:], strict=True)]
    if parser.drop:  # (a parser that raises keeps every record it returns: no filter to pay)
        raw = raw.where(F.col("_parts.keep"))
    return raw.select(*columns)
