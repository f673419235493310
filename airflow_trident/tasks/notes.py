"""Every DAG run of a batch shows its txid in its note (the first thing the UI shows of a run).

The note says what the run is to Trident: ``txid 7 · attempt 2`` (a new or re-bound txid;
the attempt is the processing attempt whose staging the commit applied, 1 for the first — the
number the process and commit tasks and the Trident tab show; the begin's note names the txid
alone),
``replay of txid 1 · attempt 1`` (``dag_run.conf = {"txid": 1}``; a committed txid's replay
processes nothing: the attempt is the one that committed it, as the Trident tab shows),
``backfill txid 3 · attempt 1`` (a run of ``airflow-trident backfill``, named
``trident_replay__txid_3`` or ``trident_new__txid_3``).

Two writers, because Airflow 3 keeps task code away from its database:

* the begin task, through :func:`note_begin` — it can write only where the task runs inside a
  process that may touch the metadata database (``airflow dags test`` without an executor);
  elsewhere it returns ``False`` and writes nothing;
* :class:`TridentRunNotes`, a DAG-run listener (registered by :class:`TridentNotesPlugin`, the
  ``airflow.plugins`` entry point) running in the scheduler or in ``airflow dags test``: when a
  run starts it writes the note of a run pinned to a txid (by conf or by its backfill name), and
  when the run ends it writes the note from the tasks' XComs (txid and attempt).

A note a user wrote is never replaced: only an empty note or one of these is.

Examples
--------
>>> run_note(7, 2, run_id="manual__2026-11-23T10:00:00+00:00", conf={})
'txid 7 · attempt 2'
>>> run_note(1, 3, run_id="manual__2026-11-23T10:00:00+00:00", conf={"txid": 1})
'replay of txid 1 · attempt 3'
>>> run_note(3, None, run_id="trident_replay__txid_3__2", conf={"txid": 3})
'backfill txid 3'
>>> is_trident_note("backfill txid 3"), is_trident_note("checked by Ann"), is_trident_note(None)
(True, False, True)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin

from airflow_trident.batch.layouts import LAYOUTS

__all__ = [
    "BACKFILL_PREFIXES",
    "TridentNotesPlugin",
    "TridentRunNotes",
    "is_trident_note",
    "note_begin",
    "pinned_txid",
    "run_attempt",
    "run_note",
]

BACKFILL_PREFIXES = ("trident_replay__txid_", "trident_new__txid_")
"""Run-id prefixes of ``airflow-trident backfill`` (``airflow_trident.cli``), txid after them."""

_NOTE = re.compile(r"^(txid \d+|replay of txid \d+|backfill txid \d+)( · attempt \d+)?$")
_BACKFILL_RUN = re.compile(r"^(?:%s)(\d+)(?:__\d+)?$" % "|".join(BACKFILL_PREFIXES))  # noqa: UP031


def _conf_txid(conf: Mapping[str, Any] | None) -> int | None:
    txid = (conf or {}).get("txid")
    return txid if isinstance(txid, int) and not isinstance(txid, bool) and txid > 0 else None


def pinned_txid(run_id: str, conf: Mapping[str, Any] | None) -> int | None:
    """The txid a run is pinned to before its begin runs (its conf, or its backfill name).

    >>> pinned_txid("trident_new__txid_8", None), pinned_txid("manual__x", {"txid": 2})
    (8, 2)
    >>> pinned_txid("manual__x", {}) is None
    True
    """
    txid = _conf_txid(conf)
    if txid is not None:
        return txid
    match = _BACKFILL_RUN.match(run_id)
    return int(match.group(1)) if match else None


def run_note(txid: int, attempt: int | None, *, run_id: str, conf: Mapping[str, Any] | None) -> str:
    """The note of a run bound to ``txid`` (``attempt`` unknown before the begin: ``None``)."""
    if _BACKFILL_RUN.match(run_id):
        text = f"backfill txid {txid}"
    elif _conf_txid(conf) is not None:
        text = f"replay of txid {txid}"
    else:
        text = f"txid {txid}"
    return text if attempt is None else f"{text} · attempt {attempt}"


def is_trident_note(note: str | None) -> bool:
    """Whether ``note`` is empty or one of ours (so it may be replaced)."""
    return not note or _NOTE.match(note) is not None


def _orm_allowed() -> bool:
    """Whether this process may use the metadata database (task processes may not)."""
    from airflow import settings
    from airflow.sdk.execution_time.supervisor import BlockedDBSession

    return getattr(settings, "Session", None) not in (None, BlockedDBSession)


def note_begin(context: Mapping[str, Any], summary: Mapping[str, Any]) -> bool:
    """Write the begin's note on its DAG run, if this process may; return whether it did.

    Called by the begin task with its summary (``txid``): the note names the txid, not yet an
    attempt (the process step starts attempt 1, 2, ...; the run's end adds it). Never fails the
    task.
    """
    dag_run = context["dag_run"]
    note = run_note(int(summary["txid"]), None, run_id=dag_run.run_id, conf=dag_run.conf)
    if not _orm_allowed():
        return False
    try:
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session

        with create_session() as session:
            row = session.query(DagRun).filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id)
            run = row.one_or_none()
            if run is None or not is_trident_note(run.note):
                return False
            run.note = note
        return True
    except Exception:  # a note is worth no failed batch
        return False


def _batch_summary(dag_run: Any, session: Any) -> tuple[int, int | None] | None:
    """The txid of ``dag_run`` (from its begin's XCom) and its attempt (:func:`run_attempt`)."""
    from airflow.models.xcom import XComModel

    rows = (
        session.query(XComModel)
        .filter(
            XComModel.dag_id == dag_run.dag_id,
            XComModel.run_id == dag_run.run_id,
            XComModel.key == "return_value",
        )
        .all()
    )
    return run_attempt((row.task_id, XComModel.deserialize_value(row)) for row in rows)


def run_attempt(xcoms: Iterable[tuple[str, Any]]) -> tuple[int, int | None] | None:
    """The txid of a run and its attempt, from its tasks' XComs (``(task_id, value)``): the
    processing attempt its process, commit or express task reported (1, 2, ...); for a txid
    its begin found committed (a replay, which processes nothing), the attempt that committed
    it, as the begin reported it; ``None`` before either (the attempt the Trident tab shows).
    The task that begins is each layout's (:meth:`Layout.begins_in
    <airflow_trident.batch.layouts.Layout.begins_in>`: ``begin``, the express task ``run``).

    >>> run_attempt([("batch.begin", {"txid": 4, "attempt_id": 1, "committed_txid": 3})])
    (4, None)
    >>> run_attempt([("batch.begin", {"txid": 4, "attempt_id": 1, "committed_txid": 3}),
    ...              ("batch.process", {"txid": 4, "attempt_id": 1})])
    (4, 1)
    >>> run_attempt([("batch.begin", {"txid": 1, "attempt_id": 1, "committed_txid": 4}),
    ...              ("batch.commit", {"txid": 1, "applied": False})])
    (1, 1)
    """
    txid: int | None = None
    attempt: int | None = None
    replayed: int | None = None
    for task_id, value in xcoms:
        if not isinstance(value, Mapping) or not isinstance(value.get("txid"), int):
            continue
        carriers = [layout.carrier for layout in LAYOUTS.values() if layout.begins_in(task_id)]
        reported = value.get("attempt_id")
        if carriers:  # the task that begins (the express task's also processes)
            txid = int(value["txid"])
        if not isinstance(reported, int) or reported < 1:
            continue
        committed = value.get("committed_txid")
        if carriers and not any(carrier.runs("process") for carrier in carriers):
            if isinstance(committed, int) and int(value["txid"]) <= committed:
                replayed = reported  # the begin found the txid committed: its committing attempt
        else:
            attempt = max(attempt or 0, reported)
            txid = txid if txid is not None else int(value["txid"])
    return None if txid is None else (txid, attempt if attempt is not None else replayed)


def _write(dag_run: Any, note: str) -> None:
    if is_trident_note(dag_run.note) and dag_run.note != note:
        dag_run.note = note  # committed by the caller's session, with the state change


class TridentRunNotes:
    """DAG-run listener writing each Trident run's note (see the module docstring)."""

    @hookimpl
    def on_dag_run_running(self, dag_run: Any, msg: str) -> None:
        """A run pinned to a txid (conf, backfill name) shows it from its start."""
        txid = pinned_txid(dag_run.run_id, dag_run.conf)
        if txid is not None:
            _write(dag_run, run_note(txid, None, run_id=dag_run.run_id, conf=dag_run.conf))

    @hookimpl
    def on_dag_run_success(self, dag_run: Any, msg: str) -> None:
        """Write the note from the begin task's XCom."""
        self._from_begin(dag_run)

    @hookimpl
    def on_dag_run_failed(self, dag_run: Any, msg: str) -> None:
        """Write the note from the begin task's XCom (if the begin ran)."""
        self._from_begin(dag_run)

    @staticmethod
    def _from_begin(dag_run: Any) -> None:
        from sqlalchemy.orm import object_session

        session = object_session(dag_run)
        if session is None:
            return
        found = _batch_summary(dag_run, session)
        if found is not None:
            txid, attempt = found
            _write(dag_run, run_note(txid, attempt, run_id=dag_run.run_id, conf=dag_run.conf))


class TridentNotesPlugin(AirflowPlugin):
    """Registers :class:`TridentRunNotes` (entry point ``airflow.plugins``: ``trident``)."""

    name = "trident_notes"
    listeners = [TridentRunNotes()]  # noqa: RUF012 - Airflow reads the class attribute
