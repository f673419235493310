"""Building a topology's :class:`~airflow_trident.runtime.steps.BatchSteps` from Airflow
connections (shared by the operators, sensor and triggers)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import ConfigurationError
from airflow_trident.hooks.state_store import StateStoreHook
from airflow_trident.hooks.zookeeper import ZooKeeperHook
from airflow_trident.runtime.ledger import CommitLedger
from airflow_trident.runtime.reference import load_topology
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.runtime.steps import BatchSteps

__all__ = ["STATE_URL_ENV", "open_steps", "processed_summary", "state_url_from", "txid_of"]

STATE_URL_ENV = "TRIDENT_STATE_URL"


def state_url_from(state_conn_id: str | None) -> str | None:
    """The SQLAlchemy URL of a state connection (with its password: keep it out of logs)."""
    if state_conn_id is None:
        return None
    url = StateStoreHook(state_conn_id=state_conn_id).get_url()
    rendered: str = url.render_as_string(hide_password=False)
    return rendered


@contextmanager
def open_steps(
    topology: str,
    *,
    zookeeper_conn_id: str,
    staging_root: str,
    state_conn_id: str | None = None,
    keep_txids: int = 16,
) -> Iterator[BatchSteps]:
    """The batch steps of the topology ``module:attribute``, connected to ZooKeeper.

    With ``state_conn_id``, the topology's states read their database URL from that connection
    (through ``TRIDENT_STATE_URL``, set only while the steps run); committed batches are recorded
    in that database's ``trident_commit_ledger`` table.
    """
    loaded = load_topology(topology)
    url = state_url_from(state_conn_id)
    previous = os.environ.get(STATE_URL_ENV)
    with ZooKeeperHook(zookeeper_conn_id=zookeeper_conn_id) as hook:
        config = hook.get_config()
        store = CoordinatorStore(hook.get_conn(), CoordinatorPaths(config.root, loaded.name))
        if url is not None:
            os.environ[STATE_URL_ENV] = url
        ledger_url = url or os.environ.get(STATE_URL_ENV)
        try:
            yield BatchSteps(
                loaded,
                store,
                StagingArea(staging_root, loaded.name),
                keep_txids=keep_txids,
                ledger=CommitLedger(ledger_url) if ledger_url else None,
            )
        finally:
            if url is not None:
                if previous is None:
                    os.environ.pop(STATE_URL_ENV, None)
                else:
                    os.environ[STATE_URL_ENV] = previous


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
    """The process task's XCom: txid, attempt, records per source partition, staged rows."""
    return {
        "txid": manifest["txid"],
        "attempt_id": manifest["attempt_id"],
        "emitted": manifest["emitted"],
        "records_in": sum(sum(p.values()) for p in manifest["emitted"].values()),
        "staged_rows": {n: sum(f["rows"] for f in s["files"])
                        for n, s in manifest["states"].items()},
    }  # fmt: skip
