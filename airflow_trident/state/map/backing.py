"""The store contract (:class:`BackingMap`) and the in-memory store.

A store implements two batched calls, ``multi_get`` and ``multi_put``; the map states in this
package add the exactly-once rules on top. A store may also take part in the commit (one database
transaction per commit) by implementing ``begin_commit``/``commit``/``rollback``, may apply
built-in combiners itself (:class:`CombiningBackingMap`), and may list the keys a txid wrote and
delete keys (:class:`TxidIndexedBackingMap`: opaque state needs it to undo a failed attempt whose
replay writes fewer keys, see :meth:`~airflow_trident.state.map.opaque.OpaqueMap.revert_txid`).

Examples
--------
>>> store = MemoryBackingMap()
>>> store.multi_put([("a",)], [1])
>>> store.multi_get([("a",), ("b",)])
[1, None]
>>> from airflow_trident.state.values import OpaqueValue
>>> store.multi_put([("b",), ("c",)], [OpaqueValue(2, 5, 3), OpaqueValue(1, 1, None)])
>>> store.keys_at_txid(2)
[('b',)]
>>> store.multi_delete([("b",)]); store.multi_get([("b",)])
[None]
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from airflow_trident.state.base import Key, StateType, check_same_length
from airflow_trident.state.combine import CombineOp

__all__ = [
    "BackingMap",
    "CombiningBackingMap",
    "CommitAware",
    "MemoryBackingMap",
    "TxidIndexedBackingMap",
    "memory_store",
    "stored_txid",
    "txid_index",
    "reset_memory_stores",
]


@runtime_checkable
class BackingMap(Protocol):
    """Batched key-value store: the only thing a store must implement."""

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        """Return the stored value of each key, ``None`` where absent."""

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        """Store ``values[i]`` under ``keys[i]``."""


@runtime_checkable
class CommitAware(Protocol):
    """A store that groups the writes of one commit (for instance in one database transaction)."""

    def begin_commit(self, txid: int) -> None:
        """Start the writes of batch ``txid``."""

    def commit(self, txid: int) -> None:
        """Make the writes of batch ``txid`` durable."""

    def rollback(self) -> None:
        """Discard the writes since ``begin_commit``."""


@runtime_checkable
class CombiningBackingMap(Protocol):
    """A store that applies a built-in combiner under a state rule itself, in one statement."""

    def supports_combine(self, op: CombineOp, state_type: StateType) -> bool:
        """Whether :meth:`multi_combine` handles ``op`` under ``state_type``."""

    def multi_combine(
        self,
        keys: Sequence[Key],
        deltas: Sequence[Any],
        op: CombineOp,
        state_type: StateType,
        txid: int,
    ) -> None:
        """Fold ``deltas[i]`` into ``keys[i]`` with ``op`` under the rule of ``state_type``."""


@runtime_checkable
class TxidIndexedBackingMap(BackingMap, Protocol):
    """A store that lists the keys whose stored value carries a txid, and deletes keys.

    Inside a commit (a :class:`CommitAware` store) both calls belong to the commit's
    transaction, like ``multi_get`` and ``multi_put``. A wrapper store whose delegate may not
    implement them (:class:`~airflow_trident.state.map.cached.CachedMap`) says so with a false
    ``indexes_txids`` attribute (see :func:`txid_index`).
    """

    def keys_at_txid(self, txid: int) -> list[Key]:
        """The keys whose stored value was written by batch ``txid``, in no particular order."""

    def multi_delete(self, keys: Sequence[Key]) -> None:
        """Remove ``keys`` (absent keys are ignored)."""


def txid_index(store: BackingMap) -> TxidIndexedBackingMap | None:
    """``store`` if it can list keys by txid and delete keys, else ``None``."""
    if isinstance(store, TxidIndexedBackingMap) and getattr(store, "indexes_txids", True):
        return store
    return None


def stored_txid(value: Any) -> int | None:
    """The txid a stored value carries (``curr_txid`` of an opaque value, ``txid`` of a
    transactional one), ``None`` for a plain value."""
    txid = getattr(value, "curr_txid", None)
    if txid is None:
        txid = getattr(value, "txid", None)
    return txid if isinstance(txid, int) else None


class MemoryBackingMap:
    """A dict behind a lock; values are kept as given (they are frozen value types)."""

    def __init__(self) -> None:
        self._data: dict[Key, Any] = {}
        self._lock = threading.Lock()

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        with self._lock:
            return [self._data.get(tuple(k)) for k in keys]

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        check_same_length(keys, values, "MemoryBackingMap.multi_put")
        with self._lock:
            for key, value in zip(keys, values, strict=True):
                self._data[tuple(key)] = value

    def keys_at_txid(self, txid: int) -> list[Key]:
        with self._lock:
            return [k for k, v in self._data.items() if stored_txid(v) == txid]

    def multi_delete(self, keys: Sequence[Key]) -> None:
        with self._lock:
            for key in keys:
                self._data.pop(tuple(key), None)

    def items(self) -> list[tuple[Key, Any]]:
        """A snapshot of every stored pair (for tests and debugging)."""
        with self._lock:
            return list(self._data.items())


_STORES: dict[str, MemoryBackingMap] = {}
_STORES_LOCK = threading.Lock()


def memory_store(name: str) -> MemoryBackingMap:
    """Return the process-wide in-memory store called ``name``, creating it on first use.

    Like Trident's ``MemoryMapState``, every state made under one name shares the data, so a
    state survives a re-made state object within one process.
    """
    with _STORES_LOCK:
        return _STORES.setdefault(name, MemoryBackingMap())


def reset_memory_stores() -> None:
    """Forget every in-memory store (tests)."""
    with _STORES_LOCK:
        _STORES.clear()
