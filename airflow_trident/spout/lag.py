"""How far behind its source a topology is: an optional spout method, ``pending``.

A spout that can tell how many tuples of a source partition come *after* a batch implements

``pending(partition, partition_meta) -> int | None``

on the spout object given to ``new_stream``. ``partition_meta`` is the metadata the spout itself
returned for that partition's newest batch (a partitioned or opaque partitioned spout's
per-partition metadata); for a spout without partitions, ``partition`` is ``"0"`` and the
metadata is the batch's. ``None`` means "cannot tell" (a source without an end offset, say).
``airflow-trident status`` and the UI view show it per source partition as the lag: what is not
yet emitted.

A spout that counts its backlog in something other than tuples (a file log: files, and their
bytes) implements ``lag(partition, partition_meta) -> Lag | None`` instead (or as well: ``lag``
is asked first).

>>> from airflow_trident.spout.memory import MemoryTransactionalSpout
>>> spout = MemoryTransactionalSpout({"p0": [("a",), ("b",), ("c",)]}, ["w"], take_per_batch=2)
>>> pending_after(spout, "p0", {"offset": 0, "count": 2}), pending_after(object(), "p0", {})
(1, None)
>>> lag_after(spout, "p0", {"offset": 0, "count": 2})
Lag(count=1, unit='tuples', detail=None)
>>> Lag(3, "files", "12,345 bytes").text()
'3 files (12,345 bytes)'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "Lag",
    "ReportsLag",
    "ReportsPending",
    "lag_after",
    "lag_or_reason",
    "pending_after",
    "reports_lag",
]


@dataclass(frozen=True)
class Lag:
    """What a source partition holds after a batch: ``count`` of ``unit`` (and a detail)."""

    count: int
    unit: str = "tuples"
    detail: str | None = None
    """More of the same backlog, for people (``"12,345 bytes"``)."""

    def text(self) -> str:
        """``3 files (12,345 bytes)``; a count of tuples is the bare number."""
        shown = str(self.count) if self.unit == "tuples" else f"{self.count} {self.unit}"
        return shown + (f" ({self.detail})" if self.detail else "")


@runtime_checkable
class ReportsPending(Protocol):
    """A spout that can say how many tuples of a partition follow a batch."""

    def pending(self, partition: str, partition_meta: Any) -> int | None:
        """Tuples of ``partition`` after the batch ``partition_meta``; ``None``: unknown."""


def pending_after(spout: Any, partition: str, partition_meta: Any) -> int | None:
    """``spout.pending(partition, partition_meta)`` if the spout has it, else ``None``.

    A spout whose ``pending`` fails answers ``None`` too: a status report must not fail
    because one source cannot be asked.
    """
    if not isinstance(spout, ReportsPending):
        return None
    try:
        found = spout.pending(partition, partition_meta)
    except Exception:  # a user's spout: any failure means "cannot tell"
        return None
    return None if found is None else max(0, int(found))


@runtime_checkable
class ReportsLag(Protocol):
    """A spout that tells a partition's backlog in its own unit (see :class:`Lag`)."""

    def lag(self, partition: str, partition_meta: Any) -> Lag | None:
        """The backlog of ``partition`` after the batch ``partition_meta``; ``None``: unknown."""


def reports_lag(spout: Any) -> bool:
    """Whether ``spout`` can tell its lag at all (``lag`` or ``pending``)."""
    return isinstance(spout, (ReportsLag, ReportsPending))


def lag_after(spout: Any, partition: str, partition_meta: Any) -> Lag | None:
    """``spout.lag(...)`` if it has it, else :func:`pending_after` as a count of tuples;
    ``None`` when the spout cannot tell (or fails to: a status report must not fail)."""
    return lag_or_reason(spout, partition, partition_meta)[0]


def lag_or_reason(spout: Any, partition: str, partition_meta: Any) -> tuple[Lag | None, str | None]:
    """:func:`lag_after`, and when the spout failed to tell, why (its error, one line): the
    lag is asked of the spout in the process that reads the status, so a source this process
    cannot reach (a file log root another environment names) says so instead of a bare
    "unknown".

    >>> class Unreachable:
    ...     def lag(self, partition, partition_meta):
    ...         raise FileNotFoundError("/data/landing/p0")
    >>> lag_or_reason(Unreachable(), "p0", {})
    (None, 'FileNotFoundError: /data/landing/p0')
    """
    if isinstance(spout, ReportsLag):
        try:
            return spout.lag(partition, partition_meta), None
        except Exception as exc:  # a user's spout: any failure means "cannot tell"
            return None, _reason(exc)
    if not isinstance(spout, ReportsPending):
        return None, None
    try:
        found = spout.pending(partition, partition_meta)
    except Exception as exc:  # a user's spout: any failure means "cannot tell"
        return None, _reason(exc)
    return (None if found is None else Lag(max(0, int(found)))), None


def _reason(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__
