"""The lifecycle of a batch: the one place that runs begin, emit, process, commit and success.

Every way a batch runs goes through :class:`BatchSteps`: the Airflow tasks (through
:class:`~airflow_trident.hooks.trident.TridentHook`), the Spark job of the process and commit
steps (:mod:`airflow_trident.batch.spark_job`), the in-process runner
(:class:`~airflow_trident.runtime.local.LocalRunner`) and rebuilds
(:mod:`airflow_trident.batch.rebuild`). Each step takes what the previous one left in the
coordinator store and in the staging area, so steps can run in different processes and be
retried alone:

* :meth:`BatchSteps.begin` binds the run to a txid and stores the batch metadata;
* :meth:`BatchSteps.emit` / :meth:`BatchSteps.process_local` emit the batch (a new attempt) and
  run the processing phase (in-process here; ``runtime.spark_job`` does it on Spark) and stage
  results;
* :meth:`BatchSteps.commit` verifies the staged results and applies them in txid order
  (:meth:`BatchSteps.run_batch` does begin to success in-process, committing from memory);
* :meth:`BatchSteps.success` lets the spouts know and rotates old metadata and staging away.

The states live in the run's state database (``states``, a
:class:`~airflow_trident.state.binding.StateBinding`). Every step returns a small JSON summary
(for XCom and logs).

Examples
--------
>>> from airflow_trident.coordination.memory import MemoryCoordinatorStore
>>> from airflow_trident.operation import Count, Split
>>> from airflow_trident.spout.memory import MemoryTransactionalSpout
>>> from airflow_trident.state.memory import memory_state
>>> from airflow_trident.topology import TridentTopology
>>> t = TridentTopology("steps_doc")
>>> spout = MemoryTransactionalSpout({"p0": [("a b",), ("b",)]}, ["s"], take_per_batch=1)
>>> _ = (t.new_stream("lines", spout).each(["s"], Split(), ["w"]).group_by(["w"])
...      .persistent_aggregate(memory_state("steps_doc", "transactional"), Count(), ["n"],
...                            name="counts"))
>>> steps = BatchSteps(t, MemoryCoordinatorStore(t.name))
>>> [steps.run_batch().records_in for _ in range(2)]
[1, 1]
>>> steps.replay(1).committed  # a committed txid replayed changes nothing
False
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.coordination.coordinator import BatchPlan, TransactionalCoordinator
from airflow_trident.coordination.protocol import CoordinatorStoreProtocol
from airflow_trident.errors import BatchIncompleteError, BatchNotReadyError, ConfigurationError
from airflow_trident.graph import SpoutNode
from airflow_trident.runtime.commit import StateCommitter, query_state
from airflow_trident.runtime.local import LocalBatchProcessor, run_commit_phase
from airflow_trident.runtime.result import Partitions, ProcessResult, StagedState
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.base import TridentSpout
from airflow_trident.spout.executor import as_trident_spout
from airflow_trident.spout.opaque import OpaquePartitionedSpoutExecutor, StaleBatchError
from airflow_trident.spout.partitioned import PartitionedTransactionalSpoutExecutor
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.bracket import apply_in_commit
from airflow_trident.topology import TridentTopology

__all__ = ["BatchReport", "BatchSteps", "StagedBatchApplier", "topology_spouts"]

log = logging.getLogger(__name__)

Row = tuple[Any, ...]


def topology_spouts(
    topology: TridentTopology, store: CoordinatorStoreProtocol
) -> dict[str, TridentSpout]:
    """Every spout of ``topology`` as a ``TridentSpout``; partitioned spouts keep their
    per-partition metadata beside the coordinator's (``store.partition_state``)."""
    spouts: dict[str, TridentSpout] = {}
    for name, node_id in topology.spouts.items():
        node = topology.nodes[node_id]
        assert isinstance(node, SpoutNode)
        spouts[name] = as_trident_spout(node.spout, store.partition_state(name))
    return spouts


class StagedBatchApplier(Protocol):
    """Applies a verified staged batch to the states: here (:class:`BatchSteps` itself) or on
    Spark executors (``airflow_trident.runtime.spark.commit.SparkBatchApplier``)."""

    def apply_staged(
        self, plan: BatchPlan, manifest: Mapping[str, Any], *, revert: bool = True
    ) -> dict[str, Partitions]:
        """Apply every staged partition in its own state commit; the new values by state.
        ``revert``: first put back opaque keys an earlier attempt of the txid wrote and this
        one does not (only needed when an earlier commit of the txid started)."""
        ...

    def reprocess(self, txid: int) -> Mapping[str, Any]:
        """Process ``txid`` again (a new attempt) and stage it; return the manifest."""
        ...


@dataclass(frozen=True)
class BatchReport:
    """What one in-process batch did (:meth:`BatchSteps.run_batch`)."""

    txid: int
    attempt_id: int
    records_in: int
    staged_rows: Mapping[str, int]
    committed: bool


class _MemoryBatch:
    """A :class:`StagedBatchApplier` over a batch processed in this process (no staging)."""

    def __init__(self, steps: BatchSteps, result: ProcessResult) -> None:
        self.steps = steps
        self.result = result

    def manifest(self) -> dict[str, Any]:
        """The parts of a manifest the commit summary reads."""
        return {
            "emitted": self.result.emitted,
            "states": {n: {"files": [{"rows": s.rows}]} for n, s in self.result.staged.items()},
        }

    def apply_staged(
        self, plan: BatchPlan, manifest: Mapping[str, Any], *, revert: bool = True
    ) -> dict[str, Partitions]:
        return self.steps.apply_result(plan.txid, self.result.staged, revert=revert)

    def reprocess(self, txid: int) -> Mapping[str, Any]:
        _, self.result = self.steps.process_in_memory(txid)
        return self.manifest()


class BatchSteps:
    """Begin, process, commit and success of one topology's batches.

    Parameters
    ----------
    topology:
        The topology.
    store:
        Its coordinator store (ZooKeeper in production, memory in-process).
    staging:
        Where processed batches are staged for their commit (not needed to run batches
        in-process with :meth:`run_batch`).
    keep_txids:
        How many recent txids keep their metadata and staging.
    ledger:
        Where committed batches are recorded (the state database), if anywhere.
    states:
        The run's state database (default: each state factory's own).
    """

    def __init__(
        self,
        topology: TridentTopology,
        store: CoordinatorStoreProtocol,
        staging: StagingArea | None = None,
        *,
        keep_txids: int = 16,
        ledger: CommitLedger | None = None,
        states: StateBinding | None = None,
    ) -> None:
        self.topology = topology
        self.ledger = ledger
        self.store = store
        self._staging = staging
        self.keep_txids = keep_txids
        self.states = states or StateBinding()
        spouts = topology_spouts(topology, store)
        self.coordinator = TransactionalCoordinator(store, spouts, keep_txids=keep_txids)
        self.committer = StateCommitter(topology, self.states)
        self.processor = LocalBatchProcessor(topology, states=self.query_state)

    @property
    def staging(self) -> StagingArea:
        """The staging area (steps that run in separate processes need one)."""
        if self._staging is None:
            msg = (
                f"topology {self.topology.name!r}: this step stages the batch for a separate "
                f"commit, and these BatchSteps have no staging area; hint: pass staging="
                f"StagingArea(root, topology.name), or run the batch whole with run_batch()"
            )
            raise ConfigurationError(msg)
        return self._staging

    def query_state(self, name: str) -> Any:
        """The committed state ``name`` in the run's state database (for reading)."""
        return query_state(self.topology, name, self.states)

    # -- begin ----------------------------------------------------------------------------------

    def is_ready(self) -> bool:
        """Whether every spout is ready for the next batch."""
        return self.coordinator.is_ready()

    def begin(self, run_id: str | None, txid: int | None = None) -> dict[str, Any]:
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

    def pending_txid(self) -> int | None:
        """The oldest txid begun and not committed (a failed batch to retry), if any."""
        committed = self.store.committed_txid()
        return committed + 1 if self.store.current_txid() > committed else None

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
                    self.topology.spouts[name]: self.coordinator.emit_partitions(plan, name)
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

    def emit_ready(self, txid: int) -> bool:
        """Whether ``txid`` may be emitted now: every transactional partitioned spout emitted
        txid-1 already (or ``txid`` is a replay, or the spout's first batch)."""
        try:
            self._check_emit_order(txid)
        except BatchNotReadyError:
            return False
        return True

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

    def process_in_memory(
        self, txid: int, *, wait_s: float = 0.0
    ) -> tuple[BatchPlan, ProcessResult]:
        """Emit (a new attempt) and process batch ``txid`` in-process; nothing is staged."""
        plan = self.new_attempt(txid)
        sources = self.emit(plan, wait_s=wait_s)
        return plan, self.processor.process(txid, sources)

    def process_local(self, txid: int, *, wait_s: float = 0.0) -> dict[str, Any]:
        """Emit (a new attempt), process in-process and stage batch ``txid``; return the
        manifest."""
        plan, result = self.process_in_memory(txid, wait_s=wait_s)
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
        if self.store.committed_txid() >= txid:
            # before plan(): an old txid's attempt may have been rotated away (a cleared or
            # backfilled run of a committed txid must still succeed, changing nothing)
            self._record_if_missing(txid)
            return {
                "txid": txid,
                "applied": False,
                "reason": "already committed",
                "committed_txid": self.store.committed_txid(),
            }
        plan = self.plan(txid)
        manifest = self.staging.verified_manifest(plan.attempt, plan.metas)
        return self._commit(plan, manifest, applier or self, reprocess_stale, self.commit)

    def _commit(
        self,
        plan: BatchPlan,
        manifest: Mapping[str, Any],
        applier: StagedBatchApplier,
        reprocess_stale: bool,
        again: Callable[..., dict[str, Any]],
    ) -> dict[str, Any]:
        txid = plan.txid
        new_values: dict[str, Partitions] = {}

        def apply_batch() -> None:
            # state can hold an earlier attempt's writes of this txid only if an earlier commit
            # of it started: then (only) opaque keys it wrote and this one does not are reverted
            revert = self.store.mark_commit_started(txid)
            new_values.update(applier.apply_staged(plan, manifest, revert=revert))

        try:
            outcome = self.coordinator.commit_applied_by(plan, apply_batch)
        except StaleBatchError as exc:
            if not reprocess_stale:
                raise
            log.warning("%s; re-processing txid %d before its commit", exc, txid)
            applier.reprocess(txid)
            return again(txid, applier=applier, reprocess_stale=False)
        if outcome.applied:
            run_commit_phase(self.processor, txid, new_values)
        summary, archive = self._summary(plan, manifest, applied=outcome.applied)
        if outcome.applied and self.ledger is not None:
            self.ledger.record(summary, archive)
        # what a user reads first after a commit (XCom, log): where the topology stands now
        summary["committed_txid"] = txid if outcome.applied else self.store.committed_txid()
        log.info("txid %d committed: %s", txid, summary)
        return summary

    def _record_if_missing(self, txid: int) -> None:
        """A commit that died between ZooKeeper's compare-and-set and its ledger row: write the
        row from the staged batch, when it is still there (else the ledger keeps the hole)."""
        if self.ledger is None or self.ledger.batch_meta(self.topology.name, txid) is not None:
            return
        try:
            plan = self.plan(txid)
            manifest = self.staging.read_manifest(plan.attempt)
        except (BatchIncompleteError, ConfigurationError) as exc:
            log.warning("txid %d is committed but has no ledger row, and cannot get one: %s",
                        txid, exc)  # fmt: skip
            return
        summary, archive = self._summary(plan, manifest, applied=True)
        self.ledger.record(summary, archive)
        log.warning("txid %d was committed without its ledger row: recorded now", txid)

    def _summary(
        self, plan: BatchPlan, manifest: Mapping[str, Any], *, applied: bool
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The commit summary (XCom, logs, ledger) and the batch archive of ``plan``."""
        txid = plan.txid
        summary = {
            "topology": self.topology.name,
            "txid": txid,
            "attempt_id": plan.attempt.attempt_id,
            "applied": applied,
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
        return summary, archive

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

    def apply_staged(
        self, plan: BatchPlan, manifest: Mapping[str, Any], *, revert: bool | None = None
    ) -> dict[str, Partitions]:
        """Apply every staged partition of ``manifest`` here, each in its own state commit
        (without the compare-and-set of the committed txid); return the new values by state
        (the worker-side :class:`StagedBatchApplier`). ``revert=None``: record that a commit
        of the txid started and revert only if one had before (see :meth:`apply_result`)."""
        if revert is None:
            revert = self.store.mark_commit_started(plan.txid)
        return self.apply_result(plan.txid, self.staging.read_states(manifest), revert=revert)

    def apply_result(
        self,
        txid: int,
        staged: Mapping[str, StagedState],
        *,
        only: frozenset[str] | None = None,
        revert: bool = True,
    ) -> dict[str, Partitions]:
        """Apply batch ``txid``'s ``staged`` rows (of the states in ``only``, default all) to
        the states, each partition in its own state commit; return the new values by state.

        With ``revert``, an opaque state first gets back, for the keys an earlier attempt of
        ``txid`` wrote and this one does not, its value before ``txid``
        (:meth:`~airflow_trident.runtime.commit.StateCommitter.revert_unwritten`).
        """
        chosen = {n: s for n, s in staged.items() if only is None or n in only}
        for name, stage in chosen.items() if revert else ():
            self.committer.revert_unwritten(txid, name, self.committer.written_keys(stage))
        states = self.committer.make_states(chosen)
        new_values: dict[str, Partitions] = {}
        for state, apply in self.committer.updates(chosen, states, new_values):
            apply_in_commit(txid, state, apply)
        return new_values

    def reprocess(self, txid: int) -> Mapping[str, Any]:
        """Process ``txid`` again in-process (a new attempt); return its manifest."""
        return self.process_local(txid)

    # -- success --------------------------------------------------------------------------------

    def success(self, txid: int) -> dict[str, Any]:
        """Tell the spouts ``txid`` committed; rotate old metadata and staging away."""
        removed = self.coordinator.success(txid)
        staged = 0
        if self._staging is not None:
            staged = self._staging.remove_before(txid - self.keep_txids + 1)
        return {"txid": txid, "znodes_removed": removed, "staged_txids_removed": staged}

    # -- a whole batch, in-process --------------------------------------------------------------

    def run_batch(self, run_id: str | None = None, *, txid: int | None = None) -> BatchReport:
        """Begin, emit, process, commit and succeed one batch in this process.

        Without ``run_id`` and ``txid`` it retries the oldest txid begun and not committed (a
        batch that failed), as the coordinator does, else begins a new one. A ``run_id`` re-binds
        that run's txid; ``txid`` replays an allocated txid (a committed one changes nothing).
        If a step fails, the txid stays uncommitted and the next call retries it.
        """
        if run_id is None and txid is None:
            txid = self.pending_txid()
            if txid is not None:
                log.info("topology %s: retrying txid %d", self.topology.name, txid)
        txid = int(self.begin(run_id, txid)["txid"])
        if self.store.committed_txid() >= txid:
            plan = self.plan(txid)
            log.info("topology %s: txid %d already committed", self.topology.name, txid)
            return BatchReport(txid, plan.attempt.attempt_id, 0, {}, committed=False)
        plan = self.plan(txid)  # the attempt the begin recorded
        result = self.processor.process(txid, self.emit(plan))
        batch = _MemoryBatch(self, result)

        def again(t: int, **kwargs: Any) -> dict[str, Any]:
            return self._commit(self.plan(t), batch.manifest(), batch, False, again)

        summary = self._commit(plan, batch.manifest(), batch, True, again)
        self.success(txid)
        result = batch.result
        log.info(
            "topology %s: txid %d done (%d records in)",
            self.topology.name,
            txid,
            result.records_in,
        )
        return BatchReport(
            txid,
            int(summary["attempt_id"]),
            result.records_in,
            {n: s.rows for n, s in result.staged.items()},
            bool(summary["applied"]),
        )

    def replay(self, txid: int) -> BatchReport:
        """Run allocated txid ``txid`` again (a committed one changes nothing)."""
        return self.run_batch(txid=txid)
