"""In-memory spouts for tests and demos.

* :class:`FixedBatchSpout` — Trident's: fixed tuples cut into batches of ``max_batch_size``,
  optionally cycling; non-transactional, but batch ``N`` is always the same tuples.
* :class:`MemoryTransactionalSpout` — partitioned and transactional: the offsets of every
  partition for a txid are fixed in its metadata, so a replay re-emits exactly.
* :class:`MemoryOpaqueSpout` — partitioned and opaque; a partition can be made unreadable
  (:meth:`MemoryOpaqueSpout.set_unreadable`) to show a batch re-emitted with other content.

Examples
--------
>>> from airflow_trident.spout.base import ListCollector
>>> spout = FixedBatchSpout(("sentence",), 2, ("a b",), ("b c",), ("c d",))
>>> c = ListCollector(); spout.emit_batch(2, c); c.tuples
[('c d',)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.errors import ConfigurationError
from airflow_trident.spout.base import Collector

__all__ = ["FixedBatchSpout", "MemoryOpaqueSpout", "MemoryTransactionalSpout"]


class FixedBatchSpout:
    """Fixed tuples in batches of ``max_batch_size``; batch ``N`` (1-based) is always the same.

    Without ``cycle`` the batches after the data are empty; with it the data repeats.
    """

    def __init__(
        self,
        fields: Sequence[str],
        max_batch_size: int,
        *tuples: Sequence[Any],
        cycle: bool = False,
    ) -> None:
        if max_batch_size < 1:
            msg = f"FixedBatchSpout max_batch_size must be >= 1, got {max_batch_size}"
            raise ConfigurationError(msg)
        self.output_fields = tuple(fields)
        self.max_batch_size = max_batch_size
        self.tuples = [tuple(t) for t in tuples]
        self.cycle = cycle
        for t in self.tuples:
            if len(t) != len(self.output_fields):
                msg = f"FixedBatchSpout tuple {t!r} does not match fields {self.output_fields}"
                raise ConfigurationError(msg)

    def batch(self, batch_id: int) -> list[tuple[Any, ...]]:
        """The tuples of batch ``batch_id``."""
        start = (batch_id - 1) * self.max_batch_size
        if not self.tuples:
            return []
        if not self.cycle:
            return self.tuples[start : start + self.max_batch_size]
        n = len(self.tuples)
        return [self.tuples[(start + i) % n] for i in range(self.max_batch_size)]

    def emit_batch(self, batch_id: int, collector: Collector) -> None:
        for t in self.batch(batch_id):
            collector.emit(t)

    def ack(self, batch_id: int) -> None:
        return None

    def close(self) -> None:
        return None


def _check_partitions(data: Mapping[str, Sequence[Sequence[Any]]], take: int) -> None:
    if take < 1:
        msg = f"take_per_batch must be >= 1, got {take}"
        raise ConfigurationError(msg)
    if not data:
        msg = "an in-memory partitioned spout needs at least one partition"
        raise ConfigurationError(msg)


class _PartitionedCoordinator:
    def __init__(self, partitions: Sequence[str]) -> None:
        self._partitions = list(partitions)

    def get_partitions_for_batch(self) -> Any:
        return {"partitions": self._partitions}

    def is_ready(self, txid: int) -> bool:
        return True

    def close(self) -> None:
        return None


class MemoryTransactionalSpout:
    """Partitions of in-memory tuples; each batch takes up to ``take_per_batch`` per partition.

    Partition metadata is ``{"offset": first index, "count": n}``, fixed per txid.
    """

    def __init__(
        self,
        data: Mapping[str, Sequence[Sequence[Any]]],
        fields: Sequence[str],
        take_per_batch: int,
    ) -> None:
        _check_partitions(data, take_per_batch)
        self.data = {p: [tuple(t) for t in ts] for p, ts in data.items()}
        self.output_fields = tuple(fields)
        self.take_per_batch = take_per_batch

    def get_partitioned_coordinator(self) -> _PartitionedCoordinator:
        return _PartitionedCoordinator(sorted(self.data))

    def get_partitioned_emitter(self) -> MemoryTransactionalSpout:
        return self

    def get_ordered_partitions(self, all_partition_info: Any) -> Sequence[str]:
        return list(all_partition_info["partitions"])

    def emit_partition_batch_new(
        self,
        attempt: TransactionAttempt,
        collector: Collector,
        partition: str,
        last_partition_meta: Any,
    ) -> Any:
        last = last_partition_meta or {"offset": 0, "count": 0}
        offset = last["offset"] + last["count"]
        count = max(0, min(self.take_per_batch, len(self.data[partition]) - offset))
        meta = {"offset": offset, "count": count}
        self.emit_partition_batch(attempt, collector, partition, meta)
        return meta

    def emit_partition_batch(
        self, attempt: TransactionAttempt, collector: Collector, partition: str, partition_meta: Any
    ) -> None:
        start = partition_meta["offset"]
        for t in self.data[partition][start : start + partition_meta["count"]]:
            collector.emit(t)

    def pending(self, partition: str, partition_meta: Any) -> int | None:
        """Tuples of ``partition`` after the batch ``partition_meta`` (see
        :mod:`airflow_trident.spout.lag`)."""
        last = partition_meta or {"offset": 0, "count": 0}  # None: nothing emitted yet
        return max(0, len(self.data[partition]) - int(last["offset"]) - int(last["count"]))

    def close(self) -> None:
        return None


class MemoryOpaqueSpout:
    """Partitions of in-memory tuples read opaquely: metadata is the next offset to read.

    An unreadable partition emits nothing and keeps its offset, so its tuples arrive in a later
    batch — the situation the opaque rules exist for.
    """

    def __init__(
        self,
        data: Mapping[str, Sequence[Sequence[Any]]],
        fields: Sequence[str],
        take_per_batch: int,
    ) -> None:
        _check_partitions(data, take_per_batch)
        self.data = {p: [tuple(t) for t in ts] for p, ts in data.items()}
        self.output_fields = tuple(fields)
        self.take_per_batch = take_per_batch
        self.unreadable: set[str] = set()

    def set_unreadable(self, *partitions: str) -> None:
        """Make ``partitions`` unreadable (and every other one readable)."""
        self.unreadable = set(partitions)

    def get_opaque_coordinator(self) -> _PartitionedCoordinator:
        return _PartitionedCoordinator(sorted(self.data))

    def get_opaque_emitter(self) -> MemoryOpaqueSpout:
        return self

    def get_ordered_partitions(self, all_partition_info: Any) -> Sequence[str]:
        return list(all_partition_info["partitions"])

    def emit_partition_batch(
        self,
        attempt: TransactionAttempt,
        collector: Collector,
        partition: str,
        last_partition_meta: Any,
    ) -> Any:
        offset = (last_partition_meta or {"next_offset": 0})["next_offset"]
        if partition in self.unreadable:
            return {"next_offset": offset}
        rows = self.data[partition][offset : offset + self.take_per_batch]
        for t in rows:
            collector.emit(t)
        return {"next_offset": offset + len(rows)}

    def pending(self, partition: str, partition_meta: Any) -> int | None:
        """Tuples of ``partition`` after the batch ``partition_meta`` (see
        :mod:`airflow_trident.spout.lag`)."""
        offset = (partition_meta or {"next_offset": 0})["next_offset"]  # None: nothing emitted
        return max(0, len(self.data[partition]) - int(offset))

    def close(self) -> None:
        return None
