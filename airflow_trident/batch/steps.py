"""The lifecycle of a batch: the one place that runs begin, emit, process, commit and success.

Every way a batch runs goes through :class:`BatchSteps`: the Airflow tasks (through
:class:`~airflow_trident.hooks.trident.TridentHook`), the Spark job of the process and commit
steps (:mod:`airflow_trident.batch.spark_job`), the in-process runner
(:class:`~airflow_trident.runtime.local.LocalRunner`) and rebuilds
(:mod:`airflow_trident.batch.rebuild`). Each step takes what the previous one left in the
coordinator store and in the staging area, so steps can run in different processes and be
retried alone:

The phases are small objects of their own, composed here over one shared
:class:`~airflow_trident.batch.context.BatchContext` (no inheritance between them) and handed
out as parts: ``steps.begins`` (:class:`~airflow_trident.batch.begin.Begin`),
``steps.processing`` (:class:`~airflow_trident.batch.process.Process`), ``steps.commits``
(:class:`~airflow_trident.batch.commit.Commit`), ``steps.ctx``; this class keeps the entry
points, adds success and whole in-process batches (:meth:`BatchSteps.run_batch`, ordered by the
lifecycle driver, :mod:`airflow_trident.batch.driver`, which also decides where a retried task
resumes). How a phase reaches Spark (in the worker, on Connect, by ``spark-submit``) is a
route: :mod:`airflow_trident.batch.routes`.

* :meth:`BatchSteps.begin` binds the run to a txid and stores the batch metadata;
* :meth:`BatchSteps.emit` / :meth:`BatchSteps.process_local` emit the batch (a new attempt) and
  run the processing phase (in-process here; ``batch.spark_job`` does it on Spark) and stage
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
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.batch.begin import Begin
from airflow_trident.batch.commit import Commit, MemoryBatch, StagedBatchApplier
from airflow_trident.batch.context import BatchContext, Row, topology_spouts
from airflow_trident.batch.driver import BatchRun, Done, Handler, drive, resume_point
from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.process import Process
from airflow_trident.coordination.coordinator import BatchPlan
from airflow_trident.coordination.protocol import CoordinatorStoreProtocol
from airflow_trident.errors import BatchIncompleteError
from airflow_trident.runtime.result import Partitions
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.lag import Lag
from airflow_trident.state.binding import StateBinding
from airflow_trident.topology import TridentTopology

__all__ = ["BatchReport", "BatchSteps", "StagedBatchApplier", "topology_spouts"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchReport:
    """What one in-process batch did (:meth:`BatchSteps.run_batch`)."""

    txid: int
    attempt_id: int
    records_in: int
    staged_rows: Mapping[str, int]
    committed: bool


class BatchSteps:
    """Begin, process, commit and success of one topology's batches (parameters: see
    :class:`~airflow_trident.batch.context.BatchContext`), composed of the three phases."""

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
        self.ctx = BatchContext(
            topology, store, staging, keep_txids=keep_txids, ledger=ledger, states=states
        )
        #: the phases, handed out as parts: ``steps.begins.new_attempt(txid)``,
        #: ``steps.processing.run(txid, stager)``, ``steps.commits.apply_result(...)``
        self.begins = Begin(self.ctx)
        self.processing = Process(self.ctx, self.begins)
        self.commits = Commit(self.ctx, self.begins, self.processing)
        #: what the phases share (also on :attr:`ctx`: the coordinator, the committer, the
        #: in-process interpreter)
        self.topology: TridentTopology = topology
        self.store: CoordinatorStoreProtocol = store
        self.ledger: CommitLedger | None = ledger
        self.states: StateBinding = self.ctx.states

    def __getattr__(self, name: str) -> Any:
        part = _MOVED.get(name)
        if part is None or name.startswith("__"):
            msg = f"{type(self).__name__!r} object has no attribute {name!r}"
            raise AttributeError(msg)
        warnings.warn(
            f"BatchSteps.{name} moved to BatchSteps.{part}.{name} (goes away in 0.2.0)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(getattr(self, part), name)

    @property
    def staging(self) -> StagingArea:
        """Its staging area (see :attr:`BatchContext.staging`)."""
        return self.ctx.staging

    @property
    def keep_txids(self) -> int:
        """How many recent txids keep their metadata and staging."""
        return self.ctx.keep_txids

    @keep_txids.setter
    def keep_txids(self, value: int) -> None:
        self.ctx.keep_txids = value

    def query_state(self, name: str) -> Any:
        """The committed state ``name`` in the run's state database (for reading)."""
        return self.ctx.query_state(name)

    # -- the phases' entry points (the rest: ``begins``, ``processing``, ``commits``) -------------

    def is_ready(self) -> bool:
        """Whether every spout is ready for the next batch."""
        return self.begins.is_ready()

    def begin(self, run_id: str | None, txid: int | None = None) -> dict[str, Any]:
        """Bind ``run_id`` to its txid (new, re-bound, or the replay of ``txid``)."""
        return self.begins.begin(run_id, txid)

    def plan(self, txid: int) -> BatchPlan:
        """The current attempt and metadata of ``txid`` (``BatchIncompleteError``: never begun)."""
        return self.begins.plan(txid)

    def emit(self, plan: BatchPlan, *, wait_s: float = 0.0) -> dict[str, dict[str, list[Row]]]:
        """Emit every spout's tuples of ``plan``, by source step and partition (``wait_s``: how
        long a transactional partitioned spout waits for txid-1's emit)."""
        return self.processing.emit(plan, wait_s=wait_s)

    def process_local(self, txid: int, *, wait_s: float = 0.0) -> dict[str, Any]:
        """Emit (a new attempt), process here and stage ``txid``; its manifest."""
        return self.processing.process_local(txid, wait_s=wait_s)

    def is_staged(self, txid: int) -> bool:
        """Whether the current attempt of ``txid`` is processed and staged (its commit is next)."""
        attempt = self.store.attempts.attempt(txid)
        if attempt is None:
            return False
        try:
            self.staging.read_manifest(attempt)
        except BatchIncompleteError:
            return False
        return True

    def staged_rows(self, txid: int) -> int:
        """The rows the current attempt of ``txid`` staged, from its manifest."""
        attempt = self.plan(txid).attempt  # the plan first: it raises for a txid never begun
        manifest = self.staging.read_manifest(attempt)
        return sum(f["rows"] for s in manifest["states"].values() for f in s["files"])

    def staged_manifest(self, txid: int) -> dict[str, Any]:
        """The manifest the current attempt of ``txid`` staged (after any route processed it)."""
        attempt = self.store.attempts.attempt(txid) or TransactionAttempt(txid, 0)
        manifest: dict[str, Any] = self.staging.read_manifest(attempt)
        return manifest

    # -- commit ----------------------------------------------------------------------------------

    def is_committed(self, txid: int) -> bool:
        """Whether ``txid`` is committed (its replays, clears and backfills change nothing)."""
        return self.ctx.is_committed(txid)

    def commit(
        self,
        txid: int,
        *,
        applier: StagedBatchApplier | None = None,
        reprocess_stale: bool = True,
    ) -> dict[str, Any]:
        """Verify ``txid``'s staged results and apply them strictly after ``txid - 1`` (see
        :meth:`Commit.commit <airflow_trident.batch.commit.Commit.commit>`)."""
        return self.commits.commit(txid, applier=applier, reprocess_stale=reprocess_stale)

    def apply_staged(
        self, plan: BatchPlan, manifest: Mapping[str, Any], *, revert: bool | None = None
    ) -> dict[str, Partitions]:
        """Apply every staged partition here (no compare-and-set of the committed txid)."""
        return self.commits.apply_staged(plan, manifest, revert=revert)

    # -- success and resumption ------------------------------------------------------------------

    def success(self, txid: int) -> dict[str, Any]:
        """Tell the spouts ``txid`` committed; rotate old metadata and staging away."""
        removed = self.ctx.coordinator.success(txid)
        staged = 0
        if self.ctx.has_staging:
            staged = self.staging.remove_before(txid - self.keep_txids + 1)
        return {"txid": txid, "znodes_removed": removed, "staged_txids_removed": staged}

    def committed_lag(self, txid: int) -> dict[str, dict[str, Lag | None]]:
        """Spout -> source partition -> its lag once ``txid`` committed (the status table's
        lag; empty unless ``txid`` is the newest committed txid): the success step's lag
        gauges (:func:`~airflow_trident.operators.metrics.emit_lag`)."""
        return self.ctx.coordinator.committed_lag(txid)

    def bound_txid(self, run_id: str) -> int | None:
        """The txid bound to ``run_id``, ``None`` if the run has none yet."""
        return self.store.runs.txid_for_run(run_id)

    def resume_point(self, run_id: str, conf_txid: int | None) -> tuple[str, int | None]:
        """Deprecated: :func:`airflow_trident.batch.driver.resume_point` (goes away in 0.2.0)."""
        warnings.warn(
            "BatchSteps.resume_point moved to airflow_trident.batch.driver.resume_point",
            DeprecationWarning,
            stacklevel=2,
        )
        resume = resume_point(self, run_id, conf_txid)
        return resume.step, resume.txid

    # -- a whole batch, in-process ---------------------------------------------------------------

    def run_batch(self, run_id: str | None = None, *, txid: int | None = None) -> BatchReport:
        """Begin, emit, process, commit and succeed one batch in this process.

        Without ``run_id`` and ``txid`` it retries the oldest txid begun and not committed (a
        batch that failed), as the coordinator does, else begins a new one. A ``run_id`` re-binds
        that run's txid; ``txid`` replays an allocated txid (a committed one changes nothing).
        If a step fails, the txid stays uncommitted and the next call retries it.
        """
        if run_id is None and txid is None:
            txid = self.begins.pending_txid()
            if txid is not None:
                log.info("topology %s: retrying txid %d", self.topology.name, txid)
        run = BatchRun(txid=txid)
        drive(IN_PROCESS, self._in_process(run_id), run)
        report: BatchReport = run.summary["report"]
        return report

    def _in_process(self, run_id: str | None) -> dict[str, Handler]:
        """The handlers of a whole batch in this process (:meth:`run_batch`): committed from
        memory, nothing staged."""

        def begin(run: BatchRun) -> Done | None:
            run.txid = txid = int(self.begin(run_id, run.txid)["txid"])
            if not self.is_committed(txid):
                return None
            plan = self.plan(txid)
            log.info("topology %s: txid %d already committed", self.topology.name, txid)
            run.summary["report"] = BatchReport(txid, plan.attempt.attempt_id, 0, {}, False)
            return Done(f"txid {txid} is committed")

        def process(run: BatchRun) -> None:
            # every processing is a new attempt (1 is the first), as the DAG's process task's
            plan, result = self.processing.process_in_memory(_known(run))
            run.summary["plan"], run.summary["batch"] = plan, MemoryBatch(self.commits, result)

        def commit(run: BatchRun) -> None:
            batch: MemoryBatch = run.summary["batch"]
            run.summary["committed"] = self.commits.commit_plan(
                run.summary["plan"], batch.manifest(), batch, reprocess_stale=True
            )

        def success(run: BatchRun) -> None:
            txid = _known(run)
            self.success(txid)
            result = run.summary["batch"].result
            log.info("topology %s: txid %d done (%d records in)", self.topology.name, txid,
                     result.records_in)  # fmt: skip
            run.summary["report"] = BatchReport(
                txid,
                int(run.summary["committed"]["attempt_id"]),
                result.records_in,
                {n: s.rows for n, s in result.staged.items()},
                bool(run.summary["committed"]["applied"]),
            )

        return {"begin": begin, "process": process, "commit": commit, "success": success}

    def replay(self, txid: int) -> BatchReport:
        """Run allocated txid ``txid`` again (a committed one changes nothing)."""
        return self.run_batch(txid=txid)


def _known(run: BatchRun) -> int:
    assert run.txid is not None  # the begin step set it
    return run.txid


IN_PROCESS = ("begin", "process", "commit", "success")
"""The steps of a whole batch in this process (its spouts' readiness is the caller's)."""

_MOVED = {
    **dict.fromkeys(("new_attempt", "pending_txid", "committed_attempt"), "begins"),
    **dict.fromkeys(("emit_ready", "process_in_memory"), "processing"),
    **dict.fromkeys(
        ("apply_result", "apply_commit_phase", "archived_batch", "reprocess"), "commits"
    ),
    **dict.fromkeys(("coordinator", "committer", "processor"), "ctx"),
}
"""Deprecated names of :class:`BatchSteps` (until 0.2.0) -> the part that has them now."""
