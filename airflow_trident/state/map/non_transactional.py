"""Non-transactional map state: updates apply on every attempt (at-least-once).

>>> from airflow_trident.state.map.backing import MemoryBackingMap
>>> m = NonTransactionalMap(MemoryBackingMap())
>>> for _ in range(2):  # the same batch twice: counted twice, by design
...     m.begin_commit(1); _ = m.multi_update([("k",)], [lambda c: (c or 0) + 1]); m.commit(1)
>>> m.multi_get([("k",)])
[2]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from airflow_trident.state.base import Key, StateType, check_same_length
from airflow_trident.state.map.base import RuleMap, Updater

__all__ = ["NonTransactionalMap"]


class NonTransactionalMap(RuleMap):
    """Stores plain values; no txid, so a replayed batch applies again."""

    state_type: ClassVar[StateType] = StateType.NON_TRANSACTIONAL

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        """Stored values, ``None`` where absent."""
        return list(self._backing.multi_get(keys))

    def multi_update(self, keys: Sequence[Key], updaters: Sequence[Updater]) -> list[Any]:
        check_same_length(keys, updaters, f"state {self.name!r}: multi_update")
        self._require_txid("multi_update")
        stored = self._backing.multi_get(keys)
        new = [u(s) for s, u in zip(stored, updaters, strict=True)]
        self._backing.multi_put(keys, new)
        return new

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        check_same_length(keys, values, f"state {self.name!r}: multi_put")
        self._require_txid("multi_put")
        self._backing.multi_put(keys, list(values))
