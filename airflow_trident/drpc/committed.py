"""Committed-only reads of a state for DRPC: the values as of the last committed txid.

A commit writes every state, one partition transaction after another, and only then advances
the committed txid in ZooKeeper. A query in between must not see the batch being committed (nor
an opaque batch half-applied). Commits are strictly ordered, so with ``C`` the committed txid
read from the coordinator, a stored value was written by a txid ``<= C + 1``, and:

==========================  ==================  ===================================================
stored value                stored txid         committed value
==========================  ==================  ===================================================
``TransactionalValue``      ``<= C``            ``val``
``TransactionalValue``      ``C + 1``           ``prev`` (absent if ``None``); unknown if the store
                                                does not keep it: :class:`DRPCCommitInProgressError`
``OpaqueValue``             ``<= C``            ``curr``
``OpaqueValue``             ``C + 1``           ``prev`` (absent if ``None``: C+1 created the key)
either                      ``> C + 1``         the snapshot moved (a later commit finished
                                                meanwhile): :class:`SnapshotMovedError`, read again
plain value                 (none kept)         the value (non-transactional state has no txid)
==========================  ==================  ===================================================

Examples
--------
>>> from airflow_trident.state.values import OpaqueValue, TransactionalValue
>>> committed_value(OpaqueValue(4, 10, 7), committed=3)   # txid 4 is being committed
7
>>> committed_value(OpaqueValue(3, 10, 7), committed=3)
10
>>> committed_value(TransactionalValue(4, 5, None, True), committed=3) is None  # new key
True
>>> committed_value(OpaqueValue(6, 1), committed=3)
Traceback (most recent call last):
...
airflow_trident.drpc.committed.SnapshotMovedError: stored txid 6 is beyond committed txid 3 + 1
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_trident.errors import DRPCCommitInProgressError, TridentError
from airflow_trident.runtime.repartition import stable_hash
from airflow_trident.state.base import Key
from airflow_trident.state.map.base import RuleMap
from airflow_trident.state.map.cached import CachedMap
from airflow_trident.state.map.snapshot import GLOBAL_KEY, SnapshottableMap
from airflow_trident.state.values import OpaqueValue, TransactionalValue

__all__ = [
    "CommittedMap",
    "CommittedSnapshot",
    "SnapshotMovedError",
    "committed_state",
    "committed_value",
]


class SnapshotMovedError(TridentError):
    """A value written beyond the committed txid + 1: a later commit finished while the request
    read; the request reads again at the new committed txid."""


def committed_value(stored: Any, committed: int | None, *, where: str = "") -> Any:
    """The value of ``stored`` as of committed txid ``committed`` (``None``: the latest).

    Raises
    ------
    SnapshotMovedError
        If ``stored`` was written beyond ``committed + 1`` (read again).
    DRPCCommitInProgressError
        If the commit of ``committed + 1`` wrote a transactional value whose previous value the
        store does not keep.
    """
    if isinstance(stored, TransactionalValue):
        txid, value = stored.txid, stored.val
    elif isinstance(stored, OpaqueValue):
        txid, value = stored.curr_txid, stored.curr
    else:
        return stored
    if committed is None or txid <= committed:
        return value
    if txid > committed + 1:
        msg = f"stored txid {txid} is beyond committed txid {committed} + 1"
        raise SnapshotMovedError(msg)
    if isinstance(stored, OpaqueValue):
        return stored.prev
    if stored.has_prev:
        return stored.prev
    msg = (
        f"{where or 'a key'} was written by txid {txid}, whose commit is in progress "
        f"(committed txid: {committed}), and the state does not keep the value before it; "
        f"hint: retry the request when the commit is done"
    )
    raise DRPCCommitInProgressError(msg)


def _store_of(state: Any) -> Any:
    """The store under a rule map (or a wrapper that exposes its ``backing``), without its
    cache (a cache in this process may hold values a later commit elsewhere replaced)."""
    store: Any = state.backing
    while isinstance(store, CachedMap):
        store = store.delegate
    return store


class CommittedMap:
    """A read-only map state answering with committed values only (``multi_get``), and, for
    :class:`~airflow_trident.operation.TupleCollectionGet`, the committed tuples of one query
    partition (``tuples``).

    Parameters
    ----------
    state:
        The state's rule map (made by its factory in the run's state database), or a wrapper
        of one exposing its ``backing`` store.
    committed:
        The committed txid the request reads at (``None``: the latest stored values).
    name:
        The state's name (for errors).
    partition_index, num_partitions:
        The query partition (``tuples`` yields the keys whose stable hash falls in it, so a
        broadcast over every partition yields each key once).
    """

    def __init__(
        self,
        state: Any,
        committed: int | None,
        *,
        name: str,
        partition_index: int = 0,
        num_partitions: int = 1,
    ) -> None:
        self._store = _store_of(state)
        self.committed = committed
        self.name = name
        self.partition_index = partition_index
        self.num_partitions = num_partitions

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        """The committed value of each key (``None`` where absent)."""
        stored = self._store.multi_get(keys)
        return [
            committed_value(v, self.committed, where=f"key {tuple(k)!r} of state {self.name!r}")
            for k, v in zip(keys, stored, strict=True)
        ]

    def tuples(self) -> list[tuple[Any, ...]]:
        """``key... + (value,)`` for every committed key of this query partition, sorted.

        Raises
        ------
        DRPCError
            If the state's store cannot list its keys.
        """
        items = getattr(self._store, "items", None)
        if not callable(items):
            from airflow_trident.errors import DRPCError

            msg = (
                f"state {self.name!r}: its store {type(self._store).__name__} cannot list its "
                f"keys, so TupleCollectionGet cannot read it; hint: query keys with MapGet"
            )
            raise DRPCError(msg)
        out: list[tuple[Any, ...]] = []
        n, index = self.num_partitions, self.partition_index
        for key, stored in items():
            key = tuple(key)
            if n > 1 and stable_hash(key) % n != index:
                continue
            value = committed_value(stored, self.committed, where=f"key {key!r}")
            if value is not None and key != GLOBAL_KEY:
                out.append((*key, value))
        return sorted(out, key=repr)


class CommittedSnapshot:
    """A read-only global value (an ungrouped ``persistent_aggregate``), committed only."""

    def __init__(self, committed_map: CommittedMap) -> None:
        self.map_state = committed_map

    def get(self) -> Any:
        """The committed value (``None`` before the first commit that wrote it)."""
        return self.map_state.multi_get([GLOBAL_KEY])[0]


def committed_state(
    state: Any,
    committed: int | None,
    *,
    name: str,
    partition_index: int = 0,
    num_partitions: int = 1,
) -> Any:
    """``state`` (as :func:`~airflow_trident.runtime.commit.query_state` returns it) read as of
    ``committed``; a state that is not a rule map (a user's ``StateUpdater`` state) is
    returned as is: only it knows how its values relate to txids. A wrapper of a rule map
    (a test harness's faulty state, say) counts as a rule map when it exposes ``backing``."""
    inner = state.map_state if isinstance(state, SnapshottableMap) else state
    if not isinstance(inner, RuleMap) and getattr(inner, "backing", None) is None:
        return state
    view = CommittedMap(
        inner,
        committed,
        name=name,
        partition_index=partition_index,
        num_partitions=num_partitions,
    )
    return CommittedSnapshot(view) if isinstance(state, SnapshottableMap) else view
