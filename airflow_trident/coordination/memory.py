"""An in-memory stand-in for :class:`~airflow_trident.coordination.store.CoordinatorStore`.

Same rules (no txid gaps, fixed transactional metadata, compare-and-set commits), no ZooKeeper:
for tests and for running a topology in-process (:mod:`airflow_trident.runtime.local`).

>>> store = MemoryCoordinatorStore("wc")
>>> store.bind_run("r1"), store.bind_run("r1"), store.next_attempt(1).attempt_id
(1, 1, 0)
>>> store.commit(1); store.committed_txid()
1
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.coordination.store import encode_json, require_allocated
from airflow_trident.errors import (
    CommitConflictError,
    CommitOrderError,
    ConfigurationError,
    MetadataError,
)
from airflow_trident.names import validate_name
from airflow_trident.spout.tx_state import MemoryPartitionState, PartitionState

__all__ = ["MemoryCoordinatorStore"]


@dataclass(frozen=True)
class _Paths:
    topology: str


class MemoryCoordinatorStore:
    """Coordinator bookkeeping for one topology, in a dict."""

    def __init__(self, topology: str) -> None:
        self.paths = _Paths(validate_name(topology, kind="topology"))
        self._lock = threading.RLock()
        self._current = 0
        self._committed = 0
        self._attempts: dict[int, int] = {}
        self._attempt_times: dict[int, datetime] = {}
        self._meta: dict[str, dict[int, Any]] = {}
        self._runs: dict[str, int] = {}
        self._partition_states: dict[str, MemoryPartitionState] = {}
        self._commits_started: dict[int, Any] = {}  # txid -> the shape its first commit had

    def current_txid(self) -> int:
        return self._current

    def allocate_txid(self) -> int:
        with self._lock:
            self._current += 1
            return self._current

    def txid_for_run(self, run_id: str) -> int | None:
        return self._runs.get(run_id)

    def runs_of_txid(self, txid: int) -> list[str]:
        """The run ids bound to ``txid``, in binding order (dicts keep insertion order)."""
        return [run for run, bound in self._runs.items() if bound == txid]

    def bind_run(self, run_id: str, txid: int | None = None) -> int:
        with self._lock:
            if run_id in self._runs:
                if txid is not None and txid != self._runs[run_id]:
                    msg = f"run {run_id!r} is bound to txid {self._runs[run_id]}, not {txid}"
                    raise MetadataError(msg)
                return self._runs[run_id]
            if txid is not None:
                require_allocated(txid, self._current, topology=self.paths.topology)
            self._runs[run_id] = txid if txid is not None else self.allocate_txid()
            return self._runs[run_id]

    def bind_new_run(self, run_id: str, txid: int) -> int:
        """Allocate exactly ``txid`` (the next txid) and bind ``run_id`` to it (see
        :meth:`CoordinatorStore.bind_new_run <airflow_trident.coordination.store.
        CoordinatorStore.bind_new_run>`)."""
        with self._lock:
            bound = self._runs.get(run_id)
            if bound is not None:
                if bound != txid:
                    msg = f"run {run_id!r} is bound to txid {bound}, not {txid}"
                    raise MetadataError(msg)
                return bound
            if txid != self._current + 1:
                msg = (
                    f"cannot allocate txid {txid} of topology {self.paths.topology!r}: the next "
                    f"txid is {self._current + 1}; nothing was written"
                )
                raise ConfigurationError(msg)
            self._runs[run_id] = self.allocate_txid()
            return txid

    def attempt(self, txid: int) -> TransactionAttempt | None:
        found = self._attempts.get(txid)
        return None if found is None else TransactionAttempt(txid, found)

    def next_attempt(self, txid: int) -> TransactionAttempt:
        with self._lock:
            self._attempts[txid] = self._attempts.get(txid, -1) + 1
            self._attempt_times[txid] = datetime.now(UTC)
            return TransactionAttempt(txid, self._attempts[txid])

    def attempt_started_at(self, txid: int) -> datetime | None:
        with self._lock:
            return self._attempt_times.get(txid)

    def put_meta(self, spout: str, txid: int, meta: Any, *, overwrite: bool = False) -> None:
        encode_json(meta, what=f"metadata of spout {spout!r} for txid {txid}")
        with self._lock:
            metas = self._meta.setdefault(spout, {})
            if txid in metas and metas[txid] != meta and not overwrite:
                msg = f"metadata of spout {spout!r} for txid {txid} is fixed and differs"
                raise MetadataError(msg)
            metas[txid] = copy.deepcopy(meta)

    def get_meta(self, spout: str, txid: int) -> Any:
        return copy.deepcopy(self._meta.get(spout, {}).get(txid))

    def has_meta(self, spout: str, txid: int) -> bool:
        return txid in self._meta.get(spout, {})

    def latest_meta_before(self, spout: str, txid: int) -> tuple[int, Any] | None:
        earlier = [t for t in self._meta.get(spout, {}) if t < txid]
        if not earlier:
            return None
        return max(earlier), self.get_meta(spout, max(earlier))

    def committed_txid(self) -> int:
        return self._committed

    def commit(
        self, txid: int, *, token: str | None = None, writes: Mapping[str, Any] | None = None
    ) -> None:
        with self._lock:
            if self._committed >= txid:
                msg = f"txid {txid} is already committed (committed txid is {self._committed})"
                raise CommitConflictError(msg)
            if self._committed != txid - 1:
                msg = f"cannot commit txid {txid}: txid {self._committed + 1} must commit first"
                raise CommitOrderError(msg)
            self._committed = txid

    def cleanup_before(self, txid: int, *, runs_before: int | None = None) -> int:
        with self._lock:
            removed = 0
            for t in [t for t in self._attempts if t < txid]:
                del self._attempts[t]
                self._attempt_times.pop(t, None)
                removed += 1
            for metas in self._meta.values():
                for t in sorted(t for t in metas if t < txid)[:-1]:
                    del metas[t]
                    removed += 1
            return removed

    def mark_commit_started(self, txid: int, shape: Mapping[str, Any] | None = None) -> bool:
        """Record that a commit of ``txid`` starts applying state (the first one's ``shape``
        with it); whether one had before."""
        with self._lock:
            started = txid in self._commits_started
            self._commits_started.setdefault(txid, None if shape is None else dict(shape))
            return started

    def commit_shape(self, txid: int) -> dict[str, Any] | None:
        """The shape the first commit of ``txid`` started with (``None``: none recorded)."""
        with self._lock:
            shape = self._commits_started.get(txid)
            return None if shape is None else dict(shape)

    def partition_state(self, spout: str) -> PartitionState:
        """Partitioned spout ``spout``'s per-partition metadata, in memory beside this."""
        with self._lock:
            return self._partition_states.setdefault(spout, MemoryPartitionState())
