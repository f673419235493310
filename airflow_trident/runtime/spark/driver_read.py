"""Small source ranges read by the driver: a batch whose ranges all say how many bytes their
files hold, together no more than a limit (or, for ranges that know their records and not
their bytes, Kafka's offset ranges, how many offsets they span, together no more than a
limit of records), is read in the driver's process by the ranges' own
in-process reader (:meth:`~airflow_trident.spout.ranges.SourceRange.rows`, the local runtime's
read: the same records, values and malformed-record errors, by construction) and handed to
Spark as one Arrow table of the read specs' types.

Why: reading a small batch on the executors costs a Python worker round trip per task (the
file log's line parser runs in Python, so both runtimes take the same records), about
0.3 s per batch on Spark Connect for a 100 KB batch, more than reading and parsing it here;
a Kafka range read by Spark's connector costs a Spark job per batch (1.3-1.9 s for 10,000
records on ``local[2]``, docs/performance.md) where the spout's consumer reads and parses
10,000 records here in 0.2-0.3 s and 100,000 in about 1 s.
Large batches keep the parallel read (:mod:`~airflow_trident.runtime.spark.native`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from airflow_trident.runtime.spark.compile import ROW
from airflow_trident.runtime.spark.readers.base import ARROW_TYPES
from airflow_trident.spout.ranges import PartitionRows, read_ahead

__all__ = ["READ_HERE_BYTES", "READ_HERE_RECORDS", "reads_here", "table_here"]

Row = tuple[Any, ...]

READ_HERE_BYTES = 1 << 20
"""The default limit: batches whose ranges hold at most this many bytes are read by the
driver."""

READ_HERE_RECORDS = 50_000
"""The default limit for ranges that know their records (``size_records``), not their bytes:
batches of at most this many together are read by the driver."""


def reads_here(
    parts: Sequence[tuple[str, Sequence[Row]]],
    limit: int,
    limit_records: int = READ_HERE_RECORDS,
) -> bool:
    """Whether the driver reads ``parts``: every piece a range that knows its size, all of one
    schema of known types, at most ``limit`` bytes together (ranges that say ``size_bytes``)
    and at most ``limit_records`` records together (ranges that say ``size_records``, an
    upper bound: a Kafka range's offsets). A limit of 0 leaves its kind of range to Spark."""
    totals, limits, schemas = [0, 0], (limit, limit_records), set()
    for _, part in parts:
        if not isinstance(part, PartitionRows) or part.emitted_rows:
            return False
        for source in part.ranges:
            size = getattr(source, "size_bytes", None)
            kind = 0
            if size is None:
                size, kind = getattr(source, "size_records", None), 1
            if size is None or limits[kind] <= 0:
                return False
            totals[kind] += int(size)
            if totals[kind] > limits[kind]:
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
    read_ahead(part for _, part in parts)
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
