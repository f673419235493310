"""Small helpers the batch operators share: the txid of a run, the process task's summary and
the deferrable default.

The batch lifecycle itself comes from :class:`~airflow_trident.hooks.trident.TridentHook`.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.configuration import conf

from airflow_trident.errors import ConfigurationError

__all__ = ["committed_summary", "default_deferrable", "processed_summary", "txid_of"]


def default_deferrable() -> bool:
    """Airflow's ``[operators] default_deferrable`` (``False`` when unset), read when called.

    What a ``deferrable=None`` argument of our operators, sensor and factory means — the
    common providers' convention, read at construction rather than at import, so a DAG file
    parsed after a configuration change sees the new value.

    >>> import os
    >>> os.environ["AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"] = "True"
    >>> default_deferrable()
    True
    >>> del os.environ["AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"]
    """
    return bool(conf.getboolean("operators", "default_deferrable", fallback=False))


def committed_summary(hook: Any, topology: str, staging_root: str, txid: int) -> Any:
    """The process task's XCom when ``txid`` is already committed (a cleared or backfilled run
    of a committed txid: nothing to process, and its metadata may have been rotated away), else
    ``None``."""
    with hook.batch_steps(topology, staging_root=staging_root) as steps:
        if steps.store.committed_txid() < txid:
            return None
    return {"txid": txid, "skipped": "already committed: nothing to process, state unchanged"}


def txid_of(context: Any, begin_task_id: str) -> int:
    """The txid the begin task of this run bound (from its XCom).

    Raises
    ------
    ConfigurationError
        If the begin task left no summary (it did not run in this DAG run).
    """
    summary = context["ti"].xcom_pull(task_ids=begin_task_id)
    if not isinstance(summary, dict) or "txid" not in summary:
        msg = (
            f"task {begin_task_id!r} left no batch summary in XCom for run "
            f"{context['run_id']!r}; hint: clear the begin task too"
        )
        raise ConfigurationError(msg)
    return int(summary["txid"])


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
