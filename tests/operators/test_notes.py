"""The note of a Trident DAG run: what it says for each kind of run, and whose note it replaces."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from airflow_trident.cli import NEW_PREFIX, REPLAY_PREFIX
from airflow_trident.tasks.notes import (
    BACKFILL_PREFIXES,
    TridentRunNotes,
    is_trident_note,
    pinned_txid,
    run_note,
)


@dataclass
class _Run:
    """The attributes of a DagRun the listener reads and writes."""

    run_id: str
    conf: dict[str, Any]
    note: str | None = None


def test_the_backfill_prefixes_are_the_clis() -> None:
    # Given the run-id prefixes `airflow-trident backfill` names its runs with
    # Then the notes recognise exactly those
    assert set(BACKFILL_PREFIXES) == {REPLAY_PREFIX, NEW_PREFIX}


@pytest.mark.parametrize(
    ("run_id", "conf", "expected"),
    [
        ("manual__2026-11-23T10:00:00+00:00", {}, "txid 7 · attempt 2"),
        ("scheduled__2026-11-23T10:00:00+00:00", None, "txid 7 · attempt 2"),
        ("manual__2026-11-23T10:00:00+00:00", {"txid": 7}, "replay of txid 7 · attempt 2"),
        ("trident_replay__txid_7", {"txid": 7}, "backfill txid 7 · attempt 2"),
        ("trident_replay__txid_7__3", {"txid": 7}, "backfill txid 7 · attempt 2"),
        ("trident_new__txid_7", {}, "backfill txid 7 · attempt 2"),
    ],
)
def test_the_note_says_what_the_run_is(run_id: str, conf: Any, expected: str) -> None:
    # Given a run bound to txid 7, attempt 2; When its note is made; Then it names the txid
    assert run_note(7, 2, run_id=run_id, conf=conf) == expected


@pytest.mark.parametrize("conf", [{"txid": 0}, {"txid": True}, {"txid": "3"}, {}])
def test_a_run_without_a_valid_txid_in_conf_or_name_is_not_pinned(conf: dict[str, Any]) -> None:
    # Given a manual run whose conf names no valid txid; Then it is not pinned before its begin
    assert pinned_txid("manual__x", conf) is None


def test_a_backfill_run_is_pinned_by_its_name() -> None:
    # Given runs named by `airflow-trident backfill`; Then their txid is known from the name
    assert pinned_txid("trident_replay__txid_12__2", None) == 12
    assert pinned_txid("trident_new__txid_13", {}) == 13


def test_a_started_pinned_run_shows_its_txid_at_once() -> None:
    # Given a backfill run and a manual one, both just started
    backfill, manual = _Run("trident_new__txid_4", {}), _Run("manual__x", {})
    # When the listener sees them start
    TridentRunNotes().on_dag_run_running(backfill, "started")
    TridentRunNotes().on_dag_run_running(manual, "started")
    # Then the pinned one shows its txid, the other waits for its begin
    assert backfill.note == "backfill txid 4"
    assert manual.note is None


def test_a_users_note_is_kept() -> None:
    # Given a backfill run whose note a user wrote
    run = _Run("trident_new__txid_4", {}, note="checked by Ann: source was late")
    # When the listener sees it start; Then the user's note stays
    TridentRunNotes().on_dag_run_running(run, "started")
    assert run.note == "checked by Ann: source was late"
    assert not is_trident_note(run.note)


def test_an_earlier_trident_note_is_replaced() -> None:
    # Given a run whose note the begin of an earlier attempt wrote
    run = _Run("trident_replay__txid_4", {"txid": 4}, note="backfill txid 4 · attempt 0")
    # When the listener sees it (re)start; Then the note is ours to replace
    TridentRunNotes().on_dag_run_running(run, "restarted")
    assert run.note == "backfill txid 4"
