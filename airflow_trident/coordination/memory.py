"""An in-memory stand-in for :class:`~airflow_trident.coordination.store.CoordinatorStore`.

Same rules (no txid gaps, fixed transactional metadata, compare-and-set commits), no ZooKeeper:
for tests and for running a topology in-process (:mod:`airflow_trident.runtime.local`).

>>> store = MemoryCoordinatorStore("wc")
>>> runs = store.runs
>>> runs.bind_run("r1"), runs.bind_run("r1"), store.attempts.next_attempt(1).attempt_id
(1, 1, 0)
>>> store.commits.commit(1); store.commits.committed_txid()
1
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.coordination.protocol import moved_to_part
from airflow_trident.coordination.store import encode_json, require_allocated
from airflow_trident.errors import (
    CommitConflictError,
    CommitOrderError,
    ConfigurationError,
    MetadataError,
)
from airflow_trident.names import validate_name
from airflow_trident.spout.tx_state import MemoryPartitionState, PartitionState, TransactionWrite

__all__ = [
    "MemoryAttempts",
    "MemoryBatchMetas",
    "MemoryCommittedTxid",
    "MemoryCoordinatorStore",
    "MemoryRunBindings",
]


@dataclass(frozen=True)
class _Paths:
    topology: str


@dataclass
class _Books:
    """What the parts of one :class:`MemoryCoordinatorStore` share, under one lock."""

    topology: str
    lock: threading.RLock = field(default_factory=threading.RLock)
    current: int = 0
    committed: int = 0
    attempts: dict[int, int] = field(default_factory=dict)
    attempt_times: dict[int, datetime] = field(default_factory=dict)
    meta: dict[str, dict[int, Any]] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)
    commits_started: dict[int, Any] = field(default_factory=dict)  # txid -> its first shape


class MemoryRunBindings:
    """Txids and the runs bound to them, in memory
    (:class:`~airflow_trident.coordination.protocol.RunBindingsProtocol`)."""

    def __init__(self, books: _Books) -> None:
        self._books = books

    def current_txid(self) -> int:
        return self._books.current

    def allocate_txid(self) -> int:
        b = self._books
        with b.lock:
            b.current += 1
            return b.current

    def txid_for_run(self, run_id: str) -> int | None:
        return self._books.runs.get(run_id)

    def runs_of_txid(self, txid: int) -> list[str]:
        """The run ids bound to ``txid``, in binding order (dicts keep insertion order)."""
        return [run for run, bound in self._books.runs.items() if bound == txid]

    def bind_run(self, run_id: str, txid: int | None = None) -> int:
        b = self._books
        with b.lock:
            if run_id in b.runs:
                if txid is not None and txid != b.runs[run_id]:
                    msg = f"run {run_id!r} is bound to txid {b.runs[run_id]}, not {txid}"
                    raise MetadataError(msg)
                return b.runs[run_id]
            if txid is not None:
                require_allocated(txid, b.current, topology=b.topology)
            b.runs[run_id] = txid if txid is not None else self.allocate_txid()
            return b.runs[run_id]

    def bind_new_run(self, run_id: str, txid: int) -> int:
        """Allocate exactly ``txid`` (the next txid) and bind ``run_id`` to it (see
        :meth:`RunBindings.bind_new_run <airflow_trident.coordination.runs.
        RunBindings.bind_new_run>`)."""
        b = self._books
        with b.lock:
            bound = b.runs.get(run_id)
            if bound is not None:
                if bound != txid:
                    msg = f"run {run_id!r} is bound to txid {bound}, not {txid}"
                    raise MetadataError(msg)
                return bound
            if txid != b.current + 1:
                msg = (
                    f"cannot allocate txid {txid} of topology {b.topology!r}: the next "
                    f"txid is {b.current + 1}; nothing was written"
                )
                raise ConfigurationError(msg)
            b.runs[run_id] = self.allocate_txid()
            return txid


class MemoryAttempts:
    """Attempts and commit markers, in memory
    (:class:`~airflow_trident.coordination.protocol.AttemptsProtocol`)."""

    def __init__(self, books: _Books) -> None:
        self._books = books

    def attempt(self, txid: int) -> TransactionAttempt | None:
        found = self._books.attempts.get(txid)
        return None if found is None else TransactionAttempt(txid, found)

    def next_attempt(self, txid: int) -> TransactionAttempt:
        b = self._books
        with b.lock:
            b.attempts[txid] = b.attempts.get(txid, -1) + 1
            b.attempt_times[txid] = datetime.now(UTC)
            return TransactionAttempt(txid, b.attempts[txid])

    def attempt_started_at(self, txid: int) -> datetime | None:
        with self._books.lock:
            return self._books.attempt_times.get(txid)

    def mark_commit_started(self, txid: int, shape: Mapping[str, Any] | None = None) -> bool:
        """Record that a commit of ``txid`` starts applying state (the first one's ``shape``
        with it); whether one had before."""
        b = self._books
        with b.lock:
            started = txid in b.commits_started
            b.commits_started.setdefault(txid, None if shape is None else dict(shape))
            return started

    def commit_shape(self, txid: int) -> dict[str, Any] | None:
        """The shape the first commit of ``txid`` started with (``None``: none recorded)."""
        with self._books.lock:
            shape = self._books.commits_started.get(txid)
            return None if shape is None else dict(shape)


class MemoryBatchMetas:
    """Each spout's batch metadata per txid, in memory
    (:class:`~airflow_trident.coordination.protocol.BatchMetasProtocol`)."""

    def __init__(self, books: _Books) -> None:
        self._books = books

    def put_meta(self, spout: str, txid: int, meta: Any, *, overwrite: bool = False) -> None:
        encode_json(meta, what=f"metadata of spout {spout!r} for txid {txid}")
        with self._books.lock:
            metas = self._books.meta.setdefault(spout, {})
            if txid in metas and metas[txid] != meta and not overwrite:
                msg = f"metadata of spout {spout!r} for txid {txid} is fixed and differs"
                raise MetadataError(msg)
            metas[txid] = copy.deepcopy(meta)

    def get_meta(self, spout: str, txid: int) -> Any:
        return copy.deepcopy(self._books.meta.get(spout, {}).get(txid))

    def has_meta(self, spout: str, txid: int) -> bool:
        return txid in self._books.meta.get(spout, {})

    def latest_meta_before(self, spout: str, txid: int) -> tuple[int, Any] | None:
        earlier = [t for t in self._books.meta.get(spout, {}) if t < txid]
        if not earlier:
            return None
        return max(earlier), self.get_meta(spout, max(earlier))


class MemoryCommittedTxid:
    """The committed txid, in memory
    (:class:`~airflow_trident.coordination.protocol.CommittedTxidProtocol`)."""

    def __init__(self, books: _Books) -> None:
        self._books = books

    def committed_txid(self) -> int:
        return self._books.committed

    def commit(
        self,
        txid: int,
        *,
        token: str | None = None,
        writes: Mapping[str, Any] | None = None,
        prepared: Sequence[TransactionWrite] = (),
    ) -> None:
        b = self._books
        with b.lock:
            if b.committed >= txid:
                msg = f"txid {txid} is already committed (committed txid is {b.committed})"
                raise CommitConflictError(msg)
            if b.committed != txid - 1:
                msg = f"cannot commit txid {txid}: txid {b.committed + 1} must commit first"
                raise CommitOrderError(msg)
            b.committed = txid


class MemoryCoordinatorStore:
    """Coordinator bookkeeping for one topology, in dicts: the parts ``runs``, ``attempts``,
    ``metas`` and ``commits`` share them."""

    def __init__(self, topology: str) -> None:
        self.paths = _Paths(validate_name(topology, kind="topology"))
        self._books = _Books(self.paths.topology)
        self._lock = self._books.lock
        self._partition_states: dict[str, MemoryPartitionState] = {}
        self.runs = MemoryRunBindings(self._books)
        self.attempts = MemoryAttempts(self._books)
        self.metas = MemoryBatchMetas(self._books)
        self.commits = MemoryCommittedTxid(self._books)

    if not TYPE_CHECKING:  # the checker holds callers to the parts

        def __getattr__(self, name: str) -> Any:
            """The flat names of before (``store.commit``), deprecated: see
            :data:`~airflow_trident.coordination.protocol.FLAT_NAMES`."""
            return moved_to_part(self, name)

    def cleanup_before(self, txid: int, *, runs_before: int | None = None) -> int:
        b = self._books
        with b.lock:
            removed = 0
            for t in [t for t in b.attempts if t < txid]:
                del b.attempts[t]
                b.attempt_times.pop(t, None)
                removed += 1
            for metas in b.meta.values():
                for t in sorted(t for t in metas if t < txid)[:-1]:
                    del metas[t]
                    removed += 1
            return removed

    def partition_state(self, spout: str) -> PartitionState:
        """Partitioned spout ``spout``'s per-partition metadata, in memory beside this."""
        with self._lock:
            return self._partition_states.setdefault(spout, MemoryPartitionState())
