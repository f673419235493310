"""Small source ranges read by the driver: a batch whose ranges all say how many bytes their
files hold, together no more than a limit, is read in the driver's process by the ranges' own
in-process reader (:meth:`~airflow_trident.spout.ranges.SourceRange.rows`, the local runtime's
read: the same records, values and malformed-record errors, by construction) and handed to
Spark as one Arrow table of the read specs' types.

Why: reading a small batch on the executors costs a Python worker round trip per task (the
file log's line parser runs in Python, so both runtimes take the same records), about
0.3 s per batch on Spark Connect for a 100 KB batch, more than reading and parsing it here.
Large batches keep the parallel read (:mod:`~airflow_trident.runtime.spark.native`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from airflow_trident.runtime.spark.compile import ROW
from airflow_trident.runtime.spark.native import ARROW_TYPES
from airflow_trident.spout.ranges import PartitionRows

__all__ = ["READ_HERE_BYTES", "reads_here", "table_here"]

Row = tuple[Any, ...]

READ_HERE_BYTES = 1 << 20
"""The default limit: batches whose ranges hold at most this many bytes are read by the
driver."""


def reads_here(parts: Sequence[tuple[str, Sequence[Row]]], limit: int) -> bool:
    """Whether the driver reads ``parts`` (every piece a range that knows its size, all of
    one schema of known types, at most ``limit`` bytes together)."""
    if limit <= 0:
        return False
    total, schemas = 0, set()
    for _, part in parts:
        if not isinstance(part, PartitionRows) or part.emitted_rows:
            return False
        for source in part.ranges:
            size = getattr(source, "size_bytes", None)
            if size is None:
                return False
            total += int(size)
            if total > limit:
                return False
            schemas.add(source.read_spec().schema)
    return len(schemas) == 1 and all(k in ARROW_TYPES for _, k in next(iter(schemas)))


def table_here(
    parts: Sequence[tuple[str, PartitionRows]], columns: Sequence[str], pid: str | None
) -> tuple[pa.Table, list[list[Row]]]:
    """The rows of ``parts`` read here: the table of ``columns`` (with ``pid``, a column of
    each row's partition index) and each partition's rows (for the samples).

    A partition whose ranges left their count to the job is told its count
    (:attr:`~airflow_trident.spout.ranges.PartitionRows.observed`): read once, counted once.
    """
    schema = next(r for _, part in parts for r in part.ranges).read_spec().schema
    names = [name for name, _ in schema]
    kinds = dict(schema)
    rows_of: list[list[Row]] = []
    for _, part in parts:
        rows = list(part)
        if not part.counted:
            part.observed = _told(len(rows))
        rows_of.append(rows)
    every = [row for rows in rows_of for row in rows]
    arrays = []
    for name in columns:
        index = names.index(name)
        arrays.append(pa.array([row[index] for row in every], ARROW_TYPES[kinds[name]]))
    names_out = list(columns)
    if not columns:  # no field is read downstream: one null column carries the row count
        arrays, names_out = [pa.nulls(len(every), pa.bool_())], [ROW]
    if pid is not None:
        ids = [i for i, rows in enumerate(rows_of) for _ in rows]
        arrays.append(pa.array(ids, pa.int32()))
        names_out.append(pid)
    return pa.Table.from_arrays(arrays, names=names_out), rows_of


def _told(count: int) -> Any:
    def observed() -> int:
        return count

    return observed
