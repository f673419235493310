"""A Kafka range read by Spark (:class:`~airflow_trident.spout.kafka_records.KafkaReadSpec`):
``spark.read.format("kafka")`` with the range's per-partition ``startingOffsets`` /
``endingOffsets``, ``includeHeaders`` and the spout's isolation level, then the spout's own
record parser on the executors (``mapInArrow``), so both runtimes emit the same tuples.

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
(:func:`read_kafka_ranges`): one Spark scan, a task per topic partition as before, each task's
records parsed with the parser of its own partition, so a malformed record's error names the
batch partition it does in process.

The connector jar (``org.apache.spark:spark-sql-kafka-0-10``) is on the session's
``spark.jars`` (docs/jvm.md). The options hold the connection's ``kafka.*`` settings (SASL's
JAAS line among them): they go to the reader, never to a log.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_trident.errors import MalformedRecordError, TridentError
from airflow_trident.runtime.spark.python_ops import failure_text
from airflow_trident.spout.kafka_records import (
    KafkaReadSpec,
    KafkaRecordParser,
    RawRecord,
    headers_json,
    text,
)

__all__ = ["ARROW", "SQL", "fast_columns", "first_malformed", "read_kafka", "read_kafka_ranges"]

ARROW = {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32(),
         "double": pa.float64(), "boolean": pa.bool_(), "binary": pa.binary()}  # fmt: skip
SQL = {"string": T.StringType(), "bigint": T.LongType(), "int": T.IntegerType(),
       "double": T.DoubleType(), "boolean": T.BooleanType(), "binary": T.BinaryType()}  # fmt: skip


@dataclass(frozen=True)
class _Parse:
    """``mapInArrow`` over the connector's rows: each record made a tuple by the parser.
    ``report``: the malformed records instead, as ``(offset, error)`` rows (nothing fails)."""

    parser: KafkaRecordParser
    report: bool = False
    wheres: tuple[tuple[str, int, str], ...] = ()
    """A read of several ranges: ``(topic, partition, where)`` of each, the ``where`` its
    records' errors name (the parser's own ``where`` otherwise)."""

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if self.report:
            yield from self._malformed(batches)
            return
        schema = self.parser.out_schema
        arrow = pa.schema([pa.field(n, ARROW[k]) for n, k in schema])
        try:
            for whole in batches:
                for parser, batch in self._by_partition(whole):
                    fast = fast_columns(parser, batch)
                    if fast is not None:
                        yield pa.RecordBatch.from_arrays(fast, schema=arrow)
                        continue
                    rows = [row for row in map(parser.parse, _batch_raws(batch))
                            if row is not None]  # fmt: skip
                    yield pa.RecordBatch.from_arrays(
                        [pa.array([r[j] for r in rows], arrow.field(j).type)
                         for j in range(len(schema))], schema=arrow,
                    )  # fmt: skip
        except TridentError as exc:
            raise RuntimeError(failure_text(exc)) from None

    def _by_partition(
        self, batch: pa.RecordBatch
    ) -> Iterator[tuple[KafkaRecordParser, pa.RecordBatch]]:
        """``batch``'s records with the parser of their range: one piece per topic partition,
        each in the batch's order (a task of the connector reads one topic partition: one
        piece)."""
        if not self.wheres or batch.num_rows == 0:
            yield self.parser, batch
            return
        import pyarrow.compute as pc

        wheres = {(t, p): w for t, p, w in self.wheres}
        topics = batch.column("topic").cast(pa.string())
        parts = batch.column("partition").cast(pa.int32())
        keys = list(dict.fromkeys(zip(topics.to_pylist(), parts.to_pylist(), strict=True)))
        for topic, partition in keys:
            piece = batch
            if len(keys) > 1:
                mask = pc.and_(pc.equal(topics, topic), pc.equal(parts, partition))
                piece = batch.filter(mask)
            where = wheres.get((topic, partition), self.parser.where)
            yield replace(self.parser, where=where), piece

    def _malformed(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
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


def _raws(batches: Iterator[pa.RecordBatch]) -> Iterator[list[RawRecord]]:
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


def fast_columns(parser: KafkaRecordParser, batch: pa.RecordBatch) -> list[pa.Array] | None:
    """The tuples of the connector's rows ``batch`` as the columns of ``parser.out_schema``,
    the JSON values parsed whole by Arrow's reader (see the module docs); ``None`` when the
    batch is not for it (another value format, ``rescue``, a tombstone, a value with a line
    break, anything ``parse_column`` declines): the caller then parses record by record.

    >>> parser = KafkaRecordParser("json", (("n", "bigint"),))
    >>> rows = pa.RecordBatch.from_pydict({
    ...     "key": pa.array([b"a", None], pa.binary()),
    ...     "value": pa.array([b'{"n": 1}', b'{"n": 2}'], pa.binary()),
    ...     "topic": ["t", "t"], "partition": pa.array([0, 0], pa.int32()),
    ...     "offset": pa.array([5, 6], pa.int64()), "ts": pa.array([1, 2], pa.int64()),
    ...     "headers": pa.array([None, '[{"key": "h", "value": "dg=="}]'])})
    >>> [c.to_pylist() for c in fast_columns(parser, rows)]
    [['a', None], [1, 2], ['t', 't'], [0, 0], [5, 6], [1, 2], [None, '[["h", "v"]]']]
    """
    if parser.value_format != "json" or parser.rescue or batch.num_rows == 0:
        return None
    import pyarrow.compute as pc

    values = batch.column("value")
    if values.type != pa.binary() or values.null_count:  # (large_binary: Spark's large types)
        return None
    lines = values.view(pa.string())  # parse_column checks the UTF-8 (a byte search needs none)
    if any(pc.any(pc.match_substring(lines, eol)).as_py() for eol in ("\n", "\r")):
        return None
    from airflow_trident.spout.file_records import LineParser

    line_parser = LineParser("json", parser.schema, rescue=False, drop=False, where=parser.where)
    parsed = line_parser.parse_column(lines)
    if parsed is None:
        return None
    return [
        _key_text(batch.column("key")),
        *parsed.columns,
        batch.column("topic").cast(pa.string()),
        batch.column("partition").cast(pa.int32()),
        batch.column("offset").cast(pa.int64()),
        batch.column("ts").cast(pa.int64()),
        _headers_text(batch.column("headers")),
    ]


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
        spark.read.format("kafka").options(**spec.options).load()
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
        .mapInArrow(_Parse(spec.parser, report=True), _MALFORMED)
        .withColumn("seq", F.lit(seq))
        for seq, spec in enumerate(specs)
        if spec.parser is not None and not spec.parser.drop
    ]
    if not frames:
        return None
    union = functools.reduce(DataFrame.unionByName, frames)
    first = union.orderBy("seq", "offset").limit(1).collect()
    return str(first[0]["error"]) if first else None


_RANGE_OPTIONS = ("assign", "startingOffsets", "endingOffsets")


def _offsets(spec: KafkaReadSpec) -> list[tuple[str, int, int, int]]:
    """``(topic, partition, first, next)`` of each topic partition ``spec`` reads."""
    starts = json.loads(spec.options["startingOffsets"])
    ends = json.loads(spec.options["endingOffsets"])
    return [(topic, int(p), int(first), int(ends[topic][p]))
            for topic, parts in starts.items() for p, first in parts.items()]  # fmt: skip


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
        alike = tuple(sorted((k, v) for k, v in spec.options.items() if k not in _RANGE_OPTIONS))
        groups.setdefault((replace(spec.parser, where=""), alike), []).append((index, spec))
    frames = []
    for members in groups.values():
        ranges = [(index, spec, r) for index, spec in members for r in _offsets(spec)]
        if len({r[:2] for _, _, r in ranges}) < len(ranges):  # a topic partition twice
            frames += [_tagged(read_kafka(spark, spec), spec, [(index, spec, r)], column)
                       for index, spec, r in ranges]  # fmt: skip
            continue
        frames.append(_tagged(_read_together(spark, members[0][1], ranges), members[0][1],
                              ranges, column))  # fmt: skip
    return frames


def _read_together(
    spark: SparkSession,
    first: KafkaReadSpec,
    ranges: Sequence[tuple[int, KafkaReadSpec, tuple[str, int, int, int]]],
) -> DataFrame:
    """One read of every topic partition of ``ranges`` (they read alike: ``first``'s way)."""
    assign: dict[str, list[int]] = {}
    starts: dict[str, dict[str, int]] = {}
    ends: dict[str, dict[str, int]] = {}
    wheres = []
    for _, spec, (topic, partition, begin, end) in ranges:
        assign.setdefault(topic, []).append(partition)
        starts.setdefault(topic, {})[str(partition)] = begin
        ends.setdefault(topic, {})[str(partition)] = end
        assert spec.parser is not None
        wheres.append((topic, partition, spec.parser.where))
    options = {
        **first.options,
        "assign": json.dumps(assign),
        "startingOffsets": json.dumps(starts),
        "endingOffsets": json.dumps(ends),
    }
    return read_kafka(spark, replace(first, options=options), wheres=tuple(wheres))


def _tagged(
    df: DataFrame,
    spec: KafkaReadSpec,
    ranges: Sequence[tuple[int, KafkaReadSpec, tuple[str, int, int, int]]],
    column: str | None,
) -> DataFrame:
    """``df`` with ``column``: each record's source partition index, by its topic partition
    (the parsed tuple's ``topic`` and ``partition`` fields, the last five but four)."""
    if column is None:
        return df
    assert spec.parser is not None
    names = [name for name, _ in spec.parser.out_schema]
    topic, partition = F.col(f"`{names[-5]}`"), F.col(f"`{names[-4]}`")
    index: Column | None = None
    for i, _, (t, p, _, _) in ranges:
        hit = (topic == F.lit(t)) & (partition == F.lit(p))
        index = F.when(hit, F.lit(i)) if index is None else index.when(hit, F.lit(i))
    assert index is not None
    return df.withColumn(column, index.cast("int"))


def read_kafka(
    spark: SparkSession, spec: KafkaReadSpec, wheres: tuple[tuple[str, int, str], ...] = ()
) -> DataFrame:
    """The DataFrame of a Kafka range: the spout's fields, typed, parsed as in process
    (``wheres``: a read of several ranges, see ``_Parse``)."""
    assert spec.parser is not None
    raw = _connector_rows(spark, spec)
    struct = T.StructType([T.StructField(n, SQL[k]) for n, k in spec.parser.out_schema])
    return raw.mapInArrow(_Parse(spec.parser, wheres=wheres), struct)
