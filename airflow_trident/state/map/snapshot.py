"""One global value kept in a map state (Trident's ``Snapshottable`` over a ``MapState``).

An ungrouped ``persistent_aggregate`` (a global count, say) keeps its value under one key.

>>> from airflow_trident.state.map.backing import MemoryBackingMap
>>> from airflow_trident.state.map.opaque import OpaqueMap
>>> total = SnapshottableMap(OpaqueMap(MemoryBackingMap()))
>>> total.begin_commit(1); total.update(lambda c: (c or 0) + 5); total.commit(1)
5
>>> total.begin_commit(1); total.update(lambda c: (c or 0) + 2); total.commit(1)  # replay
2
>>> total.get()
2
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from airflow_trident.state.base import Key
from airflow_trident.state.combine import CombineOp
from airflow_trident.state.map.base import MapState, RevertibleState

__all__ = ["GLOBAL_KEY", "Snapshottable", "SnapshottableMap"]

GLOBAL_KEY: Key = ("$GLOBAL$",)


@runtime_checkable
class Snapshottable(Protocol):
    """State holding one value."""

    def begin_commit(self, txid: int) -> None:
        """Start applying batch ``txid``."""

    def commit(self, txid: int) -> None:
        """Make batch ``txid``'s update durable."""

    def get(self) -> Any:
        """The value (as the current batch sees it)."""

    def set(self, value: Any) -> None:
        """Replace the value for the current batch."""

    def update(self, updater: Callable[[Any], Any]) -> Any:
        """Apply ``updater`` to the value for the current batch; return the new value."""


class SnapshottableMap:
    """A :class:`Snapshottable` stored under :data:`GLOBAL_KEY` of a :class:`MapState`."""

    def __init__(self, delegate: MapState, *, key: Key = GLOBAL_KEY) -> None:
        self._delegate = delegate
        self._key = key

    @property
    def map_state(self) -> MapState:
        """The map holding the value."""
        return self._delegate

    def begin_commit(self, txid: int) -> None:
        self._delegate.begin_commit(txid)

    def commit(self, txid: int) -> None:
        self._delegate.commit(txid)

    def revert_txid(self, txid: int, keep: Iterable[Key]) -> int:
        """The map's :meth:`~airflow_trident.state.map.opaque.OpaqueMap.revert_txid` (an opaque
        map); other maps have nothing to revert (a replay writes the same keys): 0."""
        if isinstance(self._delegate, RevertibleState):
            return self._delegate.revert_txid(txid, keep)
        return 0

    def get(self) -> Any:
        return self._delegate.multi_get([self._key])[0]

    def set(self, value: Any) -> None:
        self._delegate.multi_put([self._key], [value])

    def update(self, updater: Callable[[Any], Any]) -> Any:
        return self._delegate.multi_update([self._key], [updater])[0]

    def combine(self, delta: Any, op: CombineOp) -> None:
        """Fold ``delta`` into the value with a built-in combiner."""
        self._delegate.multi_combine([self._key], [delta], op)
