"""Files read by Spark: JSON lines, CSV, Parquet (:class:`~airflow_trident.spout.ranges.ReadSpec`
of format ``"json"``, ``"csv"``, ``"parquet"``): a DataFrame that reads exactly the ranges'
files in parallel; the driver never holds the tuples.

A range with a line parser (``ReadSpec.lines``: the file log's JSON and CSV files) is read as
text lines (Spark splits the files) and parsed on the executors by the spout's own parser, so
both runtimes take exactly the same records and values (Spark's JSON reader would turn ``123``
into the string ``"123"`` and, once a column is pruned, no longer check its type). A malformed
record (``on_malformed="fail"``) fails the Spark job in the same pass as the read, with a
:class:`~airflow_trident.errors.MalformedRecordError` naming the file and the record; with
``"drop"`` (the spout dead-lettered them when it planned the range) the parser skips them.

JSON lines the parser can take whole (``parse_column``: Arrow's JSON reader, which declines
any batch it might not parse exactly as the line parser) skip the per-line Python.

The line files of many source partitions are read at once, each row tagged with its partition
as it is parsed (:meth:`FileReader.read_all`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import cast

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_trident.errors import MalformedRecordError, TridentError
from airflow_trident.runtime.spark.python_ops import failure_text
from airflow_trident.runtime.spark.readers.base import (
    ARROW_TYPES,
    SQL_TYPES,
    Ranged,
    by_partition,
    read_kind,
)
from airflow_trident.spout.ranges import LineParse, ReadSpec

__all__ = ["CORRUPT", "FILES", "FileReader"]

CORRUPT = "_trident_corrupt_record"


@dataclass(frozen=True)
class FileReader:
    """The :class:`~airflow_trident.runtime.spark.readers.base.SparkReader` of files."""

    def read(self, spark: SparkSession, spec: ReadSpec, where: str) -> DataFrame:
        """The DataFrame of ``spec``: its fields, typed, from exactly its files."""
        if spec.lines is not None:
            return _parsed_lines(spark, spec, spec.lines)
        if spec.format == "parquet":
            df = spark.read.options(**spec.options).parquet(*spec.paths)
            return df.select(*[F.col(f"`{n}`").cast(k).alias(n) for n, k in spec.schema])
        ddl = f"{_ddl(spec.schema)}, `{CORRUPT}` STRING"
        options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, **spec.options}
        reader = spark.read.schema(ddl).options(**options)
        paths = list(spec.paths)
        df = reader.json(paths) if spec.format == "json" else reader.csv(paths)
        bad = F.col(CORRUPT).isNotNull()
        if spec.on_malformed == "drop":
            df = df.where(~bad)
        else:
            df = df.where(F.when(bad, _malformed(where)).otherwise(F.lit(True)))
        return df.select(*[F.col(f"`{n}`") for n, _ in spec.schema])

    def read_all(
        self, spark: SparkSession, ranges: Sequence[Ranged], column: str | None
    ) -> list[DataFrame]:
        """One read of the files of ranges that read alike; with ``column``, the line files of
        all source partitions still in one read per kind of parser (each row tagged with its
        partition as it is parsed), the other files in one read per partition."""
        if column is None:
            return by_partition(spark, ranges, None, self.read)
        lines: dict[tuple[object, ...], list[tuple[int, ReadSpec]]] = {}
        others = []
        for ranged in ranges:
            spec = ranged.spec
            if spec.lines is None:
                others.append(ranged)
            else:
                lines.setdefault((*read_kind(spec), type(spec.lines)), []).append(
                    (ranged.partition, spec)
                )
        frames = by_partition(spark, others, column, self.read)
        return frames + [_lines_of_partitions(spark, group, column) for group in lines.values()]

    def first_malformed(self, spark: SparkSession, specs: Sequence[ReadSpec]) -> str | None:
        """``None``: a malformed line fails the read naming its file (see the module docs)."""
        return None


FILES = FileReader()


def _ddl(schema: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"`{name}` {kind}" for name, kind in schema)


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
    struct = T.StructType([T.StructField(n, SQL_TYPES[k]) for n, k in spec.schema])
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
        [*[T.StructField(n, SQL_TYPES[k]) for n, k in schema], T.StructField(pid, T.IntegerType())]
    )
    paths = [path for _, spec in group for path in spec.paths]
    return _text(spark, paths, parse.parsers).mapInArrow(parse, struct)


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
