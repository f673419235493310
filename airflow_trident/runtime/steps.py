"""The steps of one batch, as the Airflow tasks (and the Spark job) run them.

Each step is a method of :class:`BatchSteps`; each takes what the previous one left in ZooKeeper
and in the staging area, so steps can run in different processes and be retried alone:

* :meth:`BatchSteps.begin` binds the run to a txid and stores the batch metadata;
* :meth:`BatchSteps.emit` / :meth:`BatchSteps.process_local` emit the batch and run the
  processing phase (in-process here; ``runtime.spark_job`` does it on Spark) and stage results;
* :meth:`BatchSteps.commit` verifies the staged results and applies them in txid order;
* :meth:`BatchSteps.success` lets the spouts know and rotates old metadata and staging away.

Every step returns a small JSON summary (for XCom and logs).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any, Protocol

from airflow_trident.coordination.coordinator import BatchPlan, TransactionalCoordinator
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import BatchIncompleteError, BatchNotReadyError
from airflow_trident.runtime.commit import StateCommitter
from airflow_trident.runtime.ledger import CommitLedger
from airflow_trident.runtime.local import (
    LocalBatchProcessor,
    emit_partitions,
    run_commit_phase,
    topology_spouts,
)
from airflow_trident.runtime.result import Partitions
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.opaque import OpaquePartitionedSpoutExecutor, StaleBatchError
from airflow_trident.spout.partitioned import PartitionedTransactionalSpoutExecutor
from airflow_trident.topology import TridentTopology

__all__ = ["BatchSteps", "StagedBatchApplier"]

log = logging.getLogger(__name__)

Row = tuple[Any, ...]


class StagedBatchApplier(Protocol):
    """Applies a verified staged batch to the states: here (:class:`BatchSteps` itself) or on
    Spark executors (``airflow_trident.runtime.spark.commit.SparkBatchApplier``)."""

    def apply_staged(self, plan: BatchPlan, manifest: Mapping[str, Any]) -> dict[str, Partitions]:
        """Apply every staged partition in its own state commit; the new values by state."""
        ...

    def reprocess(self, txid: int) -> Mapping[str, Any]:
        """Process ``txid`` again (a new attempt) and stage it; return the manifest."""
        ...


class BatchSteps:
    """Begin, process, commit and success of one topology's batches.

    Parameters
    ----------
    topology:
        The topology.
    store:
        Its coordinator store (ZooKeeper in production).
    staging:
        Where processed batches are staged for their commit.
    keep_txids:
        How many recent txids keep their metadata and staging.
    ledger:
        Where committed batches are recorded (the state database), if anywhere.
    """

    def __init__(
        self,
        topology: TridentTopology,
        store: CoordinatorStore | MemoryCoordinatorStore,
        staging: StagingArea,
        *,
        keep_txids: int = 16,
        ledger: CommitLedger | None = None,
    ) -> None:
        self.topology = topology
        self.ledger = ledger
        self.store = store
        self.staging = staging
        self.keep_txids = keep_txids
        spouts = topology_spouts(topology, store)
        self.coordinator = TransactionalCoordinator(store, spouts, keep_txids=keep_txids)
        self.committer = StateCommitter(topology)

    # -- begin ----------------------------------------------------------------------------------

    def is_ready(self) -> bool:
        """Whether every spout is ready for the next batch."""
        return self.coordinator.is_ready()

    def begin(self, run_id: str, txid: int | None = None) -> dict[str, Any]:
        """Bind ``run_id`` to its txid (new, re-bound, or the replay of ``txid``)."""
        plan = self.coordinator.begin(run_id=run_id, txid=txid)
        return {
            "txid": plan.txid,
            "attempt_id": plan.attempt.attempt_id,
            "run_id": run_id,
            "metas": dict(plan.metas),
            "committed_txid": self.store.committed_txid(),
        }

    def plan(self, txid: int) -> BatchPlan:
        """The current attempt and metadata of ``txid``, as the begin step stored them.

        Raises
        ------
        BatchIncompleteError
            If ``txid`` was never begun.
        """
        attempt = self.store.attempt(txid)
        if attempt is None:
            msg = f"txid {txid} of topology {self.topology.name!r} was never begun; run begin"
            raise BatchIncompleteError(msg)
        metas = {name: self.store.get_meta(name, txid) for name in self.coordinator.spouts}
        return BatchPlan(attempt, metas)

    # -- process --------------------------------------------------------------------------------

    def emit(self, plan: BatchPlan, *, wait_s: float = 0.0) -> dict[str, dict[str, list[Row]]]:
        """Emit every spout's tuples of ``plan``, by source step and partition.

        A transactional partitioned spout emits in txid order: with ``wait_s`` the step waits
        that long for the previous txid to be emitted before giving up.
        """
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self._check_emit_order(plan.txid)
                return {
                    self.topology.spouts[name]: emit_partitions(self.coordinator, plan, name)
                    for name in self.coordinator.spouts
                }
            except BatchNotReadyError:
                if time.monotonic() >= deadline:
                    raise
                log.info("txid %d waits for txid %d to be emitted", plan.txid, plan.txid - 1)
                time.sleep(1.0)

    def new_attempt(self, txid: int) -> BatchPlan:
        """Start a new attempt of ``txid`` (every emit is one): its metadata and attempt id."""
        begun = self.plan(txid)
        return BatchPlan(self.store.next_attempt(txid), begun.metas)

    def _check_emit_order(self, txid: int) -> None:
        """A transactional partitioned spout's new batch starts where txid-1's ended: refuse
        to emit it before txid-1 was (pipelined process tasks)."""
        for name, spout in self.coordinator.spouts.items():
            if not isinstance(spout, PartitionedTransactionalSpoutExecutor) or txid == 1:
                continue
            if spout.emitted(txid) or not self.store.has_meta(name, txid - 1):
                continue  # a replay, or the spout's first batch
            if not spout.emitted(txid - 1):
                msg = (
                    f"txid {txid}: spout {name!r} cannot emit before txid {txid - 1} did (its "
                    f"ranges start where txid {txid - 1}'s end); retry once txid {txid - 1} "
                    f"was processed"
                )
                raise BatchNotReadyError(msg)

    def process_local(self, txid: int, *, wait_s: float = 0.0) -> dict[str, Any]:
        """Emit (a new attempt), process in-process and stage batch ``txid``; return the
        manifest."""
        plan = self.new_attempt(txid)
        sources = self.emit(plan, wait_s=wait_s)
        result = LocalBatchProcessor(self.topology).process(txid, sources)
        manifest = self.staging.write(plan.attempt, result, plan.metas)
        log.info(
            "txid %d attempt %d processed: %d records in, staged %s",
            txid,
            plan.attempt.attempt_id,
            result.records_in,
            {n: s.rows for n, s in result.staged.items()},
        )
        return manifest

    # -- commit ---------------------------------------------------------------------------------

    def commit(
        self,
        txid: int,
        *,
        applier: StagedBatchApplier | None = None,
        reprocess_stale: bool = True,
    ) -> dict[str, Any]:
        """Verify batch ``txid``'s staged results and apply them, strictly after ``txid - 1``.

        ``applier`` applies the staged partitions to the states: by default here, one state
        commit per partition (:meth:`apply_staged`); a Spark applier does it on executors. A
        txid already committed changes nothing (a cleared, committed run is a no-op). An
        opaque batch built on an earlier batch that was since re-emitted differently is
        re-processed (the applier's ``reprocess``, a new attempt) before it commits: no manual
        clearing.
        """
        applier = applier or self
        plan = self.plan(txid)
        if self.store.committed_txid() >= txid:
            return {"txid": txid, "applied": False, "reason": "already committed"}
        manifest = self.staging.verified_manifest(plan.attempt, plan.metas)
        new_values: dict[str, Partitions] = {}

        def apply_batch() -> None:
            new_values.update(applier.apply_staged(plan, manifest))

        try:
            outcome = self.coordinator.commit_applied_by(plan, apply_batch)
        except StaleBatchError as exc:
            if not reprocess_stale:
                raise
            log.warning("%s; re-processing txid %d before its commit", exc, txid)
            applier.reprocess(txid)
            return self.commit(txid, applier=applier, reprocess_stale=False)
        if outcome.applied:
            run_commit_phase(LocalBatchProcessor(self.topology), txid, new_values)
        summary = {
            "topology": self.topology.name,
            "txid": txid,
            "attempt_id": plan.attempt.attempt_id,
            "applied": outcome.applied,
            "records_in": sum(sum(p.values()) for p in manifest["emitted"].values()),
            "emitted": manifest["emitted"],
            "keys_written": {
                name: sum(f["rows"] for f in entry["files"])
                for name, entry in manifest["states"].items()
            },
            "metas": dict(plan.metas),
        }
        archive = self.archived_batch(plan)
        summary["partitions"] = {
            name: entry["partitions"]
            for name, entry in archive["spouts"].items()
            if "partitions" in entry
        }
        if outcome.applied and self.ledger is not None:
            self.ledger.record(summary, archive)
        log.info("txid %d committed: %s", txid, summary)
        return summary

    def archived_batch(self, plan: BatchPlan) -> dict[str, Any]:
        """What replays batch ``plan.txid`` later (kept in the ledger): each spout's metadata
        and, for partitioned spouts, each partition's."""
        spouts: dict[str, Any] = {}
        for name, spout in self.coordinator.spouts.items():
            entry: dict[str, Any] = {"meta": plan.metas[name]}
            if isinstance(
                spout, (PartitionedTransactionalSpoutExecutor, OpaquePartitionedSpoutExecutor)
            ):
                entry["partitions"] = spout.batch_partitions(plan.txid, plan.metas[name])
            spouts[name] = entry
        return {"spouts": spouts}

    def apply_staged(self, plan: BatchPlan, manifest: Mapping[str, Any]) -> dict[str, Partitions]:
        """Apply every staged partition of ``manifest`` here, each in its own state commit;
        return the new values by state (the worker-side :class:`StagedBatchApplier`)."""
        staged = self.staging.read_states(manifest)
        states = self.committer.make_states(staged)
        new_values: dict[str, Partitions] = {}
        for state, apply in self.committer.updates(staged, states, new_values):
            self.coordinator.apply_update(plan.txid, state, apply)
        return new_values

    def reprocess(self, txid: int) -> Mapping[str, Any]:
        """Process ``txid`` again in-process (a new attempt); return its manifest."""
        return self.process_local(txid)

    # -- success --------------------------------------------------------------------------------

    def success(self, txid: int) -> dict[str, Any]:
        """Tell the spouts ``txid`` committed; rotate old metadata and staging away."""
        removed = self.coordinator.success(txid)
        staged = self.staging.remove_before(txid - self.keep_txids + 1)
        return {"txid": txid, "znodes_removed": removed, "staged_txids_removed": staged}
