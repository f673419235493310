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
from typing import Any

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
from airflow_trident.spout.opaque import StaleBatchError
from airflow_trident.spout.partitioned import PartitionedTransactionalSpoutExecutor
from airflow_trident.topology import TridentTopology

__all__ = ["BatchSteps"]

log = logging.getLogger(__name__)

Row = tuple[Any, ...]


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

    def commit(self, txid: int, *, reprocess_stale: bool = True) -> dict[str, Any]:
        """Verify batch ``txid``'s staged results and apply them, strictly after ``txid - 1``.

        A txid already committed changes nothing (a cleared, committed run is a no-op). An
        opaque batch built on an earlier batch that was since re-emitted differently is
        re-processed here (in-process, a new attempt) before it commits: no manual clearing.
        """
        plan = self.plan(txid)
        if self.store.committed_txid() >= txid:
            return {"txid": txid, "applied": False, "reason": "already committed"}
        manifest, staged = self.staging.read(plan.attempt, plan.metas)
        states = self.committer.make_states(staged)
        new_values: dict[str, Partitions] = {}
        updates = self.committer.updates(staged, states, new_values)
        try:
            outcome = self.coordinator.commit(plan, updates)
        except StaleBatchError as exc:
            if not reprocess_stale:
                raise
            log.warning("%s; re-processing txid %d before its commit", exc, txid)
            self.process_local(txid)
            return self.commit(txid, reprocess_stale=False)
        if outcome.applied:
            run_commit_phase(LocalBatchProcessor(self.topology), txid, new_values)
        keys = {name: sum(len(p) for p in s.partitions) for name, s in staged.items()}
        summary = {
            "topology": self.topology.name,
            "txid": txid,
            "attempt_id": plan.attempt.attempt_id,
            "applied": outcome.applied,
            "records_in": sum(sum(p.values()) for p in manifest["emitted"].values()),
            "emitted": manifest["emitted"],
            "keys_written": keys,
            "metas": dict(plan.metas),
        }
        if outcome.applied and self.ledger is not None:
            self.ledger.record(summary)
        log.info("txid %d committed: %s", txid, summary)
        return summary

    # -- success --------------------------------------------------------------------------------

    def success(self, txid: int) -> dict[str, Any]:
        """Tell the spouts ``txid`` committed; rotate old metadata and staging away."""
        removed = self.coordinator.success(txid)
        staged = self.staging.remove_before(txid - self.keep_txids + 1)
        return {"txid": txid, "znodes_removed": removed, "staged_txids_removed": staged}
