"""Where partitioned spouts keep per-partition, per-txid metadata (Trident's
``RotatingTransactionalState``), as a small protocol with an in-memory implementation.

The ZooKeeper implementation lives in :mod:`airflow_trident.coordination.spout_state`.

>>> s = MemoryPartitionState()
>>> s.put("p0", 1, {"offset": 0, "count": 2})
>>> s.get("p0", 1), s.latest_before("p0", 2), s.latest_before("p0", 1)
({'offset': 0, 'count': 2}, (1, {'offset': 0, 'count': 2}), None)
"""

from __future__ import annotations

import copy
import threading
from typing import Any, Protocol, runtime_checkable

__all__ = ["MemoryPartitionState", "PartitionState"]


@runtime_checkable
class PartitionState(Protocol):
    """Per-partition JSON metadata by txid, plus each partition's committed metadata."""

    def get(self, partition: str, txid: int) -> Any:
        """Metadata of ``partition`` for ``txid``; ``None`` when absent."""

    def put(self, partition: str, txid: int, meta: Any) -> None:
        """Store metadata of ``partition`` for ``txid``."""

    def latest_before(self, partition: str, txid: int) -> tuple[int, Any] | None:
        """``(txid, metadata)`` of ``partition``'s newest txid below ``txid``; ``None`` if none."""

    def get_committed(self, partition: str) -> Any:
        """Metadata of the last committed batch of ``partition`` (opaque spouts); ``None``."""

    def committed_path(self, partition: str) -> str | None:
        """The znode the coordinator's commit writes ``partition``'s committed metadata to, in
        the same transaction as the committed txid; ``None`` when the state is not in ZooKeeper
        (then the coordinator calls :meth:`put_committed` after the commit)."""

    def put_committed(self, partition: str, meta: Any) -> None:
        """Store committed metadata of ``partition`` (when no coordinator commit does it)."""


class MemoryPartitionState:
    """:class:`PartitionState` in a dict (tests and in-process runs without ZooKeeper)."""

    def __init__(self) -> None:
        self._by_txid: dict[str, dict[int, Any]] = {}
        self._committed: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self, partition: str, txid: int) -> Any:
        with self._lock:
            return copy.deepcopy(self._by_txid.get(partition, {}).get(txid))

    def put(self, partition: str, txid: int, meta: Any) -> None:
        with self._lock:
            self._by_txid.setdefault(partition, {})[txid] = copy.deepcopy(meta)

    def latest_before(self, partition: str, txid: int) -> tuple[int, Any] | None:
        with self._lock:
            earlier = [t for t in self._by_txid.get(partition, {}) if t < txid]
            if not earlier:
                return None
            newest = max(earlier)
            return newest, copy.deepcopy(self._by_txid[partition][newest])

    def get_committed(self, partition: str) -> Any:
        with self._lock:
            return copy.deepcopy(self._committed.get(partition))

    def committed_path(self, partition: str) -> str | None:
        return None

    def put_committed(self, partition: str, meta: Any) -> None:
        with self._lock:
            self._committed[partition] = copy.deepcopy(meta)
