"""What the process tasks (``spark-submit`` or Spark Connect) read of the lifecycle before and
after the Spark work: whether there is anything to process, and the summary of what was staged.

>>> processed_summary({"topology": "wc", "txid": 3, "attempt_id": 2,
...                    "emitted": {"lines": {"p0": 4, "p1": 1}},
...                    "states": {"counts": {"files": [{"rows": 3}, {"rows": 2}]}}})["records_in"]
5
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.hooks.spark import process_on_connect
from airflow_trident.hooks.stalls import wait_for_emit_order

__all__ = [
    "before_processing",
    "committed_summary",
    "process_in_turn_on_connect",
    "processed",
    "processed_line",
    "processed_summary",
]


def committed_summary(steps: BatchSteps, txid: int) -> dict[str, Any] | None:
    """The process task's XCom when ``txid`` is already committed (a cleared or backfilled run
    of a committed txid: nothing to process, and its metadata may have been rotated away), else
    ``None``."""
    if steps.store.committed_txid() < txid:
        return None
    return {"txid": txid, "skipped": "already committed: nothing to process, state unchanged"}


def before_processing(
    steps: BatchSteps,
    txid: int,
    *,
    dag_id: str,
    run_id: str | None,
    timeout_s: float,
    log: logging.Logger | Any,
) -> tuple[dict[str, Any] | None, float]:
    """What both process tasks (``spark-submit`` and Spark Connect) do before the Spark work:
    ``(skipped, 0.0)`` when ``txid`` is already committed (the XCom to return, nothing to
    process), else ``(None, emit_wait_s)`` once ``txid`` may be emitted: what is left of
    ``timeout_s`` for the job's own wait (:func:`~airflow_trident.hooks.stalls.
    wait_for_emit_order`, which fails the task at once when txid-1 cannot make progress)."""
    skipped = committed_summary(steps, txid)
    if skipped is not None:
        log.info("txid %d is already committed: nothing to process", txid)
        return skipped, 0.0
    wait_s = wait_for_emit_order(
        steps, txid, dag_id=dag_id, run_id=run_id, timeout_s=timeout_s, log=log
    )
    return None, wait_s


def process_in_turn_on_connect(
    steps: BatchSteps,
    spark_connect_conn_id: str,
    txid: int,
    *,
    dag_id: str,
    run_id: str | None,
    timeout_s: float,
    log: logging.Logger | Any,
) -> dict[str, Any]:
    """Process ``txid`` (not committed) on the Spark Connect server of ``spark_connect_conn_id``
    once it may be emitted (the Connect process task and the express layout's one task); the
    summary, logged as :func:`processed_line`."""
    emit_wait_s = wait_for_emit_order(
        steps, txid, dag_id=dag_id, run_id=run_id, timeout_s=timeout_s, log=log
    )
    log.info(
        "processing txid %d of %s on Spark Connect (connection %s)",
        txid, steps.topology.name, spark_connect_conn_id,
    )  # fmt: skip
    summary = processed_summary(process_on_connect(steps, spark_connect_conn_id, txid,
                                                   emit_wait_s=emit_wait_s))  # fmt: skip
    log.info("%s", processed_line(summary))
    return summary


def processed_summary(manifest: dict[str, Any]) -> dict[str, Any]:
    """The process task's XCom: topology, txid, attempt, records per source partition, staged
    rows."""
    return {
        "topology": manifest["topology"],
        "txid": manifest["txid"],
        "attempt_id": manifest["attempt_id"],
        "emitted": manifest["emitted"],
        "records_in": sum(sum(p.values()) for p in manifest["emitted"].values()),
        "staged_rows": {n: sum(f["rows"] for f in s["files"])
                        for n, s in manifest["states"].items()},
    }  # fmt: skip


def processed(steps: BatchSteps, txid: int) -> dict[str, Any]:
    """The summary of what the current attempt of ``txid`` staged (after a Spark job did it)."""
    attempt = steps.store.attempt(txid) or TransactionAttempt(txid, 0)
    return processed_summary(steps.staging.read_manifest(attempt))


def processed_line(summary: dict[str, Any]) -> str:
    """The process task's summary line (its log's first line of substance).

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
