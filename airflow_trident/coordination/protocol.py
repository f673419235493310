"""The seam between the coordinator and where it keeps its bookkeeping.

:class:`CoordinatorStoreProtocol` is what :class:`~airflow_trident.coordination.coordinator.
TransactionalCoordinator` and the batch lifecycle need from a store. As kazoo hands out recipes,
a store hands out its parts, each with a narrow protocol of its own: ``runs``
(:class:`RunBindingsProtocol`: txid allocation and run binding), ``attempts``
(:class:`AttemptsProtocol`: attempts and commit markers), ``metas``
(:class:`BatchMetasProtocol`: per-spout metadata) and ``commits``
(:class:`CommittedTxidProtocol`: the committed txid, advanced by compare-and-set). The store
itself keeps only what spans them: each partitioned spout's own state (``partition_state``) and
rotation (``cleanup_before``). Two implementations: ZooKeeper
(:class:`~airflow_trident.coordination.store.CoordinatorStore`, whose ``nodes`` are also a
:class:`JsonNodesProtocol` for spouts' own state) and memory
(:class:`~airflow_trident.coordination.memory.MemoryCoordinatorStore`, in-process runs, rebuilds
and tests). Test harnesses wrap one to inject faults.

The flat names of before (``store.committed_txid()``) still resolve, through
:data:`FLAT_NAMES` and :func:`moved_to_part`, with a :class:`DeprecationWarning` naming the new
spelling (``store.commits.committed_txid()``); they go away in 0.2.0.

>>> from airflow_trident.coordination.memory import MemoryCoordinatorStore
>>> store = MemoryCoordinatorStore("wc")
>>> isinstance(store, CoordinatorStoreProtocol), isinstance(store.runs, RunBindingsProtocol)
(True, True)
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.spout.tx_state import PartitionState, TransactionWrite

__all__ = [
    "FLAT_NAMES",
    "AttemptsProtocol",
    "BatchMetasProtocol",
    "CommittedTxidProtocol",
    "CoordinatorStoreProtocol",
    "JsonNodesProtocol",
    "RunBindingsProtocol",
    "StorePaths",
    "moved_to_part",
]


class StorePaths(Protocol):
    """Where a store keeps a topology's nodes; only the topology's name is common."""

    @property
    def topology(self) -> str:
        """The topology's name."""
        ...


@runtime_checkable
class RunBindingsProtocol(Protocol):
    """Txids and the runs bound to them (``store.runs``)."""

    def current_txid(self) -> int:
        """The last allocated txid (0 before the first)."""
        ...

    def allocate_txid(self) -> int:
        """Allocate the next txid."""
        ...

    def txid_for_run(self, run_id: str) -> int | None:
        """The txid ``run_id`` is bound to, if any."""
        ...

    def runs_of_txid(self, txid: int) -> list[str]:
        """The run ids bound to ``txid`` (its first run and its replays), oldest first."""
        ...

    def bind_run(self, run_id: str, txid: int | None = None) -> int:
        """Bind ``run_id`` to a new txid, its existing one, or the allocated ``txid``."""
        ...

    def bind_new_run(self, run_id: str, txid: int) -> int:
        """Allocate exactly ``txid`` (the next one) and bind ``run_id`` to it."""
        ...


@runtime_checkable
class AttemptsProtocol(Protocol):
    """The attempts of txids and the markers of started commits (``store.attempts``)."""

    def attempt(self, txid: int) -> TransactionAttempt | None:
        """The current attempt of ``txid``, if it was begun."""
        ...

    def attempt_started_at(self, txid: int) -> datetime | None:
        """When the latest attempt of ``txid`` started, if known (the commit ledger keeps it)."""
        ...

    def next_attempt(self, txid: int) -> TransactionAttempt:
        """Record and return a new attempt of ``txid``."""
        ...

    def mark_commit_started(self, txid: int, shape: Mapping[str, Any] | None = None) -> bool:
        """Record that a commit of ``txid`` starts applying state (the first one also records
        the txid's ``shape``); return whether one had already started (state may then hold an
        earlier attempt's writes of ``txid``)."""
        ...

    def commit_shape(self, txid: int) -> dict[str, Any] | None:
        """The shape the first commit of ``txid`` started with (``None``: none recorded)."""
        ...


@runtime_checkable
class BatchMetasProtocol(Protocol):
    """Each spout's batch metadata per txid (``store.metas``)."""

    def put_meta(self, spout: str, txid: int, meta: Any, *, overwrite: bool = False) -> None:
        """Store ``spout``'s metadata for ``txid`` (fixed unless ``overwrite``)."""
        ...

    def get_meta(self, spout: str, txid: int) -> Any:
        """``spout``'s metadata for ``txid`` (``None`` if absent)."""
        ...

    def has_meta(self, spout: str, txid: int) -> bool:
        """Whether ``spout`` has metadata for ``txid``."""
        ...

    def latest_meta_before(self, spout: str, txid: int) -> tuple[int, Any] | None:
        """The newest ``(txid, metadata)`` of ``spout`` below ``txid``."""
        ...


@runtime_checkable
class CommittedTxidProtocol(Protocol):
    """The committed txid (``store.commits``)."""

    def committed_txid(self) -> int:
        """The last committed txid (0 before the first)."""
        ...

    def commit(
        self,
        txid: int,
        *,
        token: str | None = None,
        writes: Mapping[str, Any] | None = None,
        prepared: Sequence[TransactionWrite] = (),
    ) -> None:
        """Advance the committed txid ``txid - 1 -> txid`` by compare-and-set, with ``writes``
        and ``prepared`` (partition metadata of opaque spouts) in the same transaction."""
        ...


@runtime_checkable
class JsonNodesProtocol(Protocol):
    """JSON values at paths, for spouts' own state (the ZooKeeper store's ``nodes``)."""

    def read_json(self, path: str) -> Any:
        """The JSON value at ``path``, ``None`` when absent."""
        ...

    def write_json(self, path: str, value: Any) -> None:
        """Create or replace the JSON value at ``path``."""
        ...


@runtime_checkable
class CoordinatorStoreProtocol(Protocol):
    """The coordinator's bookkeeping for one topology: its parts, and what spans them (see the
    module docstring)."""

    @property
    def paths(self) -> StorePaths:
        """Names the topology (``paths.topology``)."""
        ...

    @property
    def runs(self) -> RunBindingsProtocol:
        """Txid allocation and run bindings."""
        ...

    @property
    def attempts(self) -> AttemptsProtocol:
        """Attempts and commit markers."""
        ...

    @property
    def metas(self) -> BatchMetasProtocol:
        """Per-spout batch metadata."""
        ...

    @property
    def commits(self) -> CommittedTxidProtocol:
        """The committed txid."""
        ...

    def cleanup_before(self, txid: int, *, runs_before: int | None = None) -> int:
        """Delete attempts and metadata below ``txid`` (run bindings below ``runs_before``,
        default ``txid``); the number of entries removed."""
        ...

    def partition_state(self, spout: str) -> PartitionState:
        """Where partitioned spout ``spout`` keeps its per-partition metadata."""
        ...


FLAT_NAMES: Mapping[str, str] = {
    **dict.fromkeys(
        (
            "current_txid",
            "allocate_txid",
            "txid_for_run",
            "runs_of_txid",
            "bind_run",
            "bind_new_run",
        ),
        "runs",
    ),
    **dict.fromkeys(
        ("attempt", "attempt_started_at", "next_attempt", "mark_commit_started", "commit_shape"),
        "attempts",
    ),
    **dict.fromkeys(("put_meta", "get_meta", "has_meta", "latest_meta_before"), "metas"),
    **dict.fromkeys(("committed_txid", "commit"), "commits"),
    **dict.fromkeys(("read_json", "write_json"), "nodes"),
}
"""The store's flat method names of before 0.2.0 -> the part that has the method now
(``store.commit(...)`` is ``store.commits.commit(...)``)."""


def moved_to_part(store: object, name: str) -> Any:
    """``store.<part>.<name>`` for a flat name of :data:`FLAT_NAMES`, with a
    :class:`DeprecationWarning` naming the new spelling; the ``__getattr__`` of the stores.

    Raises
    ------
    AttributeError
        If ``name`` is not a flat name, or ``store`` has no such part.

    >>> from airflow_trident.coordination.memory import MemoryCoordinatorStore
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     MemoryCoordinatorStore("wc").committed_txid()
    0
    >>> print(caught[0].message)
    MemoryCoordinatorStore.committed_txid() is deprecated and goes away in 0.2.0: call \
store.commits.committed_txid()
    """
    part_name = FLAT_NAMES.get(name)
    part = None if part_name is None else getattr(store, part_name, None)
    if part_name is None or part is None:
        msg = f"{type(store).__name__!r} object has no attribute {name!r}"
        raise AttributeError(msg, name=name, obj=store)
    warnings.warn(
        f"{type(store).__name__}.{name}() is deprecated and goes away in 0.2.0: call "
        f"store.{part_name}.{name}()",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(part, name)
