"""Source ranges read by Spark (:mod:`airflow_trident.spout.ranges`): a spout's batch as a
DataFrame that reads exactly the range's files in parallel; the driver never holds the tuples.

A range with a line parser (``ReadSpec.lines``: the file log's JSON and CSV files) is read as
text lines (Spark splits the files) and parsed on the executors by the spout's own parser, so
both runtimes take exactly the same records and values (Spark's JSON reader would turn ``123``
into the string ``"123"`` and, once a column is pruned, no longer check its type). A malformed
record (``on_malformed="fail"``) fails the Spark job in the same pass as the read, with a
:class:`~airflow_trident.errors.MalformedRecordError` naming the file and the record; with
``"drop"`` (the spout dead-lettered them when it planned the range) the parser skips them.

JSON lines the parser can take whole (``parse_column``: Arrow's JSON reader, which declines
any batch it might not parse exactly as the line parser) skip the per-line Python.

Ranges that leave their record count to the job (a file log planned without counting) are
counted by the same job, in the same pass: the line files of all partitions are read at once,
each row tagged with its partition as it is parsed, and one observation (Spark's observed
metrics) counts each partition's rows, which the batch's emitted counts (the manifest's) take
once the job ran (:meth:`~airflow_trident.spout.ranges.PartitionRows.records`).
"""

from __future__ import annotations

import functools
import logging
import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_trident.errors import ConfigurationError, MalformedRecordError, TridentError
from airflow_trident.runtime.spark.python_ops import failure_text
from airflow_trident.runtime.spark.session import is_connect
from airflow_trident.spout.kafka_records import KafkaRange, KafkaReadSpec
from airflow_trident.spout.ranges import LineParse, PartitionRows, ReadSpec, SourceRange

__all__ = [
    "ARROW_TYPES",
    "CORRUPT",
    "first_malformed",
    "native_partitions",
    "native_types",
    "range_gone",
    "read_range",
    "read_spec",
]

log = logging.getLogger(__name__)

CORRUPT = "_trident_corrupt_record"


def _ddl(schema: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"`{name}` {kind}" for name, kind in schema)


def read_spec(spark: SparkSession, spec: ReadSpec, where: str = "") -> DataFrame:
    """The DataFrame of ``spec``: its fields, typed, from exactly its files."""
    names = [name for name, _ in spec.schema]
    if isinstance(spec, KafkaReadSpec):  # a Kafka offset range (spout.kafka)
        from airflow_trident.runtime.spark.kafka_read import read_kafka

        return read_kafka(spark, spec)
    if spec.format == "jdbc":  # a database range (spout.database_table): the options say which
        if spec.driver is not None:
            _with_driver(spark, *spec.driver)
        df = spark.read.format("jdbc").options(**spec.options).load()
        return df.select(*[F.col(f"`{n}`").cast(k).alias(n) for n, k in spec.schema])
    if spec.lines is not None:
        return _parsed_lines(spark, spec, spec.lines)
    if spec.format == "parquet":
        df = spark.read.options(**spec.options).parquet(*spec.paths)
        return df.select(*[F.col(f"`{n}`").cast(k).alias(n) for n, k in spec.schema])
    ddl = f"{_ddl(spec.schema)}, `{CORRUPT}` STRING"
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, **spec.options}
    reader = spark.read.schema(ddl).options(**options)
    df = reader.json(list(spec.paths)) if spec.format == "json" else reader.csv(list(spec.paths))
    bad = F.col(CORRUPT).isNotNull()
    if spec.on_malformed == "drop":
        df = df.where(~bad)
    else:
        df = df.where(F.when(bad, _malformed(where)).otherwise(F.lit(True)))
    return df.select(*[F.col(f"`{n}`") for n in names])


ARROW_TYPES: dict[str, Any] = {  # a read spec's kind of field: its Arrow type
    "string": pa.string(),
    "bigint": pa.int64(),
    "int": pa.int32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "null": pa.null(),
    "binary": pa.binary(),
}


_SQL_TYPES: dict[str, T.DataType] = {
    "string": T.StringType(),
    "bigint": T.LongType(),
    "int": T.IntegerType(),
    "double": T.DoubleType(),
    "boolean": T.BooleanType(),
    "null": T.NullType(),
    "binary": T.BinaryType(),
}


@dataclass(frozen=True)
class _ParseLines:
    """``mapInArrow`` over ``(value, file[, block start])`` text rows: each line parsed by the
    spout's :class:`~airflow_trident.spout.ranges.LineParse` (in this order within a file, so
    the first row of a file's first block is its first line).

    One read may hold several source partitions' files (``files``: each file's key, see
    :func:`_file_key`, and the slot of its partition's ``parsers`` and ``pids``); with ``pid``
    the rows get a column of that name, their source partition index. A batch the parser can
    take whole in C++ (``parse_column``, the JSON lines' fast path: it declines whatever it
    might not parse exactly as the line parser) is not parsed line by line.
    """

    parsers: tuple[LineParse, ...]
    schema: tuple[tuple[str, str], ...]
    files: tuple[tuple[str, int], ...] = ()
    pids: tuple[int, ...] = (0,)
    pid: str | None = None

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        started: set[str] = set()
        fields = [pa.field(n, ARROW_TYPES[k]) for n, k in self.schema]
        arrow = pa.schema([*fields, pa.field(self.pid, pa.int32())] if self.pid else fields)
        slots = dict(self.files)
        resolved: dict[str, int] = {}  # a reported path's slot, worked out once per file
        try:
            for batch in batches:
                fast = self._fast(batch, slots, resolved)
                if fast is not None:
                    yield pa.RecordBatch.from_arrays(fast, schema=arrow)
                    continue
                lines, files = batch.column(0).to_pylist(), batch.column(1).to_pylist()
                starts = batch.column(2).to_pylist() if batch.num_columns > 2 else [-1] * len(lines)
                rows, pids = [], []
                for line, path, start in zip(lines, files, starts, strict=True):
                    first = start == 0 and path not in started
                    if first:
                        started.add(path)
                    slot = self._slot(slots, resolved, path)
                    row = self.parsers[slot].parse(line, first, path)
                    if row is not None:
                        rows.append(row)
                        pids.append(self.pids[slot])
                columns = [
                    pa.array([r[i] for r in rows], arrow.field(i).type)
                    for i in range(len(self.schema))
                ]
                if self.pid:
                    columns.append(pa.array(pids, pa.int32()))
                yield pa.RecordBatch.from_arrays(columns, schema=arrow)
        except TridentError as exc:
            raise RuntimeError(failure_text(exc)) from None

    def _fast(
        self, batch: pa.RecordBatch, slots: dict[str, int], resolved: dict[str, int]
    ) -> list[pa.Array] | None:
        """The batch's columns parsed whole (see the class docs), or ``None``."""
        parse_column = getattr(self.parsers[0], "parse_column", None)
        if parse_column is None or batch.num_rows == 0:
            return None
        parsed = parse_column(batch.column(0))
        if parsed is None:
            return None
        columns = list(parsed.columns)
        if self.pid:
            import pyarrow.compute as pc

            files = batch.column(1)
            known = pc.unique(files)
            pids = [self.pids[self._slot(slots, resolved, path)] for path in known.to_pylist()]
            columns.append(pa.array(pids, pa.int32()).take(pc.index_in(files, value_set=known)))
        return columns

    def _slot(self, slots: dict[str, int], resolved: dict[str, int], path: str) -> int:
        """The slot of the file Spark reports as ``path`` (``resolved``: the ones found)."""
        if not self.files:
            return 0
        if path not in resolved:
            resolved[path] = self._find(slots, path)
        return resolved[path]

    def _find(self, slots: dict[str, int], path: str) -> int:
        key = _file_key(path, reported=True)
        slot = slots.get(key)
        if slot is None:  # hdfs:///x given, hdfs://namenode:8020/x reported: the path alone
            same = {v for k, v in slots.items() if _without_host(k) == _without_host(key)}
            if len(same) == 1:
                return same.pop()
            known = ", ".join(sorted(slots)[:3])
            msg = f"Spark read {path}, a file of no partition of this read (its files: {known}...)"
            raise RuntimeError(msg)
        return slot


def _without_host(key: str) -> str:
    scheme, _, rest = key.partition("://")
    return f"{scheme}://{rest[rest.find('/') :]}"


def _file_key(path: str, *, reported: bool = False) -> str:
    """One spelling of a file's location: a path as the read was given it (``/a b``,
    ``file:///a b``, ``s3a://bucket/k``) and, ``reported``, as Spark reports it in
    ``_metadata.file_path`` (``file:/a%20b``: URL-encoded) give the same key."""
    from posixpath import normpath
    from urllib.parse import unquote, urlsplit

    if reported:
        parts = urlsplit(path)
        return f"{parts.scheme or 'file'}://{parts.netloc}{normpath(unquote(parts.path))}"
    scheme, sep, rest = path.partition(":")
    if not sep or "/" in scheme:
        return f"file://{normpath(path)}"
    netloc = ""
    if rest.startswith("//"):
        netloc, _, rest = rest[2:].partition("/")
        rest = "/" + rest
    return f"{scheme}://{netloc}{normpath(rest)}"


def _parsed_lines(spark: SparkSession, spec: ReadSpec, parser: LineParse) -> DataFrame:
    """``spec``'s files read as text lines (Spark splits them), parsed in Python by ``parser``:
    the same records, values and malformed lines as the in-process read."""
    struct = T.StructType([T.StructField(n, _SQL_TYPES[k]) for n, k in spec.schema])
    parse = _ParseLines((parser,), spec.schema)
    return _text(spark, spec.paths, parse.parsers).mapInArrow(parse, struct)


def _text(spark: SparkSession, paths: Sequence[str], parsers: Sequence[LineParse]) -> DataFrame:
    """The lines of ``paths`` with their file and, for parsers that take a file's first line
    apart (CSV's header), where its block starts (JSON lines have no first line)."""
    columns = [F.col("value"), F.col("_metadata.file_path").alias("file")]
    if any(getattr(parser, "format", None) != "json" for parser in parsers):
        columns.append(F.col("_metadata.file_block_start").alias("start"))
    return spark.read.text(list(paths)).select(*columns)


def _lines_of_partitions(
    spark: SparkSession, group: Sequence[tuple[int, ReadSpec]], pid: str
) -> DataFrame:
    """One read of the line files of several source partitions' ranges that read alike
    (``group``: each range's partition index and spec), parsed with each partition's own
    parser (errors name it), rows tagged with their partition index in column ``pid``."""
    schema = group[0][1].schema
    files = tuple(
        (_file_key(path), slot) for slot, (_, spec) in enumerate(group) for path in spec.paths
    )
    parse = _ParseLines(
        tuple(cast(LineParse, spec.lines) for _, spec in group),  # grouped: all have one
        schema,
        files,
        tuple(index for index, _ in group),
        pid,
    )
    struct = T.StructType(
        [*[T.StructField(n, _SQL_TYPES[k]) for n, k in schema], T.StructField(pid, T.IntegerType())]
    )
    paths = [path for _, spec in group for path in spec.paths]
    return _text(spark, paths, parse.parsers).mapInArrow(parse, struct)


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


def _malformed(where: str) -> Column:
    """Fails the task with a ``MalformedRecordError`` naming the file and the record (the
    driver turns the tagged message back into that error)."""
    head, tail = failure_text(MalformedRecordError("\x00")).split("\x00")
    prefix = f"{where}: " if where else ""
    return F.raise_error(
        F.concat(
            F.lit(f"{head}{prefix}malformed record in "),
            F.input_file_name(),
            F.lit(": "),
            F.substring(F.col(CORRUPT), 1, 200),
            F.lit(
                "; the batch fails and nothing is committed. Hint: run the batch in-process "
                "(LocalRunner) to get the line number; fix or remove the record (a new file), "
                "or give the spout a dead_letter location"
            ),
            F.lit(tail),
        )
    ).cast("boolean")


def read_range(spark: SparkSession, source: SourceRange) -> DataFrame:
    """The DataFrame of one range."""
    return read_spec(spark, source.read_spec(), str(getattr(source, "where", "")))


def native_partitions(
    spark: SparkSession, parts: Sequence[tuple[str, PartitionRows]], pid: str | None
) -> DataFrame:
    """The union of every range of ``parts`` (source partitions, in order); with ``pid`` a
    column of that name holds each row's source partition index.

    Without ``pid`` and with every record count known, one read of all partitions. Otherwise
    still one read per kind of line file (JSON, CSV: each row tagged with its partition as it
    is parsed) and one read per partition of other ranges (Parquet, JDBC: tagged by a
    literal); the partitions whose ranges leave their count to the job are counted as the job
    reads them, by one observation (see the module docs).
    """
    if pid is None and all(rows.counted for _, rows in parts):
        # one scan per kind of file: Spark packs the splits of all partitions
        return _merged(spark, [source for _, rows in parts for source in rows.ranges])
    column = pid or _PID
    frames = []
    lines: dict[tuple[object, ...], list[tuple[int, ReadSpec]]] = {}
    kafka: list[tuple[int, KafkaReadSpec]] = []
    for index, (_, rows) in enumerate(parts):  # the index over every partition, as locally
        others = []
        for source in rows.ranges:
            spec = source.read_spec()
            if spec.lines is not None:
                lines.setdefault((*_read_kind(spec), type(spec.lines)), []).append((index, spec))
            elif isinstance(spec, KafkaReadSpec):
                kafka.append((index, spec))
            else:
                others.append(source)
        if others:
            frames.append(_merged(spark, others).withColumn(column, F.lit(index).cast("int")))
    frames += [_lines_of_partitions(spark, group, column) for group in lines.values()]
    if kafka:  # one read of a batch's Kafka ranges (kafka_read.read_kafka_ranges)
        from airflow_trident.runtime.spark.kafka_read import read_kafka_ranges

        frames += read_kafka_ranges(spark, kafka, column)
    df = functools.reduce(DataFrame.unionByName, frames)
    uncounted = [(i, rows) for i, (_, rows) in enumerate(parts) if rows.ranges and not rows.counted]
    if uncounted:
        df = _observed(df, uncounted, column)
    return df if pid is not None else df.drop(column)


_PID = "_trident_source_partition"


def native_types(parts: Sequence[tuple[str, PartitionRows]]) -> dict[str, T.DataType] | None:
    """The Spark types of :func:`native_partitions`' fields (every read casts to its spec's
    types), so that planning need not ask the server; ``None`` when the ranges' schemas differ
    or a type has no entry here."""
    schemas = {source.read_spec().schema for _, rows in parts for source in rows.ranges}
    if len(schemas) != 1:
        return None
    schema = schemas.pop()
    if any(kind not in _SQL_TYPES for _, kind in schema):
        return None
    return {name: _SQL_TYPES[kind] for name, kind in schema}


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
    fail on such a record without knowing of the others (Kafka ranges); ``None`` when they
    hold none. The driver raises it instead of the error of the task that failed first,
    so both runtimes name the same record (see :mod:`~.kafka_read`)."""
    specs = [
        spec
        for rows in parts
        for source in rows.ranges
        if isinstance(spec := source.read_spec(), KafkaReadSpec)
    ]
    if not specs:
        return None
    from airflow_trident.runtime.spark.kafka_read import first_malformed as first_of

    message = first_of(spark, specs)
    return None if message is None else MalformedRecordError(message)


def range_gone(parts: Sequence[PartitionRows]) -> TridentError | None:
    """The refusal of the first range of ``parts`` (in the in-process runtime's order) whose
    records the source no longer holds (a Kafka range aged out by retention), ``None`` when
    every one is still held: asked when a batch fails on Spark, so the batch fails with the
    error the in-process read raises instead of the connector's."""
    for rows in parts:
        for source in rows.ranges:
            if isinstance(source, KafkaRange) and (error := source.gone()) is not None:
                return error
    return None


def _done(observation: Any) -> bool:
    jo = getattr(observation, "_jo", None)
    if jo is not None:  # classic: the metrics' future completed (get would wait for it)
        return bool(jo.future().isCompleted())
    return bool(getattr(observation, "_result", None))  # Spark Connect: filled by the action


def _read_kind(spec: ReadSpec) -> tuple[object, ...]:
    return (spec.format, spec.schema, spec.on_malformed, tuple(sorted(spec.options.items())))


def _merged(spark: SparkSession, sources: Sequence[SourceRange]) -> DataFrame:
    """The ranges read together: one read of all the files of ranges that read alike."""
    groups: dict[tuple[object, ...], list[ReadSpec]] = {}
    wheres: dict[tuple[object, ...], str] = {}
    kafka: list[tuple[int, KafkaReadSpec]] = []
    for source in sources:
        spec = source.read_spec()
        if isinstance(spec, KafkaReadSpec):
            kafka.append((0, spec))
            continue
        key = _read_kind(spec)
        groups.setdefault(key, []).append(spec)
        where = str(getattr(source, "where", ""))
        wheres.setdefault(key, where.split(", partition ")[0])
    frames = [
        read_spec(spark, replace(specs[0], paths=tuple(p for s in specs for p in s.paths)),
                  wheres[key])
        for key, specs in groups.items()
    ]  # fmt: skip
    if kafka:
        from airflow_trident.runtime.spark.kafka_read import read_kafka_ranges

        frames += read_kafka_ranges(spark, kafka, None)
    return functools.reduce(DataFrame.unionByName, frames)
