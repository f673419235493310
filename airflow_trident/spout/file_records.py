"""Records of a file log's files: how a JSON-lines, CSV or Parquet file becomes typed tuples
(the same values Spark's reader gives, so both runtimes emit the same batch), and
:class:`FileRange`, whole files of one partition as a source range.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyarrow import fs as pafs

from airflow_trident.errors import MalformedRecordError, SpoutEmitError
from airflow_trident.spout.ranges import ReadSpec

__all__ = [
    "FORMATS",
    "RESCUED",
    "TYPES",
    "FileRange",
    "LineParser",
    "count_records",
    "parse_lines",
    "parse_record",
]

Row = tuple[Any, ...]
FORMATS = ("json", "csv", "parquet")
TYPES = ("string", "bigint", "int", "double", "boolean")
RESCUED = "_rescued_data"
"""The last field of a file log with ``rescue=True``: what did not fit the schema, as JSON."""
_CHUNK = 1 << 22
_BLANK = re.compile(rb"\n\n")  # a regex search is twice as fast as `in` on newline-dense data


_BOUNDS = {"bigint": 1 << 63, "int": 1 << 31}


def _strict(value: Any, kind: str) -> Any:
    """A JSON value as a ``kind`` field: ``None`` for null; ``ValueError`` for a value of
    another JSON type (a number is not a string, a string is not a number, ...)."""
    if value is None:
        return None
    if kind == "null":  # a field with no type yet (infer_schema): nested values fit none
        raise ValueError(f"{json.dumps(value)[:60]} has no type the field can take")
    if kind == "string":
        if isinstance(value, str):
            if not value.isascii():
                _unicode(value)
            return value
        raise ValueError(f"{json.dumps(value)[:60]} is not a string")
    if kind in ("bigint", "int"):
        if isinstance(value, int) and not isinstance(value, bool):
            if -_BOUNDS[kind] <= value < _BOUNDS[kind]:
                return value
            raise ValueError(f"{value!r} is out of range for {kind}")
        raise ValueError(f"{json.dumps(value)[:60]} is not an integer")
    if kind == "double":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ValueError(f"{json.dumps(value)[:60]} is not a number")
    if isinstance(value, bool):
        return value
    raise ValueError(f"{json.dumps(value)[:60]} is not a boolean")


def _unicode(value: str) -> None:
    """``ValueError`` for a string no UTF-8 can hold: a lone surrogate (JSON's ``"\\ud800"``),
    which no state, table or Spark row can store."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        msg = f"{json.dumps(value)[:60]} is not valid Unicode (a lone surrogate escape)"
        raise ValueError(msg) from None


def _cast(value: Any, kind: str) -> Any:
    """A Parquet value as Spark's ``cast`` gives it in a ``kind`` column (Parquet columns are
    typed by the file: they are cast, not checked)."""
    if value is None:
        return None
    if kind == "string":
        if isinstance(value, bool):
            return "true" if value else "false"
        return json.dumps(value) if isinstance(value, dict | list) else str(value)
    if kind in ("bigint", "int"):
        return int(value)
    if kind == "double":
        return float(value)
    return bool(value)


def _from_text(value: str, kind: str) -> Any:
    """A CSV cell as a ``kind`` field (an empty cell is null); ``ValueError`` when it is not
    one."""
    if value == "":
        return None
    if kind == "string":
        return value
    if kind in ("bigint", "int"):
        number = int(value)
        if -_BOUNDS[kind] <= number < _BOUNDS[kind]:
            return number
        raise ValueError(f"{value!r} is out of range for {kind}")
    if kind == "double":
        return float(value)
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"{value!r} is not a boolean")


def parse_record(
    line: str, fmt: str, schema: Sequence[tuple[str, str]], rescue: bool = False
) -> Row:
    """The tuple of one non-blank JSON or CSV record line; ``ValueError`` when malformed.

    Strict: a JSON value of another type than its field's is malformed (``123`` or ``true`` in
    a ``string`` field too); JSON ``null``, a missing key and an empty CSV cell are ``None``.
    With ``rescue`` (the tuple then ends with :data:`RESCUED`), a value that does not fit its
    field is ``None`` in it and kept, with every key that is not a field, as a JSON object in
    the last value (``None`` when nothing was rescued); only a line that is not a JSON object
    (or a CSV line with another number of cells) is malformed.
    """
    rescued: dict[str, Any] = {}
    values: list[Any] = []
    if fmt == "json":
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        for name, kind in schema:
            raw = obj.get(name)
            try:
                values.append(_strict(raw, kind))
            except ValueError as exc:
                if not rescue:
                    raise ValueError(f"field {name!r}: {exc}") from None
                rescued[name] = raw
                values.append(None)
        if rescue:
            names = {n for n, _ in schema}
            rescued.update((k, v) for k, v in obj.items() if k not in names)
    else:
        cells = next(csv.reader([line]))
        if len(cells) != len(schema):
            raise ValueError(f"{len(cells)} columns, expected {len(schema)}")
        for cell, (name, kind) in zip(cells, schema, strict=True):
            try:
                values.append(_from_text(cell, kind))
            except ValueError as exc:
                if not rescue:
                    raise ValueError(f"field {name!r}: {exc}") from None
                rescued[name] = cell
                values.append(None)
    if rescue:
        values.append(json.dumps(rescued) if rescued else None)
    return tuple(values)


@dataclass(frozen=True)
class LineParser:
    """Parses a file's record lines on a Spark executor exactly as :func:`parse_lines` does in
    this process (a :class:`~airflow_trident.spout.ranges.ReadSpec`'s ``lines``).

    ``parse(line, first)``: the tuple, or ``None`` for a line that is no record (blank, a CSV
    header: ``first`` is the file's first line) or a malformed one that was dead-lettered
    (``drop``); a malformed line otherwise raises :class:`MalformedRecordError` naming
    ``where``, ``path`` and the record.
    """

    format: str
    schema: tuple[tuple[str, str], ...]
    rescue: bool
    drop: bool
    where: str

    def parse(self, line: str, first: bool, path: str) -> Row | None:
        if self.format == "csv" and first:
            return None
        stripped = line.strip()
        if not stripped:
            return None
        try:
            return parse_record(stripped if self.format == "json" else line, self.format,
                                self.schema, self.rescue)  # fmt: skip
        except ValueError as exc:
            if self.drop:
                return None
            msg = (
                f"{self.where}: malformed record in {path}: {exc}: {stripped[:200]!r}; the batch "
                f"fails and nothing is committed. Hint: run the batch in-process (LocalRunner) "
                f"to get the line number; fix or remove the record (a new file), or give the "
                f"spout a dead_letter location"
            )
            raise MalformedRecordError(msg) from None

    def parse_column(self, lines: Any) -> Any:
        """The tuples of ``lines`` (an Arrow string array of JSON lines) as one Arrow record
        batch of the schema's types, parsed by Arrow's JSON reader in C++; ``None`` when some
        line might not give exactly what :meth:`parse` gives it (the caller then parses line by
        line, so the result is the same either way, only slower).

        Only what Arrow decides as :func:`parse_record` does is taken here: every line a JSON object
        with no space around it (no blank line, no record ``strip`` would change), valid UTF-8, no
        line break inside a line, no integer ``-0`` where a field is a double, no nesting deep
        enough for Python's recursion limit, one record per line, and every field's value of its
        type (Arrow's reader refuses a number in a string field, a fraction or an exponent in an
        integer field, a key given twice). No rescue, no field without a type, no CSV. The lines
        holding ``Inf`` or ``NaN`` (Arrow reads ``Inf`` and ``-NaN`` as numbers, Python's ``json``
        does not) are parsed by :func:`parse_record`, the rest of the batch by Arrow.
        """
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.json as pj

        arrow = _arrow_schema(self.schema)
        if self.format != "json" or self.rescue or arrow is None or len(lines) == 0:
            return None
        if lines.null_count or not (_all(pc.starts_with(lines, "{"))
                                    and _all(pc.ends_with(lines, "}"))):  # fmt: skip
            return None
        if any(kind == "double" for _, kind in self.schema) and _any(
            pc.match_substring_regex(lines, r"-0+(?:[^.0-9eE]|$)")
        ):  # an integer -0 is 0.0 in Python (int, then float), -0.0 in Arrow
            return None
        if pc.max(pc.binary_length(lines)).as_py() > 2 * _NESTING:  # long lines: count
            depth = pc.add(pc.count_substring(lines, "["), pc.count_substring(lines, "{"))
            if pc.max(depth).as_py() > _NESTING:
                return None
        try:
            lines.validate(full=True)  # UTF-8 (Arrow's reader would pass bad bytes through)
            data = _value_bytes(lines)  # every line's bytes back to back, no separator
            if b"\n" in data or b"\r" in data:
                return None  # a line break inside a line (Arrow's reader would split there)
            text = _terminated(lines)  # each line and a "\n", as one buffer (no copy)
            table = pj.read_json(
                pa.BufferReader(text),
                read_options=pj.ReadOptions(
                    use_threads=False, block_size=max(1 << 20, 2 * text.size)
                ),
                parse_options=pj.ParseOptions(
                    explicit_schema=arrow, unexpected_field_behavior="ignore"
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        if table.num_rows != len(lines):  # two records on one line
            return None
        batch = table.select([n for n, _ in self.schema]).combine_chunks().to_batches()[0]
        # (no word spans two lines: each starts with "{" and ends with "}")
        if (b"I" in data and b"Inf" in data) or (b"N" in data and b"NaN" in data):
            return self._with_words_parsed(lines, batch)
        return batch

    def _with_words_parsed(self, lines: Any, batch: Any) -> Any:
        """``batch`` with the tuples of the lines holding ``Inf`` or ``NaN`` made by
        :func:`parse_record` (Arrow's reader takes ``Inf`` and ``-NaN`` as numbers, Python's
        ``json`` does not; in a string both are text); ``None`` when one of them is malformed.
        A batch of English text (``Information``) stays on the fast path, only its lines with
        the words parsed one by one."""
        import pyarrow as pa
        import pyarrow.compute as pc

        marked = pc.match_substring_regex(lines, "Inf|NaN")
        where = pc.indices_nonzero(marked).to_pylist()
        rows = []
        for i in where:
            try:
                rows.append(parse_record(lines[i].as_py(), "json", self.schema))
            except (ValueError, RecursionError):
                return None  # the caller parses line by line: the error is the parser's
        columns = [
            pc.replace_with_mask(
                batch.column(j), marked, pa.array([r[j] for r in rows], batch.schema.field(j).type)
            )
            for j in range(batch.num_columns)
        ]
        return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


def _value_bytes(values: Any) -> bytes:
    """The bytes of every value of an Arrow string array, back to back (its data buffer
    between its first and last offset)."""
    start, end = _bounds(values)
    return bytes(memoryview(values.buffers()[2])[start:end])


def _terminated(values: Any) -> Any:
    """An Arrow buffer of every value of a string array, each followed by ``"\\n"`` (made in
    C++; the reader reads it in place).

    >>> import pyarrow as pa
    >>> _terminated(pa.array(["a", "bc"])).to_pybytes()
    b'a\\nbc\\n'
    """
    import pyarrow.compute as pc

    ended = pc.binary_join_element_wise(values, "", "\n")
    start, end = _bounds(ended)
    return ended.buffers()[2].slice(start, end - start)


def _bounds(values: Any) -> tuple[int, int]:
    """Where the values of an Arrow string array begin and end in its data buffer."""
    import pyarrow as pa

    wide = pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type)
    offsets = memoryview(values.buffers()[1]).cast("q" if wide else "i")
    return int(offsets[values.offset]), int(offsets[values.offset + len(values)])


_NESTING = 500
"""Lines with more ``[`` and ``{`` than this are parsed by Python (whose recursion limit, ~1,000
levels, fails a record Arrow's reader takes)."""


def _arrow_schema(schema: Sequence[tuple[str, str]]) -> Any:
    """The Arrow schema of ``schema``; ``None`` when a field has no type (``"null"``)."""
    import pyarrow as pa

    types = {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32(),
             "double": pa.float64(), "boolean": pa.bool_()}  # fmt: skip
    if any(kind not in types for _, kind in schema):
        return None
    return pa.schema([pa.field(name, types[kind]) for name, kind in schema])


def _all(mask: Any) -> bool:
    return bool(mask.false_count == 0 and mask.null_count == 0)


def _any(mask: Any) -> bool:
    return bool(mask.true_count > 0)


@dataclass(frozen=True)
class FileRange:
    """Whole files of one partition, as a :class:`~airflow_trident.spout.ranges.SourceRange`.

    ``files``: ``(path, records, malformed line numbers)`` each (the malformed lines went to the
    dead-letter location when the range was planned); ``records`` is ``None`` when the batch
    was planned without counting (the job that reads the file counts it, see
    :func:`~airflow_trident.spout.ranges.emitted_counts`); ``where`` names the batch in errors;
    ``size_bytes``: the files' bytes together, when known (the Spark runtime reads a small
    batch in its driver).
    """

    format: str
    uri_prefix: str
    files: tuple[tuple[str, int | None, tuple[int, ...]], ...]
    schema: tuple[tuple[str, str], ...]
    where: str
    filesystem: pafs.FileSystem | None = None
    dead_letter: bool = False
    rescue: bool = False
    size_bytes: int | None = None

    @property
    def counted(self) -> bool:
        """Whether every file's record count is known (else :attr:`count` reads the files)."""
        return all(records is not None for _, records, _ in self.files)

    @functools.cached_property
    def count(self) -> int:
        return sum(
            count_records(self._fs(), path, self.format) if records is None else records
            for path, records, _ in self.files
        )

    def _fs(self) -> pafs.FileSystem:
        return self.filesystem or pafs.LocalFileSystem()

    def rows(self) -> Iterator[Row]:
        for path, _, bad in self.files:
            try:
                yield from self._file_rows(path, frozenset(bad))
            except (OSError, UnicodeDecodeError) as exc:
                msg = (
                    f"{self.where}: cannot read {path}: {type(exc).__name__}: {exc}; the batch "
                    f"is not committed. Hint: a transactional file log needs every file of a "
                    f"batch until it commits (files are never changed or removed once landed)"
                )
                raise SpoutEmitError(msg) from exc

    def _file_rows(self, path: str, bad: frozenset[int]) -> Iterator[Row]:
        if self.format == "parquet":
            yield from _parquet_rows(self._fs(), path, self.schema)
            return
        rows = parse_lines(self._fs(), path, self.format, self.schema, self.rescue)
        for number, line, row, error in rows:
            if error is None:
                yield row
            elif number not in bad:
                msg = (
                    f"{self.where}: malformed record in {path} line {number}: {error}: "
                    f"{line[:200]!r}; the batch fails and nothing is committed. Hint: fix or "
                    f"remove the record (a new file), or give the spout a dead_letter location"
                )
                raise MalformedRecordError(msg)

    def read_spec(self) -> ReadSpec:
        paths = tuple(f"{self.uri_prefix}{path}" for path, _, _ in self.files)
        drop = "drop" if self.dead_letter else "fail"
        if self.format == "parquet":
            return ReadSpec(self.format, paths, self.schema, drop, {})
        # JSON and CSV: Spark reads the lines, this module's parser makes the tuples (the very
        # rules of the in-process read: Spark's own readers accept other records)
        schema = (*self.schema, (RESCUED, "string")) if self.rescue else self.schema
        parser = LineParser(self.format, self.schema, self.rescue, self.dead_letter, self.where)
        return ReadSpec(self.format, paths, schema, drop, {}, lines=parser)


def parse_lines(
    filesystem: pafs.FileSystem,
    path: str,
    fmt: str,
    schema: Sequence[tuple[str, str]],
    rescue: bool = False,
) -> Iterator[tuple[int, str, Row, str | None]]:
    """``(line number, line, tuple, error or None)`` of each non-blank record line of ``path``
    (:func:`parse_record` says what is malformed)."""
    with filesystem.open_input_stream(path) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
        for number, line in enumerate(text, 1):
            if fmt == "csv" and number == 1:
                continue  # the header
            stripped = line.strip()
            if not stripped:
                continue
            try:
                row = parse_record(stripped if fmt == "json" else line, fmt, schema, rescue)
            except ValueError as exc:
                yield number, stripped, (), str(exc)
                continue
            yield number, stripped, row, None


def _parquet_rows(
    filesystem: pafs.FileSystem, path: str, schema: Sequence[tuple[str, str]]
) -> Iterator[Row]:
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=[n for n, _ in schema], filesystem=filesystem)
    columns = [table.column(n).to_pylist() for n, _ in schema]
    for values in zip(*columns, strict=True):
        yield tuple(_cast(v, k) for v, (_, k) in zip(values, schema, strict=True))


def count_records(filesystem: pafs.FileSystem, path: str, fmt: str) -> int:
    """The records of ``path``: non-blank lines (minus a CSV header), or Parquet's row count."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return int(pq.read_metadata(path, filesystem=filesystem).num_rows)
    lines, blank, last = 0, 0, b"\n"
    with filesystem.open_input_stream(path) as stream:
        while chunk := stream.read(_CHUNK):
            lines += chunk.count(b"\n")
            if _BLANK.search(chunk) is not None or last + chunk[:1] == b"\n\n":
                blank += sum(1 for ln in chunk.split(b"\n")[1:-1] if not ln.strip())
            last = chunk[-1:]
    if last != b"\n":
        lines += 1  # a last line without its newline
    return max(0, lines - blank - (1 if fmt == "csv" else 0))
