"""Spark-native emit: a spout hands the batch a *range* of its source instead of tuples.

A range (:class:`SourceRange`) is a fixed slice of one source partition — a list of files, say —
that knows its record count, how to read its tuples in this process (:meth:`SourceRange.rows`:
tests, DRPC, rebuild, the in-process runtime) and how Spark reads it in parallel
(:meth:`SourceRange.read_spec`: a :class:`ReadSpec` the Spark runtime turns into a DataFrame,
one or more Spark tasks per file; the driver never holds the tuples).

An emitter calls :func:`emit_range` where it would emit tuples one by one. The batch's tuples of a
partition are then a :class:`PartitionRows`: a list of tuples emitted one by one and of ranges,
whose length (the records emitted, for the manifest and the completeness check) is known without
reading, and which reads its ranges only when iterated.

Examples
--------
>>> class Numbers:
...     def __init__(self, n): self.count = n
...     def rows(self): return iter([(i,) for i in range(self.count)])
...     def read_spec(self): return ReadSpec("parquet", ("/data/p0/a.parquet",), (("n", "bigint"),))
>>> rows = PartitionRows()
>>> rows.append(("x",)); rows.add_range(Numbers(3))
>>> len(rows), rows[:2], list(rows), rows.native
(4, [('x',), (0,)], [('x',), (0,), (1,), (2,)], True)
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, SupportsIndex, overload, runtime_checkable

from airflow_trident.errors import TridentError

__all__ = [
    "AgesOut",
    "LineParse",
    "PartitionRows",
    "ReadSpec",
    "SourceRange",
    "emit_range",
    "emitted_counts",
    "read_ahead",
]

Row = tuple[Any, ...]


@dataclass(frozen=True)
class ReadSpec:
    """How Spark reads a range: files of one format, the spout's fields with their Spark types.

    ``format``: ``"json"`` (JSON lines), ``"csv"`` (a header line, then the fields in order)
    or ``"parquet"``; ``"jdbc"``: no paths, ``options`` are Spark's JDBC reader options (a
    database table range, :mod:`airflow_trident.spout.database_table`). ``on_malformed``:
    ``"fail"`` (the Spark job fails naming the file) or ``"drop"`` (malformed records were
    dead-lettered when the range was planned; Spark skips them). ``options`` go to Spark's
    reader as they are. ``driver``: a JDBC driver class and the jar that has it; Spark adds the
    jar to a session that cannot load the class. ``lines``: see :class:`LineParse`.
    """

    format: str
    paths: tuple[str, ...]
    schema: tuple[tuple[str, str], ...]
    on_malformed: str = "fail"
    options: Mapping[str, str] = field(default_factory=dict)
    driver: tuple[str, str] | None = None
    lines: LineParse | None = None


@runtime_checkable
class LineParse(Protocol):
    """Set on a :class:`ReadSpec` of JSON or CSV files: Spark reads the files as text lines and
    calls this on its executors to make each line a tuple of ``schema`` (the in-process parser,
    so that both runtimes read the same records): ``parse(line, first, path)`` gives the tuple,
    or ``None`` for a line that is no record (``first``: the file's first line), or raises."""

    def parse(self, line: str, first: bool, path: str) -> Row | None:
        """The tuple of ``line`` of ``path``, or ``None``."""


@runtime_checkable
class SourceRange(Protocol):
    """A fixed slice of one source partition, readable here and on Spark."""

    @property
    def count(self) -> int:
        """The records of the range (what the batch emits from it). A range may leave its
        count to the job that reads it (an optional ``counted`` attribute, false): then this
        counts them in this process, and the Spark runtime counts them in the job's own pass
        (see :func:`emitted_counts`)."""

    def rows(self) -> Iterator[Row]:
        """Its tuples, read in this process, in the spout's field order."""

    def read_spec(self) -> ReadSpec:
        """How Spark reads it."""


@runtime_checkable
class AgesOut(Protocol):
    """A range whose records the source may drop before a replay reads them (a Kafka range:
    retention): ``gone()`` gives the in-process read's refusal once it has, else ``None``;
    the Spark runtime asks when a batch fails, so both runtimes fail alike."""

    def gone(self) -> TridentError | None:
        """The refusal of a read of this range, or ``None`` while its records are held."""


def read_ahead(partitions: Iterable[Any]) -> None:
    """Before a process reads every partition of a batch in turn: ranges of a kind that reads
    many at once (a ``read_together(ranges)`` class method, e.g. Kafka ranges: one consumer for
    all partitions) are read now, together. Reading each partition then gives the same
    records and meets the same errors, in the same order; other partitions are left alone.

    >>> read_ahead([[("a",)], PartitionRows()])  # no range that reads together: nothing to do
    """
    kinds: dict[type, list[Any]] = {}
    for part in partitions:
        if isinstance(part, PartitionRows):
            for source in part.ranges:
                kinds.setdefault(type(source), []).append(source)
    for kind, ranges in kinds.items():
        together = getattr(kind, "read_together", None)
        if together is not None and len(ranges) > 1:
            together(ranges)


class PartitionRows(list[Row]):
    """A source partition's tuples of one batch: tuples emitted one by one, and ranges.

    ``len()`` is the record count (no reading); iterating reads the ranges in this process; a
    slice from the start reads only what it needs (the Spark runtime's samples). The Spark
    runtime reads :attr:`ranges` natively when :attr:`native`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.pieces: list[list[Row] | SourceRange] = []
        self.observed: Callable[[], int | None] | None = None
        """Set by the Spark runtime that reads the ranges: the records its job read (``None``
        until the job ran)."""

    @property
    def counted(self) -> bool:
        """Whether the record count is known without reading (every range knows its own)."""
        return all(getattr(r, "counted", True) for r in self.ranges)

    def records(self) -> int:
        """The record count: known, or counted by the job that read the ranges, or (no such
        job ran) counted here."""
        if not self.counted and self.observed is not None:
            seen = self.observed()
            if seen is not None:
                return seen
        return len(self)

    @property
    def native(self) -> bool:
        """Whether some of the tuples are in ranges."""
        return any(not isinstance(p, list) for p in self.pieces)

    @property
    def ranges(self) -> list[SourceRange]:
        """The ranges, in emit order."""
        return [p for p in self.pieces if not isinstance(p, list)]

    @property
    def emitted_rows(self) -> list[Row]:
        """The tuples emitted one by one (not in ranges)."""
        return [r for p in self.pieces if isinstance(p, list) for r in p]

    def append(self, row: Row) -> None:
        if not self.pieces or not isinstance(self.pieces[-1], list):
            self.pieces.append([])
        last = self.pieces[-1]
        assert isinstance(last, list)
        last.append(row)

    def add_range(self, source: SourceRange) -> None:
        """Add ``source``'s records (read later)."""
        self.pieces.append(source)

    def __len__(self) -> int:
        return sum(len(p) if isinstance(p, list) else p.count for p in self.pieces)

    def __bool__(self) -> bool:
        return len(self) > 0

    def __iter__(self) -> Iterator[Row]:
        for piece in self.pieces:
            yield from piece if isinstance(piece, list) else piece.rows()

    @overload
    def __getitem__(self, index: SupportsIndex) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> list[Row]: ...

    def __getitem__(self, index: SupportsIndex | slice) -> Row | list[Row]:
        if isinstance(index, slice):
            if index.step is None and (index.start or 0) >= 0 and (index.stop or 0) >= 0:
                return list(itertools.islice(iter(self), index.start, index.stop))
            return list(self)[index]
        return list(self)[index]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, list) and list(iter(self)) == list(iter(other))

    __hash__ = None

    def __repr__(self) -> str:
        return f"PartitionRows({len(self)} records, {len(self.ranges)} ranges)"


class _Counts(Mapping[str, int]):
    """Records per source partition, resolved at the first look (after the job ran)."""

    def __init__(self, parts: Mapping[str, Sequence[Row]]) -> None:
        self._parts = dict(parts)
        self._counts: dict[str, int] | None = None

    def _resolved(self) -> dict[str, int]:
        if self._counts is None:
            self._counts = {
                p: rows.records() if isinstance(rows, PartitionRows) else len(rows)
                for p, rows in self._parts.items()
            }
        return self._counts

    def __getitem__(self, key: str) -> int:
        return self._resolved()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._parts)

    def __len__(self) -> int:
        return len(self._parts)

    def __repr__(self) -> str:
        return repr(self._resolved())


def emitted_counts(parts: Mapping[str, Sequence[Row]]) -> Mapping[str, int]:
    """The records emitted per source partition of ``parts`` (what the manifest lists).

    A dict when every count is known now; else a mapping resolved at the first look: a range
    that leaves its count to the job is counted by the Spark job that read it (in the same
    pass), or here when no job read it.

    >>> emitted_counts({"p0": [("a",), ("b",)]})
    {'p0': 2}
    """
    if all(not isinstance(r, PartitionRows) or r.counted for r in parts.values()):
        return {p: len(r) for p, r in parts.items()}
    return _Counts(parts)


def emit_range(collector: Any, source: SourceRange) -> None:
    """Emit ``source``'s records to ``collector``: as a range when the collector keeps ranges
    (``add_range``: the batch's collector), else read here, tuple by tuple."""
    add = getattr(collector, "add_range", None)
    if callable(add):
        add(source)
        return
    for row in source.rows():
        collector.emit(row)
