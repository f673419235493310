"""Where partitioned spouts keep per-partition, per-txid metadata (Trident's
``RotatingTransactionalState``), as a small protocol with an in-memory implementation.

The ZooKeeper implementation lives in :mod:`airflow_trident.coordination.spout_state`.

>>> s = MemoryPartitionState()
>>> s.put("p0", 1, {"offset": 0, "count": 2})
>>> s.get("p0", 1), s.latest_before("p0", 2), s.latest_before("p0", 1)
({'offset': 0, 'count': 2}, (1, {'offset': 0, 'count': 2}), None)
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

__all__ = ["MemoryPartitionState", "PartitionState", "TransactionWrite"]


class TransactionWrite(Protocol):
    """Writes a state adds to the coordinator's commit transaction (ZooKeeper): the opaque
    spouts' committed metadata lands with the committed txid or not at all."""

    def add_to(self, client: Any, tx: Any) -> None:
        """Add the writes to kazoo transaction ``tx`` (``client``'s); called again, with a new
        transaction, when a commit is retried."""


@runtime_checkable
class PartitionState(Protocol):
    """Per-partition JSON metadata by txid, plus each partition's committed metadata.

    The ``*_many`` methods do for many partitions what the single-partition ones do for one,
    in a constant number of round trips; :meth:`cached` scopes reads that may be served from
    what the scope read before (one batch's begin, emit or commit).
    """

    def get(self, partition: str, txid: int) -> Any:
        """Metadata of ``partition`` for ``txid``; ``None`` when absent."""

    def get_many(self, txid: int, partitions: Iterable[str]) -> dict[str, Any]:
        """Partition -> its metadata for ``txid`` (``None`` when absent)."""

    def put(self, partition: str, txid: int, meta: Any) -> None:
        """Store metadata of ``partition`` for ``txid``."""

    def put_many(self, txid: int, metas: Mapping[str, Any]) -> None:
        """Store the metadata of several partitions for ``txid`` (others keep theirs)."""

    def latest_before(self, partition: str, txid: int) -> tuple[int, Any] | None:
        """``(txid, metadata)`` of ``partition``'s newest txid below ``txid``; ``None`` if none."""

    def latest_before_many(
        self, partitions: Iterable[str], txid: int
    ) -> dict[str, tuple[int, Any] | None]:
        """Partition -> :meth:`latest_before` of it."""

    def get_committed(self, partition: str) -> Any:
        """Metadata of the last committed batch of ``partition`` (opaque spouts); ``None``."""

    def committed_many(self, partitions: Iterable[str]) -> dict[str, Any]:
        """Partition -> :meth:`get_committed` of it."""

    def committed_write(self, metas: Mapping[str, Any]) -> TransactionWrite | None:
        """The writes storing ``metas`` as committed metadata, for the coordinator's commit
        transaction (with the committed txid); ``None`` when the state is not in ZooKeeper
        (then the coordinator calls :meth:`put_committed_many` after the commit)."""

    def put_committed(self, partition: str, meta: Any) -> None:
        """Store committed metadata of ``partition`` (when no coordinator commit does it)."""

    def put_committed_many(self, metas: Mapping[str, Any]) -> None:
        """Store committed metadata of several partitions (others keep theirs)."""

    def cached(self) -> AbstractContextManager[None]:
        """A scope in which what was read is read once (one batch step)."""

    def newest_by_partition(self) -> dict[str, tuple[int, Any]]:
        """Every partition -> ``(txid, metadata)`` of its newest txid (the status's lag)."""

    def committed_all(self) -> dict[str, Any]:
        """Every partition -> its committed metadata (opaque spouts)."""


class MemoryPartitionState:
    """:class:`PartitionState` in a dict (tests and in-process runs without ZooKeeper)."""

    def __init__(self) -> None:
        self._by_txid: dict[str, dict[int, Any]] = {}
        self._committed: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self, partition: str, txid: int) -> Any:
        with self._lock:
            return copy.deepcopy(self._by_txid.get(partition, {}).get(txid))

    def get_many(self, txid: int, partitions: Iterable[str]) -> dict[str, Any]:
        return {p: self.get(p, txid) for p in partitions}

    def put(self, partition: str, txid: int, meta: Any) -> None:
        with self._lock:
            self._by_txid.setdefault(partition, {})[txid] = copy.deepcopy(meta)

    def put_many(self, txid: int, metas: Mapping[str, Any]) -> None:
        for partition, meta in metas.items():
            self.put(partition, txid, meta)

    def latest_before(self, partition: str, txid: int) -> tuple[int, Any] | None:
        with self._lock:
            earlier = [t for t in self._by_txid.get(partition, {}) if t < txid]
            if not earlier:
                return None
            newest = max(earlier)
            return newest, copy.deepcopy(self._by_txid[partition][newest])

    def latest_before_many(
        self, partitions: Iterable[str], txid: int
    ) -> dict[str, tuple[int, Any] | None]:
        return {p: self.latest_before(p, txid) for p in partitions}

    def get_committed(self, partition: str) -> Any:
        with self._lock:
            return copy.deepcopy(self._committed.get(partition))

    def committed_many(self, partitions: Iterable[str]) -> dict[str, Any]:
        return {p: self.get_committed(p) for p in partitions}

    def committed_write(self, metas: Mapping[str, Any]) -> TransactionWrite | None:
        return None

    def put_committed(self, partition: str, meta: Any) -> None:
        with self._lock:
            self._committed[partition] = copy.deepcopy(meta)

    def put_committed_many(self, metas: Mapping[str, Any]) -> None:
        for partition, meta in metas.items():
            self.put_committed(partition, meta)

    def cached(self) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def newest_by_partition(self) -> dict[str, tuple[int, Any]]:
        with self._lock:
            return {
                p: (max(by), copy.deepcopy(by[max(by)])) for p, by in self._by_txid.items() if by
            }

    def committed_all(self) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._committed)
