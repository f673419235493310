"""The seam between the coordinator and where it keeps its bookkeeping.

:class:`CoordinatorStoreProtocol` is what :class:`~airflow_trident.coordination.coordinator.
TransactionalCoordinator` and the batch lifecycle need from a store: txid allocation and run
binding, attempts, per-spout metadata, the committed txid (advanced by compare-and-set) and each
partitioned spout's own state. Two implementations: ZooKeeper
(:class:`~airflow_trident.coordination.store.CoordinatorStore`) and memory
(:class:`~airflow_trident.coordination.memory.MemoryCoordinatorStore`, in-process runs, rebuilds
and tests). Test harnesses wrap one to inject faults.

>>> from airflow_trident.coordination.memory import MemoryCoordinatorStore
>>> isinstance(MemoryCoordinatorStore("wc"), CoordinatorStoreProtocol)
True
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.spout.tx_state import PartitionState

__all__ = ["CoordinatorStoreProtocol", "StorePaths"]


class StorePaths(Protocol):
    """Where a store keeps a topology's nodes; only the topology's name is common."""

    @property
    def topology(self) -> str:
        """The topology's name."""
        ...


@runtime_checkable
class CoordinatorStoreProtocol(Protocol):
    """The coordinator's bookkeeping for one topology (see the module docstring)."""

    @property
    def paths(self) -> StorePaths:
        """Names the topology (``paths.topology``)."""
        ...

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

    def attempt(self, txid: int) -> TransactionAttempt | None:
        """The current attempt of ``txid``, if it was begun."""
        ...

    def next_attempt(self, txid: int) -> TransactionAttempt:
        """Record and return a new attempt of ``txid``."""
        ...

    def attempt_started_at(self, txid: int) -> datetime | None:
        """When the latest attempt of ``txid`` started, if known (the commit ledger keeps it)."""
        ...

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

    def committed_txid(self) -> int:
        """The last committed txid (0 before the first)."""
        ...

    def commit(
        self, txid: int, *, token: str | None = None, writes: Mapping[str, Any] | None = None
    ) -> None:
        """Advance the committed txid ``txid - 1 -> txid`` by compare-and-set, with ``writes``
        (partition metadata of opaque spouts) in the same transaction."""
        ...

    def cleanup_before(self, txid: int, *, runs_before: int | None = None) -> int:
        """Delete attempts and metadata below ``txid`` (run bindings below ``runs_before``,
        default ``txid``); the number of entries removed."""
        ...

    def mark_commit_started(self, txid: int, shape: Mapping[str, Any] | None = None) -> bool:
        """Record that a commit of ``txid`` starts applying state (the first one also records
        the txid's ``shape``); return whether one had already started (state may then hold an
        earlier attempt's writes of ``txid``)."""
        ...

    def commit_shape(self, txid: int) -> dict[str, Any] | None:
        """The shape the first commit of ``txid`` started with (``None``: none recorded)."""
        ...

    def partition_state(self, spout: str) -> PartitionState:
        """Where partitioned spout ``spout`` keeps its per-partition metadata."""
        ...
