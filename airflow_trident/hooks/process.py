"""What the process tasks (``spark-submit`` or Spark Connect) read of the lifecycle before and
after the Spark work: whether there is anything to process, and the summary of what was staged.

>>> processed_summary({"topology": "wc", "txid": 3, "attempt_id": 2,
...                    "emitted": {"lines": {"p0": 4, "p1": 1}},
...                    "states": {"counts": {"files": [{"rows": 3}, {"rows": 2}]}}})["records_in"]
5
"""

from __future__ import annotations

from typing import Any

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.batch.steps import BatchSteps

__all__ = ["committed_summary", "processed", "processed_line", "processed_summary"]


def committed_summary(steps: BatchSteps, txid: int) -> dict[str, Any] | None:
    """The process task's XCom when ``txid`` is already committed (a cleared or backfilled run
    of a committed txid: nothing to process, and its metadata may have been rotated away), else
    ``None``."""
    if steps.store.committed_txid() < txid:
        return None
    return {"txid": txid, "skipped": "already committed: nothing to process, state unchanged"}


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
