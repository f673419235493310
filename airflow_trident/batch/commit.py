"""The commit phase of a batch: verify what was staged, apply it in txid order, record it.

The order check and ZooKeeper's compare-and-set are the coordinator's
(:meth:`~airflow_trident.coordination.coordinator.TransactionalCoordinator.commit_applied_by`);
this phase gives it the writes: here, one state commit per staged partition
(:meth:`Commit.apply_staged`), or on Spark executors (a :class:`StagedBatchApplier`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from airflow_trident.batch.begin import Begin
from airflow_trident.batch.context import BatchContext
from airflow_trident.batch.process import Process
from airflow_trident.coordination.coordinator import BatchPlan
from airflow_trident.errors import BatchIncompleteError, ConfigurationError
from airflow_trident.runtime.local import run_commit_phase
from airflow_trident.runtime.result import Partitions, ProcessResult, StagedState
from airflow_trident.runtime.shape import batch_shape, check_replay_shape, shape_bound_states
from airflow_trident.spout.executor import PartitionedBatches
from airflow_trident.spout.opaque import StaleBatchError
from airflow_trident.state.bracket import apply_in_commit

__all__ = ["Commit", "MemoryBatch", "StagedBatchApplier"]

log = logging.getLogger(__name__)


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


class MemoryBatch:
    """A :class:`StagedBatchApplier` over a batch processed in this process (no staging):
    what :meth:`~airflow_trident.batch.steps.BatchSteps.run_batch` commits."""

    def __init__(self, commit: Commit, result: ProcessResult) -> None:
        self.commit = commit
        self.result = result

    def manifest(self) -> dict[str, Any]:
        """The parts of a manifest the commit summary and the txid's shape read."""
        return {
            "emitted": self.result.emitted,
            "states": {
                n: {"files": [{"rows": s.rows}], "partitions": max(1, len(s.partitions))}
                for n, s in self.result.staged.items()
            },
            "runtime": "local",
        }

    def apply_staged(
        self, plan: BatchPlan, manifest: Mapping[str, Any], *, revert: bool = True
    ) -> dict[str, Partitions]:
        return self.commit.apply_result(plan.txid, self.result.staged, revert=revert)

    def reprocess(self, txid: int) -> Mapping[str, Any]:
        _, self.result = self.commit.process.process_in_memory(txid)
        return self.manifest()


class Commit:
    """Commit a processed batch strictly after the one before it (over ``ctx``; the plan from
    ``begin``; a stale opaque batch processed again by ``process``). It is also the worker's
    :class:`StagedBatchApplier`: one state commit per staged partition, here."""

    def __init__(self, ctx: BatchContext, begin: Begin, process: Process) -> None:
        self.ctx = ctx
        self.begin = begin
        self.process = process

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
        if self.ctx.is_committed(txid):
            # before plan(): an old txid's attempt may have been rotated away (a cleared or
            # backfilled run of a committed txid must still succeed, changing nothing)
            self._record_if_missing(txid)
            return {
                "txid": txid,
                "applied": False,
                "reason": "already committed",
                "committed_txid": self.ctx.store.commits.committed_txid(),
            }
        plan = self.begin.plan(txid)
        manifest = self.ctx.staging.verified_manifest(plan.attempt, plan.metas)
        return self.commit_plan(plan, manifest, applier or self, reprocess_stale=reprocess_stale)

    def commit_plan(
        self,
        plan: BatchPlan,
        manifest: Mapping[str, Any],
        applier: StagedBatchApplier,
        *,
        reprocess_stale: bool,
    ) -> dict[str, Any]:
        """Apply ``plan`` through ``applier`` and advance the committed txid; a stale opaque
        batch is re-processed once (a new attempt) and committed again."""
        txid = plan.txid
        commit_phase: dict[str, int] = {}  # rows applied to states fed by new values

        def apply_batch() -> None:
            # state can hold an earlier attempt's writes of this txid only if an earlier commit
            # of it started: then (only) opaque keys it wrote and this one does not are reverted
            revert = self.start_commit(txid, manifest)
            new_values = applier.apply_staged(plan, manifest, revert=revert)
            commit_phase.update(self.apply_commit_phase(txid, new_values, revert=revert))

        try:
            with self._partitions_read_once():  # not around a re-processing: it writes them
                outcome = self.ctx.coordinator.commit_applied_by(plan, apply_batch)
                summary, archive = self._summary(plan, manifest, applied=outcome.applied)
        except StaleBatchError as exc:
            if not reprocess_stale:
                raise
            log.warning("%s; re-processing txid %d before its commit", exc, txid)
            applier.reprocess(txid)
            if isinstance(applier, MemoryBatch):  # nothing staged: commit from memory
                return self.commit_plan(
                    self.begin.plan(txid), applier.manifest(), applier, reprocess_stale=False
                )
            return self.commit(txid, applier=applier, reprocess_stale=False)
        summary["keys_written"].update(commit_phase)
        if outcome.applied and self.ctx.ledger is not None:
            self.ctx.ledger.record(summary, archive)
        # what a user reads first after a commit (XCom, log): where the topology stands now
        summary["committed_txid"] = (
            txid if outcome.applied else self.ctx.store.commits.committed_txid()
        )
        log.info("txid %d committed: %s", txid, summary)
        return summary

    @contextlib.contextmanager
    def _partitions_read_once(self) -> Iterator[None]:
        """The partitioned spouts' metadata read once for the commit step (the stale check, the
        committed value and the batch archive read the same values)."""
        with contextlib.ExitStack() as stack:
            for spout in self.ctx.coordinator.spouts.values():
                cached = getattr(getattr(spout, "state", None), "cached", None)
                if callable(cached):
                    stack.enter_context(cached())
            yield

    def apply_commit_phase(
        self,
        txid: int,
        new_values: Mapping[str, Partitions],
        *,
        revert: bool = True,
        only: frozenset[str] | None = None,
    ) -> dict[str, int]:
        """Run the streams reading states' new values (``new_values_stream``) in this process,
        applying each state they end in (each partition in its own state commit, under the
        same txid and rules as the states of the processing phase: a retried commit is a no-op
        for what it already wrote) before the txid's compare-and-set. ``only``: apply only
        these states (a rebuild's). Returns the rows applied per state."""
        applied: dict[str, int] = {}

        def apply(staged: StagedState) -> Partitions:
            if only is not None and staged.state not in only:
                return []
            applied[staged.state] = staged.rows
            return self.apply_result(txid, {staged.state: staged}, revert=revert)[staged.state]

        run_commit_phase(self.ctx.processor, txid, new_values, apply)
        return applied

    def start_commit(self, txid: int, manifest: Mapping[str, Any]) -> bool:
        """Record that a commit of ``txid`` starts applying ``manifest``'s batch, with the
        txid's shape (:mod:`~airflow_trident.runtime.shape`); return whether one had started
        before (state may then hold an earlier attempt's writes).

        Raises
        ------
        StateError
            If an earlier commit of ``txid`` started with another shape for a state that keeps
            its txids per commit partition (nothing is written).
        """
        plan = self.ctx.processor.plan
        shape = batch_shape(plan, manifest)
        started = self.ctx.store.attempts.mark_commit_started(txid, shape)
        if started:  # the first commit's shape, or nothing is written
            bound = shape_bound_states(plan)
            check_replay_shape(txid, self.ctx.store.attempts.commit_shape(txid), shape, bound)
        return started

    def _record_if_missing(self, txid: int) -> None:
        """A commit that died between ZooKeeper's compare-and-set and its ledger row: write the
        row from the staged batch, when it is still there (else the ledger keeps the hole)."""
        ledger = self.ctx.ledger
        if ledger is None or ledger.batch_meta(self.ctx.topology.name, txid) is not None:
            return
        try:
            plan = self.begin.plan(txid)
            manifest = self.ctx.staging.read_manifest(plan.attempt)
        except (BatchIncompleteError, ConfigurationError) as exc:
            log.warning("txid %d is committed but has no ledger row, and cannot get one: %s",
                        txid, exc)  # fmt: skip
            return
        summary, archive = self._summary(plan, manifest, applied=True)
        ledger.record(summary, archive)
        log.warning("txid %d was committed without its ledger row: recorded now", txid)

    def _summary(
        self, plan: BatchPlan, manifest: Mapping[str, Any], *, applied: bool
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The commit summary (XCom, logs, ledger) and the batch archive of ``plan``."""
        txid = plan.txid
        summary = {
            "topology": self.ctx.topology.name,
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
            # the run that commits it: the run bound to the txid most recently (a replay binds
            # later, and a committed txid's replay commits nothing)
            "run_id": plan.run_id or next(iter(self.ctx.store.runs.runs_of_txid(txid)[-1:]), None),
        }
        moment = self.ctx.store.attempts.attempt_started_at(txid) if applied else None
        if moment is not None:  # ISO 8601: the summary is an XCom
            summary["process_started_at"] = moment.isoformat()
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
        for name, spout in self.ctx.coordinator.spouts.items():
            entry: dict[str, Any] = {"meta": plan.metas[name]}
            if isinstance(spout, PartitionedBatches):
                entry["partitions"] = spout.batch_partitions(plan.txid, plan.metas[name])
            spouts[name] = entry
        return {"spouts": spouts}

    def reprocess(self, txid: int) -> Mapping[str, Any]:
        """Process ``txid`` again in-process (a new attempt) and stage it; its manifest."""
        return self.process.process_local(txid)

    def apply_staged(
        self, plan: BatchPlan, manifest: Mapping[str, Any], *, revert: bool | None = None
    ) -> dict[str, Partitions]:
        """Apply every staged partition of ``manifest`` here, each in its own state commit
        (without the compare-and-set of the committed txid); return the new values by state
        (the worker-side :class:`StagedBatchApplier`). ``revert=None``: record that a commit
        of the txid started, with its shape, and revert only if one had before (see
        :meth:`start_commit`, :meth:`apply_result`)."""
        if revert is None:
            revert = self.start_commit(plan.txid, manifest)
        return self.apply_result(plan.txid, self.ctx.staging.read_states(manifest), revert=revert)

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
            self.ctx.committer.revert_unwritten(txid, name, self.ctx.committer.written_keys(stage))
        states = self.ctx.committer.make_states(chosen)
        new_values: dict[str, Partitions] = {}
        for state, apply in self.ctx.committer.updates(chosen, states, new_values):
            apply_in_commit(txid, state, apply)
        return new_values
