"""The states of DAG runs, from Airflow's Task Execution API: what a waiting batch task (and
the commit trigger) hands :mod:`airflow_trident.batch.order` to judge whether txid-1's runs can
still make progress."""

from __future__ import annotations

import logging
from collections.abc import Sequence

__all__ = ["dagrun_states"]

_log = logging.getLogger(__name__)


def dagrun_states(dag_id: str, run_ids: Sequence[str]) -> dict[str, str | None]:
    """The state of each run, through the Task Execution API (from a task or a trigger).

    A run the API cannot answer for (deleted, or no API in this process) maps to ``None``.
    """
    try:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
    except ImportError:  # pragma: no cover - Airflow 3 always has it
        return dict.fromkeys(run_ids)
    states: dict[str, str | None] = {}
    for run_id in run_ids:
        try:
            state = RuntimeTaskInstance.get_dagrun_state(dag_id, run_id)
        except Exception as error:  # no Task Execution API here, or the run is gone: no verdict
            _log.debug("no state for run %s of %s: %s", run_id, dag_id, error)
            states[run_id] = None
            continue
        # the API answers with its own enum, whose str() is "DagRunState.QUEUED"
        states[run_id] = str(getattr(state, "value", state))
    return states
