"""The lifecycle of a batch: the one place that runs begin, emit, process, commit and success.

Every way a batch runs goes through :class:`BatchSteps`: the Airflow tasks (through
:class:`~airflow_trident.hooks.trident.TridentHook`), the Spark job of the process and commit
steps (:mod:`airflow_trident.batch.spark_job`), the in-process runner
(:class:`~airflow_trident.runtime.local.LocalRunner`) and rebuilds
(:mod:`airflow_trident.batch.rebuild`). Each step takes what the previous one left in the
coordinator store and in the staging area, so steps can run in different processes and be
retried alone:

The phases are modules of their own, each building on the one before:
:mod:`~airflow_trident.batch.begin`, :mod:`~airflow_trident.batch.process`,
:mod:`~airflow_trident.batch.commit` (over :mod:`~airflow_trident.batch.context`); this module
adds success and whole in-process batches.

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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_trident.batch.commit import CommitSteps, MemoryBatch, StagedBatchApplier
from airflow_trident.batch.context import topology_spouts

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


class BatchSteps(CommitSteps):
    """Begin, process, commit and success of one topology's batches (parameters: see
    :class:`~airflow_trident.batch.context.BatchContext`)."""

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
        # every processing is a new attempt (1 is the first), as the DAG's process task starts
        plan = self.new_attempt(txid)
        result = self.processor.process(txid, self.emit(plan))
        batch = MemoryBatch(self, result)
        summary = self._commit(plan, batch.manifest(), batch, reprocess_stale=True)
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
