"""Opaque partitioned transactional spouts (Trident's ``IOpaquePartitionedTridentSpout``).

A replayed batch may differ (a partition may be unreadable, say), so the emitter does not re-emit
a fixed range: it resumes each partition from the metadata of the last *committed* batch (or of
the newest uncommitted batch before this one, when batches are pipelined) and returns where the
next batch starts. That metadata is stored only when the batch commits: the executor stages it
for this txid together with the metadata it started from, and the commit step writes it in the
same ZooKeeper transaction that advances the committed txid (:meth:`commit_writes`).

If batch N is re-emitted with different content, any later batch built on N's old end is *stale*:
:meth:`OpaquePartitionedSpoutExecutor.check_not_stale` refuses its commit so it is re-processed
(Trident fails every later batch for the same reason).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.errors import BatchFailedError, ConfigurationError
from airflow_trident.spout.base import (
    BatchCoordinator,
    Collector,
    Emitter,
    start_partition,
    use_progress,
)
from airflow_trident.spout.tx_state import PartitionState
from airflow_trident.state.base import StateType

__all__ = [
    "OpaqueCoordinator",
    "OpaqueEmitter",
    "OpaquePartitionedSpout",
    "OpaquePartitionedSpoutExecutor",
    "StaleBatchError",
]


class StaleBatchError(BatchFailedError):
    """A batch built on metadata that an earlier batch's replay changed; it must be re-emitted."""


@runtime_checkable
class OpaqueCoordinator(Protocol):
    """Says which partitions exist and whether a batch can start."""

    def get_partitions_for_batch(self) -> Any:
        """JSON description of the partitions (the batch metadata)."""

    def is_ready(self, txid: int) -> bool:
        """Whether batch ``txid`` can start now."""

    def close(self) -> None:
        """Release resources."""


@runtime_checkable
class OpaqueEmitter(Protocol):
    """Emits one partition's part of a batch and says where the next one starts."""

    def get_ordered_partitions(self, all_partition_info: Any) -> Sequence[str]:
        """Partition ids, in a stable order, from the coordinator's description."""

    def emit_partition_batch(
        self,
        attempt: TransactionAttempt,
        collector: Collector,
        partition: str,
        last_partition_meta: Any,
    ) -> Any:
        """Emit what follows ``last_partition_meta``; return the metadata the next batch needs."""

    def close(self) -> None:
        """Release resources."""


@runtime_checkable
class OpaquePartitionedSpout(Protocol):
    """A user's opaque partitioned spout."""

    @property
    def output_fields(self) -> tuple[str, ...]:
        """Names of the values of each emitted tuple."""

    def get_opaque_coordinator(self) -> OpaqueCoordinator:
        """A new coordinator."""

    def get_opaque_emitter(self) -> OpaqueEmitter:
        """A new emitter."""


class _Coordinator:
    def __init__(self, inner: OpaqueCoordinator, state: PartitionState) -> None:
        self._inner = inner
        self._state = state

    def initialize_transaction(self, txid: int, prev_meta: Any, curr_meta: Any) -> Any:
        with self._state.cached():  # each partition's start: read once
            return self._inner.get_partitions_for_batch()  # may change on a replay

    def is_ready(self, txid: int) -> bool:
        with self._state.cached():
            return self._inner.is_ready(txid)

    def success(self, txid: int) -> None:
        return None

    def close(self) -> None:
        self._inner.close()


class _Emitter:
    def __init__(self, executor: OpaquePartitionedSpoutExecutor, inner: OpaqueEmitter) -> None:
        self._executor = executor
        self._inner = inner

    def emit_batch(self, attempt: TransactionAttempt, meta: Any, collector: Collector) -> None:
        state = self._executor.state
        partitions = list(self._inner.get_ordered_partitions(meta))
        with state.cached():
            starts = self._executor.start_metas(partitions, attempt.txid)
            staged: dict[str, Any] = {}
            for partition in partitions:
                start_partition(collector, partition)
                start = starts[partition]
                end = self._inner.emit_partition_batch(attempt, collector, partition, start)
                staged[partition] = {"start": start, "end": end}
            if staged:
                state.put_many(attempt.txid, staged)

    def success(self, attempt: TransactionAttempt) -> None:
        return None

    def close(self) -> None:
        self._inner.close()


class OpaquePartitionedSpoutExecutor:
    """Turns an :class:`OpaquePartitionedSpout` into an opaque ``TridentSpout``."""

    kind = StateType.OPAQUE

    def __init__(self, spout: OpaquePartitionedSpout, state: PartitionState) -> None:
        self.spout = spout
        self.state = state

    @property
    def output_fields(self) -> tuple[str, ...]:
        return tuple(self.spout.output_fields)

    def get_coordinator(self) -> BatchCoordinator:
        inner = self.spout.get_opaque_coordinator()
        use_progress(inner, self.start_meta)
        return _Coordinator(inner, self.state)

    def get_emitter(self) -> Emitter:
        return _Emitter(self, self.spout.get_opaque_emitter())

    def start_meta(self, partition: str, txid: int) -> Any:
        """Where ``partition`` resumes for ``txid``: the end of the newest earlier staged batch,
        if it is not committed yet, else the committed metadata."""
        return self.start_metas([partition], txid)[partition]

    def start_metas(self, partitions: list[str], txid: int) -> dict[str, Any]:
        """:meth:`start_meta` of each of ``partitions`` (two reads for all of them)."""
        committed_all = self.state.committed_many(partitions)
        earlier_all = self.state.latest_before_many(partitions, txid)
        out: dict[str, Any] = {}
        for partition in partitions:
            committed = committed_all[partition] or {"txid": 0, "meta": None}
            earlier = earlier_all[partition]
            if earlier is None or earlier[0] <= committed["txid"]:
                out[partition] = committed["meta"]
                continue
            staged = earlier[1]
            if not isinstance(staged, dict) or "end" not in staged:
                msg = (
                    f"{type(self.spout).__name__}: partition {partition!r} of this stream holds "
                    f"batch metadata an opaque spout did not write (txid {earlier[0]}: a "
                    f"transactional spout's?); an opaque spout cannot take over a transactional "
                    f"stream's history. Hint: give the stream a new name, or see "
                    f'docs/runbook.md, "A transactional Kafka batch whose records are gone"'
                )
                raise ConfigurationError(msg)
            out[partition] = staged["end"]  # pipelined: build on the newest uncommitted batch
        return out

    def partitions(self, meta: Any) -> list[str]:
        """The partition ids of a batch whose coordinator metadata is ``meta``."""
        return list(self.spout.get_opaque_emitter().get_ordered_partitions(meta))

    def check_not_stale(self, txid: int, meta: Any) -> None:
        """Refuse to commit ``txid`` if a partition started from something other than the
        committed metadata (an earlier batch was replayed differently since).

        Raises
        ------
        StaleBatchError
            Naming the partition, what the batch started from and what is committed.
        """
        partitions = self.partitions(meta)
        staged_all = self.state.get_many(txid, partitions)
        committed_all = self.state.committed_many(partitions)
        for partition in partitions:
            staged = staged_all[partition]
            if staged is None:
                continue
            committed = (committed_all[partition] or {"meta": None})["meta"]
            if staged["start"] != committed:
                msg = (
                    f"opaque batch txid {txid} is stale: partition {partition!r} started from "
                    f"{staged['start']!r} but the committed metadata is {committed!r} (an earlier "
                    f"batch was re-emitted differently); re-process txid {txid} before commit"
                )
                raise StaleBatchError(msg)

    def batch_partitions(self, txid: int, meta: Any) -> dict[str, Any]:
        """Each partition's ``{"start", "end"}`` of batch ``txid`` (the batch archive keeps
        it, so the batch can be re-emitted from the same start later)."""
        return self.state.get_many(txid, self.partitions(meta))

    def restore_batch(self, txid: int, partitions: Mapping[str, Any]) -> None:
        """Make the next emit of ``txid`` start each partition where the archived batch did
        (from :meth:`batch_partitions`); an opaque source may give other tuples by now."""
        restored = {
            p: {"txid": txid - 1, "meta": staged["start"]}
            for p, staged in partitions.items()
            if staged is not None
        }
        if restored:
            self.state.put_committed_many(restored)

    def partitions_after(self, txid: int, meta: Any) -> dict[str, Any]:
        """Each partition's committed metadata (where its next batch starts) once batch
        ``txid`` (coordinator metadata ``meta``) committed; partitions without one are left
        out."""
        found = self.state.committed_many(self.partitions(meta))
        return {
            p: c["meta"]
            for p, c in found.items()
            if isinstance(c, dict) and c.get("meta") is not None
        }

    def committed_metas(self, txid: int, meta: Any) -> dict[str, Any]:
        """Partition -> committed value (``{"txid", "meta"}``) that batch ``txid`` leaves."""
        staged_all = self.state.get_many(txid, self.partitions(meta))
        return {
            p: {"txid": txid, "meta": staged["end"]}
            for p, staged in staged_all.items()
            if staged is not None
        }
