"""An LRU cache in front of a store (Trident's ``CachedMap``).

Writes (and deletes) go through to the store at once; they enter the cache only when the commit
succeeds, so a commit that fails (and is rolled back by the store) never leaves the cache ahead of
the store.

>>> from airflow_trident.state.map.backing import MemoryBackingMap
>>> store = MemoryBackingMap()
>>> cached = CachedMap(store, max_size=2)
>>> cached.begin_commit(1); cached.multi_put([("a",)], [1]); cached.commit(1)
>>> cached.multi_get([("a",), ("b",)])
[1, None]
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from airflow_trident.errors import ConfigurationError
from airflow_trident.state.base import Key, StateType, check_same_length
from airflow_trident.state.combine import CombineOp
from airflow_trident.state.map.backing import (
    BackingMap,
    CombiningBackingMap,
    CommitAware,
    TxidIndexedBackingMap,
)

__all__ = ["CachedMap"]


class CachedMap:
    """A :class:`BackingMap` that caches up to ``max_size`` stored values, least recent out."""

    def __init__(self, delegate: BackingMap, *, max_size: int = 1000) -> None:
        if max_size < 1:
            msg = f"CachedMap max_size must be >= 1, got {max_size}"
            raise ConfigurationError(msg)
        self._delegate = delegate
        self._max_size = max_size
        self._cache: OrderedDict[Key, Any] = OrderedDict()
        self._pending: dict[Key, Any] = {}

    @property
    def delegate(self) -> BackingMap:
        """The store behind the cache (committed-only reads bypass the cache)."""
        return self._delegate

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        found: dict[Key, Any] = {}
        missing: list[Key] = []
        for key in map(tuple, keys):
            if key in self._pending:
                found[key] = self._pending[key]
            elif key in self._cache:
                self._cache.move_to_end(key)
                found[key] = self._cache[key]
            elif key not in found:
                missing.append(key)
        if missing:
            loaded = self._delegate.multi_get(missing)
            for key, value in zip(missing, loaded, strict=True):
                found[key] = value
                self._remember(key, value)
        return [found[tuple(k)] for k in keys]

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        check_same_length(keys, values, "CachedMap.multi_put")
        self._delegate.multi_put(keys, values)
        for key, value in zip(keys, values, strict=True):
            self._pending[tuple(key)] = value

    def begin_commit(self, txid: int) -> None:
        self._pending.clear()
        if isinstance(self._delegate, CommitAware):
            self._delegate.begin_commit(txid)

    def commit(self, txid: int) -> None:
        if isinstance(self._delegate, CommitAware):
            self._delegate.commit(txid)
        for key, value in self._pending.items():
            self._remember(key, value)
        self._pending.clear()

    def rollback(self) -> None:
        self._pending.clear()
        if isinstance(self._delegate, CommitAware):
            self._delegate.rollback()

    def supports_combine(self, op: CombineOp, state_type: StateType) -> bool:
        delegate = self._delegate
        return isinstance(delegate, CombiningBackingMap) and delegate.supports_combine(
            op, state_type
        )

    def multi_combine(
        self,
        keys: Sequence[Key],
        deltas: Sequence[Any],
        op: CombineOp,
        state_type: StateType,
        txid: int,
    ) -> None:
        if not isinstance(self._delegate, CombiningBackingMap):
            msg = "CachedMap.multi_combine: the store cannot combine; check supports_combine"
            raise TypeError(msg)
        self._delegate.multi_combine(keys, deltas, op, state_type, txid)
        for key in map(tuple, keys):  # the store computed the values: forget ours
            self._cache.pop(key, None)
            self._pending.pop(key, None)

    # -- TxidIndexedBackingMap (when the store is one) -------------------------------------
    @property
    def indexes_txids(self) -> bool:
        """Whether the store lists keys by txid and deletes keys (so this cache does too)."""
        return isinstance(self._delegate, TxidIndexedBackingMap)

    def keys_at_txid(self, txid: int) -> list[Key]:
        """The store's keys written by ``txid`` (writes go through, so the store knows all)."""
        return self._indexed("keys_at_txid").keys_at_txid(txid)

    def multi_delete(self, keys: Sequence[Key]) -> None:
        """Delete ``keys`` in the store; the cache sees them absent from now on in this commit,
        and after it commits (a rollback forgets the deletes, as it forgets the writes)."""
        self._indexed("multi_delete").multi_delete(keys)
        for key in map(tuple, keys):
            self._cache.pop(key, None)
            self._pending[key] = None

    def _indexed(self, what: str) -> TxidIndexedBackingMap:
        delegate = self._delegate
        if not isinstance(delegate, TxidIndexedBackingMap):
            msg = (
                f"CachedMap.{what}: the store {type(delegate).__name__} cannot list keys by "
                f"txid or delete keys; check indexes_txids"
            )
            raise TypeError(msg)
        return delegate

    def _remember(self, key: Key, value: Any) -> None:
        self._cache[key] = value
        self._cache.move_to_end(key)
        while len(self._cache) > self._max_size:
            self._cache.popitem(last=False)
