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

__all__ = ["FORMATS", "TYPES", "FileRange", "count_records", "parse_lines"]

Row = tuple[Any, ...]
FORMATS = ("json", "csv", "parquet")
TYPES = ("string", "bigint", "int", "double", "boolean")
_CHUNK = 1 << 22
_BLANK = re.compile(rb"\n\n")  # a regex search is twice as fast as `in` on newline-dense data


def _cast(value: Any, kind: str) -> Any:
    """``value`` as Spark reads it into a ``kind`` column; ``ValueError`` when Spark would not."""
    if value is None:
        return None
    if kind == "string":
        if isinstance(value, bool):
            return "true" if value else "false"
        return json.dumps(value) if isinstance(value, dict | list) else str(value)
    if kind in ("bigint", "int"):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ValueError(f"{value!r} is not an integer")
    if kind == "double":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ValueError(f"{value!r} is not a number")
    if isinstance(value, bool):
        return value
    raise ValueError(f"{value!r} is not a boolean")


def _from_text(value: str, kind: str) -> Any:
    """A CSV cell as Spark reads it (an empty cell is null)."""
    if value == "":
        return None
    if kind == "string":
        return value
    if kind in ("bigint", "int"):
        return int(value)
    if kind == "double":
        return float(value)
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"{value!r} is not a boolean")


@dataclass(frozen=True)
class FileRange:
    """Whole files of one partition, as a :class:`~airflow_trident.spout.ranges.SourceRange`.

    ``files``: ``(path, records, malformed line numbers)`` each (the malformed lines went to the
    dead-letter location when the range was planned); ``records`` is ``None`` when the batch
    was planned without counting (the job that reads the file counts it, see
    :func:`~airflow_trident.spout.ranges.emitted_counts`); ``where`` names the batch in errors.
    """

    format: str
    uri_prefix: str
    files: tuple[tuple[str, int | None, tuple[int, ...]], ...]
    schema: tuple[tuple[str, str], ...]
    where: str
    filesystem: pafs.FileSystem | None = None
    dead_letter: bool = False

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
        for number, line, row, error in parse_lines(self._fs(), path, self.format, self.schema):
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
        options = {"header": "true"} if self.format == "csv" else {}
        drop = "drop" if self.dead_letter else "fail"
        return ReadSpec(self.format, paths, self.schema, drop, options)


def parse_lines(
    filesystem: pafs.FileSystem, path: str, fmt: str, schema: Sequence[tuple[str, str]]
) -> Iterator[tuple[int, str, Row, str | None]]:
    """``(line number, line, tuple, error or None)`` of each non-blank record line of ``path``."""
    with filesystem.open_input_stream(path) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
        width = len(schema)
        for number, line in enumerate(text, 1):
            if fmt == "csv" and number == 1:
                continue  # the header
            stripped = line.strip()
            if not stripped:
                continue
            try:
                if fmt == "json":
                    obj = json.loads(stripped)
                    if not isinstance(obj, dict):
                        raise ValueError("not a JSON object")
                    row = tuple(_cast(obj.get(name), kind) for name, kind in schema)
                else:
                    cells = next(csv.reader([line]))
                    if len(cells) != width:
                        raise ValueError(f"{len(cells)} columns, expected {width}")
                    row = tuple(_from_text(c, k) for c, (_, k) in zip(cells, schema, strict=True))
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
