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

An opaque replay may read less than the failed attempt it replaces (a partition unreadable): the
tuples it does not read come again in a later txid. The keys only the failed attempt wrote must
then get their value before the txid back, which :meth:`OpaqueMap.revert_txid` does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from airflow_trident.errors import StateError
from airflow_trident.state.base import Key, StateType, check_same_length
from airflow_trident.state.map.backing import txid_index
from airflow_trident.state.map.base import RuleMap, Updater
from airflow_trident.state.values import OpaqueValue, apply_opaque

__all__ = ["OpaqueMap"]

log = logging.getLogger(__name__)

_WARNED: set[tuple[str, str]] = set()
_WARNED_LOCK = threading.Lock()


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

    def revert_txid(self, txid: int, keep: Iterable[Key]) -> int:
        """Put every key stored at ``txid`` that is not in ``keep`` back to its value before
        ``txid``; return how many keys changed.

        Call it between ``begin_commit(txid)`` and ``commit(txid)``, with ``keep`` the keys this
        attempt of ``txid`` writes (:data:`~airflow_trident.state.map.snapshot.GLOBAL_KEY` for
        an ungrouped state). A stored ``OpaqueValue(txid, curr, prev)`` becomes
        ``OpaqueValue(txid, prev, prev)``; a key with no ``prev`` (``txid`` created it) is
        deleted. A failed attempt of ``txid`` that read more (a partition unreadable for the
        replay, whose tuples then come in a later txid) so leaves no trace in the keys the replay
        does not write; the keys it writes are recomputed from ``prev`` by the opaque rule anyway,
        so ``keep`` is left alone. Reading and writing happen in the store's transaction of this
        commit (a rollback undoes them), and running it twice changes nothing more.

        The store must list keys by txid and delete keys
        (:class:`~airflow_trident.state.map.backing.TxidIndexedBackingMap`, as the memory and
        SQL stores do). With a store that cannot, a warning is logged and nothing is reverted:
        the per-key values of such a replay are then only exact if it writes the same keys.

        Raises
        ------
        StateError
            If called outside the commit of ``txid``.

        Examples
        --------
        The seed's value (count 4, previous 1, by txid 2) and three more keys: ``new`` created
        by txid 2, ``kept`` written by txid 2 and by this attempt, ``old`` written by txid 1.

        >>> from airflow_trident.state.map.backing import MemoryBackingMap
        >>> store = MemoryBackingMap()
        >>> store.multi_put(
        ...     [("total",), ("new",), ("kept",), ("old",)],
        ...     [OpaqueValue(2, 4, 1), OpaqueValue(2, 7), OpaqueValue(2, 5, 3), OpaqueValue(1, 3)],
        ... )
        >>> counts = OpaqueMap(store)
        >>> counts.begin_commit(2)
        >>> counts.revert_txid(2, keep=[("kept",)])
        2
        >>> counts.revert_txid(2, keep=[("kept",)])  # again: nothing left to revert
        0
        >>> counts.commit(2)
        >>> for key, value in sorted(store.items()):
        ...     print(key, value)
        ('kept',) OpaqueValue(curr_txid=2, curr=5, prev=3)
        ('old',) OpaqueValue(curr_txid=1, curr=3, prev=None)
        ('total',) OpaqueValue(curr_txid=2, curr=1, prev=1)
        """
        current = self._require_txid("revert_txid")
        if current != txid:
            msg = (
                f"state {self.name!r}: revert_txid({txid}) inside the commit of txid {current}; "
                f"hint: revert the txid being committed, after begin_commit({txid})"
            )
            raise StateError(msg)
        store = txid_index(self._backing)
        if store is None:
            self._warn_no_index()
            return 0
        kept = {tuple(k) for k in keep}
        candidates = [k for k in map(tuple, store.keys_at_txid(txid)) if k not in kept]
        if not candidates:
            return 0
        stored: list[Any] = store.multi_get(candidates)
        gone: list[Key] = []
        back: list[tuple[Key, OpaqueValue[Any]]] = []
        for key, value in zip(candidates, stored, strict=True):
            if not isinstance(value, OpaqueValue) or value.curr_txid != txid:
                continue
            if value.prev is None:
                gone.append(key)
            elif value.curr != value.prev:
                back.append((key, OpaqueValue(txid, value.prev, value.prev)))
        store.multi_delete(gone)
        if back:
            store.multi_put([k for k, _ in back], [v for _, v in back])
        return len(gone) + len(back)

    def _warn_no_index(self) -> None:
        store = type(self._backing).__name__
        with _WARNED_LOCK:
            if (self.name, store) in _WARNED:
                return
            _WARNED.add((self.name, store))
        log.warning(
            "state %r: its store %s cannot list keys by txid (TxidIndexedBackingMap): keys an "
            "earlier, failed attempt of a txid wrote and its replay does not write keep that "
            "attempt's values; per-key values are exact only if replays write the same keys. "
            "Hint: implement keys_at_txid and multi_delete in the store",
            self.name,
            store,
        )
