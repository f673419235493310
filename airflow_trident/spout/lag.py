"""How far behind its source a topology is: an optional spout method, ``pending``.

A spout that can tell how many tuples of a source partition come *after* a batch implements

``pending(partition, partition_meta) -> int | None``

on the spout object given to ``new_stream``. ``partition_meta`` is the metadata the spout itself
returned for that partition's newest batch (a partitioned or opaque partitioned spout's
per-partition metadata); for a spout without partitions, ``partition`` is ``"0"`` and the
metadata is the batch's. ``None`` means "cannot tell" (a source without an end offset, say).
``airflow-trident status`` and the UI view show it per source partition as the lag: what is not
yet emitted.

>>> from airflow_trident.spout.memory import MemoryTransactionalSpout
>>> spout = MemoryTransactionalSpout({"p0": [("a",), ("b",), ("c",)]}, ["w"], take_per_batch=2)
>>> pending_after(spout, "p0", {"offset": 0, "count": 2}), pending_after(object(), "p0", {})
(1, None)
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["ReportsPending", "pending_after"]


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
