"""Transactional map state: a replayed txid never re-applies (Trident's ``TransactionalMap``).

Examples
--------
The seed's example: txid 3 carries ``man, man, dog``; state holds man=3 (txid 1), dog=4 (txid 3,
so this batch already counted it) and apple=6 (txid 2).

>>> from airflow_trident.state.map.backing import MemoryBackingMap
>>> from airflow_trident.state.values import TransactionalValue as TV
>>> store = MemoryBackingMap()
>>> store.multi_put([("man",), ("dog",), ("apple",)], [TV(1, 3), TV(3, 4), TV(2, 6)])
>>> counts = TransactionalMap(store)
>>> counts.begin_commit(3)
>>> counts.multi_update([("man",), ("dog",)], [lambda c: c + 2, lambda c: c + 1])
[5, 4]
>>> counts.commit(3)
>>> for key, value in sorted(store.items()):
...     print(key, value)
('apple',) TransactionalValue(txid=2, val=6)
('dog',) TransactionalValue(txid=3, val=4)
('man',) TransactionalValue(txid=3, val=5)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from airflow_trident.state.base import Key, StateType, check_same_length
from airflow_trident.state.map.base import RuleMap, Updater
from airflow_trident.state.values import TransactionalValue, apply_transactional

__all__ = ["TransactionalMap"]


class TransactionalMap(RuleMap):
    """Stores :class:`TransactionalValue` s; skips keys the current txid already wrote."""

    state_type: ClassVar[StateType] = StateType.TRANSACTIONAL

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        """Stored values (``None`` where absent); raises if state is ahead of the current txid."""
        stored: list[TransactionalValue[Any] | None] = self._backing.multi_get(keys)
        return [None if v is None else v.get(self._txid) for v in stored]

    def multi_update(self, keys: Sequence[Key], updaters: Sequence[Updater]) -> list[Any]:
        check_same_length(keys, updaters, f"state {self.name!r}: multi_update")
        txid = self._require_txid("multi_update")
        stored: list[TransactionalValue[Any] | None] = self._backing.multi_get(keys)
        new = [apply_transactional(s, txid, u) for s, u in zip(stored, updaters, strict=True)]
        changed = [i for i, (s, n) in enumerate(zip(stored, new, strict=True)) if s is not n]
        if changed:
            self._backing.multi_put([keys[i] for i in changed], [new[i] for i in changed])
        return [v.val for v in new]

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        check_same_length(keys, values, f"state {self.name!r}: multi_put")
        txid = self._require_txid("multi_put")
        stored_values: list[TransactionalValue[Any] | None] = self._backing.multi_get(keys)
        for stored in stored_values:
            if stored is not None:
                stored.get(txid)  # raises StateBehindError before anything is written
        self._backing.multi_put(
            keys, [_put(s, txid, v) for s, v in zip(stored_values, values, strict=True)]
        )


def _put(stored: TransactionalValue[Any] | None, txid: int, value: Any) -> TransactionalValue[Any]:
    """``value`` stored by batch ``txid`` with the value before that batch as ``prev``."""
    if stored is None:
        return TransactionalValue(txid, value, None, True)
    if stored.txid == txid:  # a replay overwrites: the value before the batch is unchanged
        return TransactionalValue(txid, value, stored.prev, stored.has_prev)
    return TransactionalValue(txid, value, stored.val, True)
