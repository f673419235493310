"""Partitioned transactional spouts (Trident's ``IPartitionedTridentSpout``).

A batch reads a range of every partition. The range a partition gets for a txid is fixed the first
time the txid is emitted and re-emitted exactly on every replay, so a transactional state can skip
a replayed txid. :class:`PartitionedTransactionalSpoutExecutor` does that bookkeeping around the
user's coordinator and emitter.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.errors import BatchNotReadyError
from airflow_trident.spout.base import (
    BatchCoordinator,
    Collector,
    Emitter,
    start_partition,
    use_progress,
)
from airflow_trident.spout.tx_state import PartitionState
from airflow_trident.state.base import StateType

log = logging.getLogger(__name__)

__all__ = [
    "PartitionedCoordinator",
    "PartitionedEmitter",
    "PartitionedTransactionalSpout",
    "PartitionedTransactionalSpoutExecutor",
]


@runtime_checkable
class PartitionedCoordinator(Protocol):
    """Says which partitions exist and whether a batch can start."""

    def get_partitions_for_batch(self) -> Any:
        """JSON description of the partitions (the batch metadata)."""

    def is_ready(self, txid: int) -> bool:
        """Whether batch ``txid`` can start now."""

    def close(self) -> None:
        """Release resources."""


@runtime_checkable
class PartitionedEmitter(Protocol):
    """Emits one partition's part of a batch."""

    def get_ordered_partitions(self, all_partition_info: Any) -> Sequence[str]:
        """Partition ids, in a stable order, from the coordinator's description."""

    def emit_partition_batch_new(
        self,
        attempt: TransactionAttempt,
        collector: Collector,
        partition: str,
        last_partition_meta: Any,
    ) -> Any:
        """Emit a new batch of ``partition`` after ``last_partition_meta``; return its metadata."""

    def emit_partition_batch(
        self, attempt: TransactionAttempt, collector: Collector, partition: str, partition_meta: Any
    ) -> None:
        """Re-emit exactly the batch of ``partition`` described by ``partition_meta``."""

    def close(self) -> None:
        """Release resources."""


@runtime_checkable
class PartitionedTransactionalSpout(Protocol):
    """A user's partitioned transactional spout."""

    @property
    def output_fields(self) -> tuple[str, ...]:
        """Names of the values of each emitted tuple."""

    def get_partitioned_coordinator(self) -> PartitionedCoordinator:
        """A new coordinator."""

    def get_partitioned_emitter(self) -> PartitionedEmitter:
        """A new emitter."""


_SKIPPED = "__trident_skipped__"
EMITTED = "__trident_emitted__"
"""Pseudo-partition marking that every partition of a txid was emitted."""


def _unskipped(meta: Any) -> Any:
    """A partition's metadata of a batch, or where it stood when the batch skipped it."""
    return meta["last"] if isinstance(meta, dict) and meta.get(_SKIPPED) else meta


class _Coordinator:
    def __init__(self, inner: PartitionedCoordinator, state: PartitionState) -> None:
        self._inner = inner
        self._state = state

    def initialize_transaction(self, txid: int, prev_meta: Any, curr_meta: Any) -> Any:
        if curr_meta is not None:  # a replay: the partitions of this txid are fixed
            return curr_meta
        with self._state.cached():  # each partition's progress: read once
            meta = self._inner.get_partitions_for_batch()
        self._report_away(txid, prev_meta, meta)
        return meta

    def _report_away(self, txid: int, prev_meta: Any, meta: Any) -> None:
        """Log the partitions of the previous batch that this one does not list (renamed
        away, behind a broken link or mount): they take nothing until they are back."""
        if not isinstance(prev_meta, dict) or not isinstance(meta, dict):
            return
        before, now = prev_meta.get("partitions"), meta.get("partitions")
        if not isinstance(before, list) or not isinstance(now, list):
            return
        away = sorted(set(map(str, before)) - set(map(str, now)))
        if away:
            log.warning(
                "txid %d: partitions %s of the previous batch are not listed now (renamed away, "
                "removed, or behind a broken link or mount?); they take nothing in this batch "
                "and, once back, resume right after their last emitted batch",
                txid, away,
            )  # fmt: skip

    def is_ready(self, txid: int) -> bool:
        with self._state.cached():
            return self._inner.is_ready(txid)

    def success(self, txid: int) -> None:
        return None

    def close(self) -> None:
        self._inner.close()


class _Emitter:
    def __init__(
        self, inner: PartitionedEmitter, state: PartitionState, pending: dict[int, dict[str, Any]]
    ) -> None:
        self._inner = inner
        self._state = state
        self._pending = pending

    def emit_batch(self, attempt: TransactionAttempt, meta: Any, collector: Collector) -> None:
        """Re-emit each partition's fixed range of the txid, emit new ones after each
        partition's previous batch; the new ranges and the emitted mark are stored at the end,
        in one write (a failed emit fixes nothing)."""
        txid = attempt.txid
        partitions = list(self._inner.get_ordered_partitions(meta))
        with self._state.cached():
            stored = self._state.get_many(txid, [*partitions, EMITTED])
            new = [p for p in partitions if stored[p] is None]
            lasts = self._previous(new, txid) if new else {}
            written = self._pending.setdefault(txid, {})
            try:
                self._emit_each(attempt, collector, partitions, stored, lasts, written)
                if written or stored[EMITTED] is None:
                    self._state.put_many(txid, {**written, EMITTED: True})
            finally:
                self._pending.pop(txid, None)

    def _emit_each(
        self,
        attempt: TransactionAttempt,
        collector: Collector,
        partitions: list[str],
        stored: dict[str, Any],
        lasts: dict[str, Any],
        written: dict[str, Any],
    ) -> None:
        """Emit each partition; ``written`` gets the new ranges as they are emitted (what the
        spout's ``progress`` sees of this txid before they are stored)."""
        for partition in partitions:
            start_partition(collector, partition)
            fixed = stored[partition]
            if isinstance(fixed, dict) and fixed.get(_SKIPPED):
                continue  # this txid emitted nothing from the partition; a replay neither
            if fixed is not None:
                self._inner.emit_partition_batch(attempt, collector, partition, fixed)
                continue
            last = lasts[partition]
            got = self._inner.emit_partition_batch_new(attempt, collector, partition, last)
            written[partition] = {_SKIPPED: True, "last": last} if got is None else got

    def _previous(self, partitions: list[str], txid: int) -> dict[str, Any]:
        """Where each partition's batch of ``txid`` starts: its newest batch before ``txid``,
        once ``txid - 1`` was emitted (a partition absent from some batches, away for a while,
        resumes after its last one)."""
        earlier = self._state.latest_before_many(partitions, txid)
        out: dict[str, Any] = {}
        for partition in partitions:
            found = earlier[partition]
            if found is None or found[0] == txid - 1:
                out[partition] = None if found is None else _unskipped(found[1])
                continue
            if self._state.get_many(txid - 1, [EMITTED])[EMITTED] is None:
                msg = (
                    f"txid {txid}: partition {partition!r} cannot be emitted before txid "
                    f"{txid - 1} is (its newest emitted batch is txid {found[0]}, and txid "
                    f"{txid - 1} has not been emitted); a transactional partitioned spout emits "
                    f"in txid order. Hint: retry once txid {txid - 1} was emitted"
                )
                raise BatchNotReadyError(msg)
            out[partition] = _unskipped(found[1])
        return out

    def success(self, attempt: TransactionAttempt) -> None:
        return None

    def close(self) -> None:
        self._inner.close()


class PartitionedTransactionalSpoutExecutor:
    """Turns a :class:`PartitionedTransactionalSpout` into a transactional ``TridentSpout``.

    ``state`` keeps each partition's metadata per txid (ZooKeeper in production, see
    :class:`airflow_trident.coordination.spout_state.ZkPartitionState`).
    """

    kind = StateType.TRANSACTIONAL

    def __init__(self, spout: PartitionedTransactionalSpout, state: PartitionState) -> None:
        self.spout = spout
        self.state = state
        self._pending: dict[int, dict[str, Any]] = {}  # txid -> ranges emitted, not yet stored

    @property
    def output_fields(self) -> tuple[str, ...]:
        return tuple(self.spout.output_fields)

    def get_coordinator(self) -> BatchCoordinator:
        inner = self.spout.get_partitioned_coordinator()
        use_progress(inner, self.progress)
        return _Coordinator(inner, self.state)

    def progress(self, partition: str, txid: int) -> Any:
        """The metadata of ``partition``'s newest batch emitted before ``txid`` (where its
        next new batch starts); ``None`` before its first."""
        earlier = self.state.latest_before(partition, txid)
        for emitting, metas in list(self._pending.items()):  # emitted, not yet stored
            if (
                emitting < txid
                and partition in metas
                and (earlier is None or earlier[0] <= emitting)
            ):
                earlier = (emitting, metas[partition])
        if earlier is None:
            return None
        return _unskipped(earlier[1])

    def get_emitter(self) -> Emitter:
        inner = self.spout.get_partitioned_emitter()
        use_progress(inner, self.progress)  # e.g. a schema known from the other partitions
        return _Emitter(inner, self.state, self._pending)

    def emitted(self, txid: int) -> bool:
        """Whether batch ``txid`` was emitted (its partition ranges are fixed)."""
        return self.state.get(EMITTED, txid) is not None

    def batch_partitions(self, txid: int, meta: Any) -> dict[str, Any]:
        """Each partition's fixed metadata of emitted batch ``txid`` (the batch archive keeps
        it, so the batch can be replayed after ZooKeeper rotated it away)."""
        partitions = self.spout.get_partitioned_emitter().get_ordered_partitions(meta)
        return self.state.get_many(txid, partitions)

    def partitions_after(self, txid: int, meta: Any) -> dict[str, Any]:
        """Each partition's metadata once batch ``txid`` (coordinator metadata ``meta``)
        committed: its newest batch up to ``txid`` (a partition the batch skipped: its batch
        before); partitions without a batch yet are left out."""
        partitions = self.spout.get_partitioned_emitter().get_ordered_partitions(meta)
        earlier = self.state.latest_before_many(partitions, txid + 1)
        return {p: _unskipped(found[1]) for p, found in earlier.items() if found is not None}

    def restore_batch(self, txid: int, partitions: Mapping[str, Any]) -> None:
        """Make the next emit of ``txid`` replay exactly ``partitions`` (from
        :meth:`batch_partitions`)."""
        kept = {p: m for p, m in partitions.items() if m is not None}
        if kept:
            self.state.put_many(txid, kept)
