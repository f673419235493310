"""The process phase of a batch: emit it (a new attempt) and run the plan, in-process here.

On Spark the same emit feeds :mod:`airflow_trident.runtime.spark` (see
:mod:`airflow_trident.batch.spark_job`); either way the results are staged for the commit, which
lets batch N+1 process while N waits for its turn to commit.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from airflow_trident.batch.begin import Begin
from airflow_trident.batch.context import BatchContext, Row
from airflow_trident.coordination.coordinator import BatchPlan
from airflow_trident.errors import BatchNotReadyError
from airflow_trident.runtime.result import ProcessResult
from airflow_trident.spout.executor import EmitsInTxidOrder

__all__ = ["LocalStager", "Process", "Stager", "processed_line", "processed_summary"]

log = logging.getLogger(__name__)


class Process:
    """Emit and process a batch, and stage the results (over ``ctx``; the plan and attempts
    from ``begin``)."""

    def __init__(self, ctx: BatchContext, begin: Begin) -> None:
        self.ctx = ctx
        self.begin = begin

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
                    self.ctx.topology.spouts[name]: self.ctx.coordinator.emit_partitions(plan, name)
                    for name in self.ctx.coordinator.spouts
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
        for name, spout in self.ctx.coordinator.spouts.items():
            if not isinstance(spout, EmitsInTxidOrder) or txid == 1:
                continue
            if spout.emitted(txid) or not self.ctx.store.metas.has_meta(name, txid - 1):
                continue  # a replay, or the spout's first batch
            if not spout.emitted(txid - 1):
                msg = (
                    f"txid {txid}: spout {name!r} cannot emit before txid {txid - 1} did (its "
                    f"ranges start where txid {txid - 1}'s end); retry once txid {txid - 1} "
                    f"was processed"
                )
                raise BatchNotReadyError(msg)

    def run(self, txid: int, stager: Stager, *, wait_s: float = 0.0) -> dict[str, Any]:
        """The process phase, the one way every route runs it: a new attempt of ``txid``, its
        emit, then ``stager`` runs the plan and stages the results (in this process, or on
        Spark); the manifest."""
        plan = self.begin.new_attempt(txid)
        log.info("txid %d attempt %d: emitting", plan.txid, plan.attempt.attempt_id)
        manifest = stager.stage(plan, self.emit(plan, wait_s=wait_s))
        log.info(
            "txid %d attempt %d staged: %s",
            plan.txid,
            plan.attempt.attempt_id,
            {n: sum(f["rows"] for f in s["files"]) for n, s in manifest["states"].items()},
        )
        return manifest

    def process_in_memory(
        self, txid: int, *, wait_s: float = 0.0
    ) -> tuple[BatchPlan, ProcessResult]:
        """Emit (a new attempt) and process batch ``txid`` in-process; nothing is staged (an
        in-process batch commits from memory)."""
        plan = self.begin.new_attempt(txid)
        sources = self.emit(plan, wait_s=wait_s)
        return plan, self.ctx.processor.process(txid, sources)

    def process_local(self, txid: int, *, wait_s: float = 0.0) -> dict[str, Any]:
        """Emit (a new attempt), process in-process and stage batch ``txid``; the manifest."""
        return self.run(txid, LocalStager(self.ctx), wait_s=wait_s)


class Stager(Protocol):
    """Runs a batch's plan over its emitted tuples and stages the results: in this process
    (:class:`LocalStager`) or on Spark (:class:`~airflow_trident.batch.on_spark.SparkStager`)."""

    def stage(self, plan: BatchPlan, sources: dict[str, dict[str, list[Row]]]) -> dict[str, Any]:
        """Process ``plan``'s emitted ``sources`` and stage the results; the manifest."""
        ...


class LocalStager:
    """The plan run by the in-process interpreter, the results staged by pyarrow."""

    def __init__(self, ctx: BatchContext) -> None:
        self.ctx = ctx

    def stage(self, plan: BatchPlan, sources: dict[str, dict[str, list[Row]]]) -> dict[str, Any]:
        """Process here and stage (see :class:`Stager`)."""
        result = self.ctx.processor.process(plan.txid, sources)
        log.info("txid %d attempt %d processed: %d records in", plan.txid,
                 plan.attempt.attempt_id, result.records_in)  # fmt: skip
        return self.ctx.staging.write(plan.attempt, result, plan.metas)


def processed_summary(manifest: dict[str, Any]) -> dict[str, Any]:
    """The process phase's summary (a process task's XCom): topology, txid, attempt, records per
    source partition, staged rows.

    >>> summary = processed_summary({"topology": "wc", "txid": 3, "attempt_id": 2,
    ...     "emitted": {"lines": {"p0": 4, "p1": 1}},
    ...     "states": {"counts": {"files": [{"rows": 3}, {"rows": 2}]}}})
    >>> summary["records_in"], summary["staged_rows"]
    (5, {'counts': 5})
    """
    return {
        "topology": manifest["topology"],
        "txid": manifest["txid"],
        "attempt_id": manifest["attempt_id"],
        "emitted": manifest["emitted"],
        "records_in": sum(sum(p.values()) for p in manifest["emitted"].values()),
        "staged_rows": {n: sum(f["rows"] for f in s["files"])
                        for n, s in manifest["states"].items()},
    }  # fmt: skip


def processed_line(summary: dict[str, Any]) -> str:
    """The process phase's summary line (a process task's log's first line of substance).

    >>> processed_line({"txid": 3, "attempt_id": 2, "records_in": 5,
    ...                 "emitted": {"lines": {"p0": 4, "p1": 1}}, "staged_rows": {"counts": 3}})
    'txid 3 · attempt 2 processed: 5 records in (lines: p0=4 p1=1); staged: counts 3 keys'
    """
    parts = "; ".join(
        f"{stream}: " + " ".join(f"{p}={n}" for p, n in sorted(partitions.items()))
        for stream, partitions in sorted(summary["emitted"].items())
    )
    rows = sorted(summary["staged_rows"].items())
    staged = ", ".join(f"{name} {n} keys" for name, n in rows)
    return (
        f"txid {summary['txid']} · attempt {summary['attempt_id']} processed: "
        f"{summary['records_in']} records in ({parts or 'none'}); staged: {staged or 'nothing'}"
    )
