"""The process phase of a batch: emit it (a new attempt) and run the plan, in-process here.

On Spark the same emit feeds :mod:`airflow_trident.runtime.spark` (see
:mod:`airflow_trident.batch.spark_job`); either way the results are staged for the commit, which
lets batch N+1 process while N waits for its turn to commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from airflow_trident.batch.begin import BeginSteps
from airflow_trident.batch.context import Row
from airflow_trident.coordination.coordinator import BatchPlan
from airflow_trident.errors import BatchNotReadyError
from airflow_trident.runtime.result import ProcessResult
from airflow_trident.spout.executor import EmitsInTxidOrder

__all__ = ["ProcessSteps"]

log = logging.getLogger(__name__)


class ProcessSteps(BeginSteps):
    """Emit and process a batch, and stage the results."""

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
            if not isinstance(spout, EmitsInTxidOrder) or txid == 1:
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

    def reprocess(self, txid: int) -> Mapping[str, Any]:
        """Process ``txid`` again in-process (a new attempt); return its manifest."""
        return self.process_local(txid)
