"""The begin of a batch as a task does it (the begin task, the compact layout's begin sensor,
the express task): the run bound to its txid, logged and noted on the run."""

from __future__ import annotations

from typing import Any

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.errors import ConfigurationError
from airflow_trident.tasks.base import moved
from airflow_trident.tasks.notes import note_begin

__all__ = ["begin_batch", "begun_line"]

_MOVED = {"BeginWhenReady": "airflow_trident.sensors.begin.BeginWhenReadySensor"}
"""Deprecated names: the base of the readiness-then-begin tasks is the sensor itself (a
:class:`~airflow_trident.tasks.readiness.BatchStepsSensor` with its slice), looked up by name
at run time (no task module imports a sensor module)."""


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _MOVED)


def begin_batch(context: Any, steps: BatchSteps, log: Any) -> dict[str, Any]:
    """Bind ``context``'s DAG run to its txid (``dag_run.conf["txid"]`` replays one) and store
    the batch metadata through ``steps`` (the begin task's, or a readiness sensor's that begins
    too); log it to ``log`` and note it on the run. Returns the begin summary (the task's XCom).

    Raises
    ------
    ConfigurationError
        If ``dag_run.conf["txid"]`` is not a positive integer.
    """
    dag_run = context["dag_run"]
    conf = dag_run.conf or {}
    txid = conf.get("txid")
    if txid is not None and (not isinstance(txid, int) or isinstance(txid, bool) or txid < 1):
        msg = f"dag_run.conf txid must be a positive integer, got {txid!r}"
        raise ConfigurationError(msg)
    summary: dict[str, Any] = steps.begin(dag_run.run_id, txid)
    log.info("%s", begun_line(dag_run.run_id, summary))
    note_begin(context, summary)  # the run's note shows its txid (operators/notes.py)
    for spout, meta in summary["metas"].items():
        log.info("spout %s metadata: %s", spout, str(meta)[:500])
    return summary


def begun_line(run_id: str, summary: dict[str, Any]) -> str:
    """The begin's log line: the run's txid and its attempt as the run's note, the process and
    commit tasks and the Trident tab show it (the processing attempt, 1 for the first).

    >>> begun_line("manual__1", {"txid": 4, "attempt_id": 1, "committed_txid": 3})
    'run manual__1 is txid 4 · attempt 1; committed txid is 3'
    >>> begun_line("manual__2", {"txid": 1, "attempt_id": 1, "committed_txid": 4})
    'run manual__2 replays txid 1 · attempt 1, committed: nothing to process, state unchanged'
    """
    txid, attempt = summary["txid"], summary["attempt_id"]
    shown = "" if attempt is None else f" · attempt {attempt}"
    if txid <= summary["committed_txid"]:
        return (f"run {run_id} replays txid {txid}{shown}, committed: nothing to process, "
                f"state unchanged")  # fmt: skip
    return f"run {run_id} is txid {txid}{shown}; committed txid is {summary['committed_txid']}"
