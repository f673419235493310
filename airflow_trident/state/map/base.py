"""The :class:`MapState` contract and the commit bookkeeping shared by the three rule maps."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

from airflow_trident.errors import StateError
from airflow_trident.state.base import Key, StateType, check_same_length
from airflow_trident.state.combine import CombineOp
from airflow_trident.state.map.backing import BackingMap, CombiningBackingMap, CommitAware

__all__ = ["MapState", "RevertibleState", "RuleMap"]

Updater = Callable[[Any], Any]


@runtime_checkable
class MapState(Protocol):
    """Keyed state updated in the commit phase (Trident's ``MapState``)."""

    def begin_commit(self, txid: int) -> None:
        """Start applying batch ``txid``."""

    def commit(self, txid: int) -> None:
        """Make batch ``txid``'s updates durable."""

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        """Values of ``keys`` (``None`` where absent), as the current batch sees them."""

    def multi_update(self, keys: Sequence[Key], updaters: Sequence[Updater]) -> list[Any]:
        """Apply ``updaters[i]`` to the value of ``keys[i]``; return the new values."""

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        """Set the values of ``keys`` for the current batch."""

    def multi_combine(self, keys: Sequence[Key], deltas: Sequence[Any], op: CombineOp) -> None:
        """Fold partial aggregates into ``keys`` with a built-in combiner."""


@runtime_checkable
class RevertibleState(Protocol):
    """A state that can undo, inside the commit of ``txid``, what an earlier attempt of
    ``txid`` wrote to keys this attempt does not write (opaque state: see
    :meth:`~airflow_trident.state.map.opaque.OpaqueMap.revert_txid`)."""

    def revert_txid(self, txid: int, keep: Iterable[Key]) -> int:
        """Put the keys stored at ``txid``, except ``keep``, back to their value before
        ``txid``; return how many changed."""


class RuleMap:
    """Commit bookkeeping for a map over a :class:`BackingMap`; subclasses add one rule."""

    state_type: ClassVar[StateType]

    def __init__(self, backing: BackingMap, *, name: str = "state") -> None:
        self._backing = backing
        self.name = name
        self._txid: int | None = None

    @property
    def backing(self) -> BackingMap:
        """The store under this map."""
        return self._backing

    @property
    def current_txid(self) -> int | None:
        """The txid being committed, ``None`` between commits."""
        return self._txid

    def begin_commit(self, txid: int) -> None:
        """Start applying batch ``txid`` (opens the store's transaction, if it has one)."""
        if isinstance(self._backing, CommitAware):
            self._backing.begin_commit(txid)
        self._txid = txid

    def commit(self, txid: int) -> None:
        """Make batch ``txid``'s updates durable.

        Raises
        ------
        StateError
            If ``txid`` is not the txid given to :meth:`begin_commit`.
        """
        if self._txid != txid:
            msg = (
                f"state {self.name!r}: commit({txid}) without begin_commit({txid}) "
                f"(current: {self._txid}); hint: call begin_commit first"
            )
            raise StateError(msg)
        if isinstance(self._backing, CommitAware):
            self._backing.commit(txid)
        self._txid = None

    def rollback(self) -> None:
        """Discard the updates of the current commit (when the store is transactional)."""
        if isinstance(self._backing, CommitAware):
            self._backing.rollback()
        self._txid = None

    def _require_txid(self, operation: str) -> int:
        if self._txid is None:
            msg = (
                f"state {self.name!r}: {operation} outside a commit; hint: call "
                f"begin_commit(txid) first, updates belong to a batch"
            )
            raise StateError(msg)
        return self._txid

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        """Values of ``keys`` as the current batch sees them (``None`` where absent)."""
        raise NotImplementedError

    def multi_update(self, keys: Sequence[Key], updaters: Sequence[Updater]) -> list[Any]:
        """Apply ``updaters`` under this map's rule; nothing is written if any key fails."""
        raise NotImplementedError

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        """Set the values of ``keys`` for the current batch."""
        raise NotImplementedError

    def multi_combine(self, keys: Sequence[Key], deltas: Sequence[Any], op: CombineOp) -> None:
        """Fold ``deltas`` into ``keys`` with ``op``; the store does it when it can."""
        check_same_length(keys, deltas, f"state {self.name!r}: multi_combine")
        txid = self._require_txid("multi_combine")
        backing = self._backing
        if isinstance(backing, CombiningBackingMap) and backing.supports_combine(
            op, self.state_type
        ):
            backing.multi_combine(keys, deltas, op, self.state_type, txid)
            return
        folded: dict[Key, Any] = {}
        for key, delta in zip(map(tuple, keys), deltas, strict=True):
            folded[key] = op.combine(folded.get(key), delta) if key in folded else delta
        self.multi_update(list(folded), [_combiner(op, delta) for delta in folded.values()])


def _combiner(op: CombineOp, delta: Any) -> Updater:
    def update(old: Any) -> Any:
        return op.combine(old, delta)

    return update
