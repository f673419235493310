"""Trident's exactly-once value rules, as small frozen value types.

A *transactional* value keeps the txid of the batch that last changed it: a batch replayed with the
same txid (and, for transactional spouts, the same tuples) is skipped. An *opaque* value also keeps
the value before that batch, so a replayed txid whose tuples changed is recomputed from ``prev``.
A batch whose txid is *behind* the stored one is an error in both cases: commits are strictly
ordered, so it can only mean two topologies share a state, or a txid counter was reset.

Examples
--------
The seed's opaque example: value 4, previous 1, stored by txid 2; a partial count of 2 arrives.

>>> v = OpaqueValue(curr_txid=2, curr=4, prev=1)
>>> v.apply(3, lambda old: (old or 0) + 2)          # next batch: builds on curr
OpaqueValue(curr_txid=3, curr=6, prev=4)
>>> v.apply(2, lambda old: (old or 0) + 2)          # txid 2 replayed: recomputed from prev
OpaqueValue(curr_txid=2, curr=3, prev=1)

A transactional value ignores a replay of the txid that wrote it:

>>> t = TransactionalValue(txid=3, val=4)
>>> t.apply(3, lambda old: (old or 0) + 2)
TransactionalValue(txid=3, val=4)
>>> t.apply(4, lambda old: (old or 0) + 2)
TransactionalValue(txid=4, val=6)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from airflow_trident.errors import StateBehindError

__all__ = ["OpaqueValue", "TransactionalValue", "Updater", "apply_opaque", "apply_transactional"]

T = TypeVar("T")
Updater = Callable[[Any], Any]
"""Maps the value before a batch (``None`` when absent) to the value after it."""


def _behind(batch_txid: int, stored_txid: int, kind: str) -> StateBehindError:
    msg = (
        f"batch txid {batch_txid} is behind the {kind} state's txid {stored_txid}: commits are "
        f"strictly ordered, so the state was written by a later batch. Hint: two topologies may "
        f"share this state, or the coordinator's txids were reset; nothing was written"
    )
    return StateBehindError(msg)


@dataclass(frozen=True, slots=True)
class TransactionalValue(Generic[T]):
    """A value and the txid of the batch that last changed it (Trident's ``TransactionalValue``)."""

    txid: int
    val: T
    prev: T | None = field(default=None, repr=False, compare=False)
    """The value before batch :attr:`txid` (``None``: the key was absent), when
    :attr:`has_prev`; committed-only reads (DRPC) answer with it while the commit of
    :attr:`txid` is in progress. Not part of equality or ``repr``."""
    has_prev: bool = field(default=False, repr=False, compare=False)
    """Whether :attr:`prev` is known (a store that does not keep it leaves this ``False``)."""

    def apply(self, batch_txid: int, updater: Callable[[T], T]) -> TransactionalValue[T]:
        """Return the value after batch ``batch_txid``; ``self`` if that batch already applied.

        Raises
        ------
        StateBehindError
            If ``batch_txid`` is lower than :attr:`txid`.
        """
        if batch_txid == self.txid:
            return self
        if batch_txid < self.txid:
            raise _behind(batch_txid, self.txid, "transactional")
        return TransactionalValue(batch_txid, updater(self.val), self.val, True)

    def get(self, batch_txid: int | None) -> T:
        """The value as seen by batch ``batch_txid`` (``None`` reads the latest)."""
        if batch_txid is not None and batch_txid < self.txid:
            raise _behind(batch_txid, self.txid, "transactional")
        return self.val


@dataclass(frozen=True, slots=True)
class OpaqueValue(Generic[T]):
    """Current value, the txid that wrote it, and the value before (Trident's ``OpaqueValue``)."""

    curr_txid: int
    curr: T
    prev: T | None = None

    def get(self, batch_txid: int | None) -> T | None:
        """The value a batch must build on: ``curr`` for a later batch, ``prev`` for a replay.

        ``None`` as ``batch_txid`` reads the latest committed value (``curr``).

        Raises
        ------
        StateBehindError
            If ``batch_txid`` is lower than :attr:`curr_txid`.
        """
        if batch_txid is None or batch_txid > self.curr_txid:
            return self.curr
        if batch_txid == self.curr_txid:
            return self.prev
        raise _behind(batch_txid, self.curr_txid, "opaque")

    def update(self, batch_txid: int, new_val: T) -> OpaqueValue[T]:
        """Return the value after batch ``batch_txid`` stored ``new_val``."""
        if batch_txid > self.curr_txid:
            return OpaqueValue(batch_txid, new_val, self.curr)
        if batch_txid == self.curr_txid:
            return OpaqueValue(batch_txid, new_val, self.prev)
        raise _behind(batch_txid, self.curr_txid, "opaque")

    def apply(self, batch_txid: int, updater: Callable[[T | None], T]) -> OpaqueValue[T]:
        """Return the value after applying ``updater`` for batch ``batch_txid``."""
        return self.update(batch_txid, updater(self.get(batch_txid)))


def apply_transactional(
    stored: TransactionalValue[Any] | None, batch_txid: int, updater: Updater
) -> TransactionalValue[Any]:
    """Apply ``updater`` under the transactional rule; ``stored`` may be absent."""
    if stored is None:
        return TransactionalValue(batch_txid, updater(None), None, True)
    return stored.apply(batch_txid, updater)


def apply_opaque(
    stored: OpaqueValue[Any] | None, batch_txid: int, updater: Updater
) -> OpaqueValue[Any]:
    """Apply ``updater`` under the opaque rule; ``stored`` may be absent."""
    if stored is None:
        return OpaqueValue(batch_txid, updater(None), None)
    return stored.apply(batch_txid, updater)
