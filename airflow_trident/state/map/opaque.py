"""Opaque map state: a replayed txid is recomputed from ``prev`` (Trident's ``OpaqueMap``).

Examples
--------
The seed's example: count 4, previous 1, written by txid 2; this batch's partial count is 2.

>>> from airflow_trident.state.map.backing import MemoryBackingMap
>>> from airflow_trident.state.values import OpaqueValue
>>> store = MemoryBackingMap()
>>> store.multi_put([("total",)], [OpaqueValue(2, 4, 1)])
>>> total = OpaqueMap(store)
>>> total.begin_commit(3); total.multi_update([("total",)], [lambda c: c + 2]); total.commit(3)
[6]
>>> store.multi_get([("total",)])
[OpaqueValue(curr_txid=3, curr=6, prev=4)]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from airflow_trident.state.base import Key, StateType, check_same_length
from airflow_trident.state.map.base import RuleMap, Updater
from airflow_trident.state.values import OpaqueValue, apply_opaque

__all__ = ["OpaqueMap"]


class OpaqueMap(RuleMap):
    """Stores :class:`OpaqueValue` s; a batch builds on ``curr``, its replay on ``prev``."""

    state_type: ClassVar[StateType] = StateType.OPAQUE

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        """The value each key had before the current batch (latest committed between commits)."""
        stored: list[OpaqueValue[Any] | None] = self._backing.multi_get(keys)
        return [None if v is None else v.get(self._txid) for v in stored]

    def multi_update(self, keys: Sequence[Key], updaters: Sequence[Updater]) -> list[Any]:
        check_same_length(keys, updaters, f"state {self.name!r}: multi_update")
        txid = self._require_txid("multi_update")
        stored: list[OpaqueValue[Any] | None] = self._backing.multi_get(keys)
        new = [apply_opaque(s, txid, u) for s, u in zip(stored, updaters, strict=True)]
        self._backing.multi_put(keys, new)
        return [v.curr for v in new]

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        check_same_length(keys, values, f"state {self.name!r}: multi_put")
        txid = self._require_txid("multi_put")
        stored: list[OpaqueValue[Any] | None] = self._backing.multi_get(keys)
        new = [
            OpaqueValue(txid, v, None) if s is None else s.update(txid, v)
            for s, v in zip(stored, values, strict=True)
        ]
        self._backing.multi_put(keys, new)
