"""One attempt number everywhere, and a replay's own steps (issue 31): the begin's log line and
XCom, the run's note and the run's Trident tab (``StatusCollector.run``) name the same attempt of
a run, the processing attempt (1 for the first processing, never 0); a replay of a committed
txid names the attempt that committed it, and its Trident tab shows its own steps, not those of
the run that committed the txid. Real ZooKeeper, SQLite state and ledger, a staging root."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.process import processed_summary
from airflow_trident.batch.status import StatusCollector
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.operation import Count, Split
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.tasks import begin as begin_task
from airflow_trident.tasks.notes import run_attempt, run_note
from airflow_trident.topology import TridentTopology

pytestmark = pytest.mark.integration

DATA = {"p0": [(f"w{i % 5} w{i % 3}",) for i in range(12)]}
LOG = "tests.attempt_everywhere"


def make_steps(store: CoordinatorStore, tmp_path: Path) -> BatchSteps:
    url = f"sqlite:///{tmp_path}/state.db"
    t = TridentTopology(store.paths.topology)
    t.new_stream("lines", MemoryTransactionalSpout(DATA, ["line"], 2)).each(
        ["line"], Split(), ["word"]
    ).group_by(["word"]).persistent_aggregate(
        sql_state(url, "counts", "transactional", key_fields=("word",), value_type="bigint"),
        Count(), ["count"], name="counts",
    )  # fmt: skip
    return BatchSteps(t, store, StagingArea(str(tmp_path / "staging"), t.name),
                      ledger=CommitLedger(url))  # fmt: skip


def begin(steps: BatchSteps, run_id: str, conf: dict[str, Any] | None = None) -> dict[str, Any]:
    """The begin task's step (its log to the ``LOG`` logger), as the DAG's begin task runs it."""
    context = {"dag_run": SimpleNamespace(run_id=run_id, conf=conf or {}, dag_id="attempts")}
    return begin_task.begin_batch(context, steps, logging.getLogger(LOG))


def run_tasks(steps: BatchSteps, run_id: str, conf: dict[str, Any] | None = None
              ) -> list[tuple[str, Any]]:  # fmt: skip
    """A run of the standard layout's begin, process, commit and success steps: its XComs."""
    began = begin(steps, run_id, conf)
    txid = int(began["txid"])
    xcoms: list[tuple[str, Any]] = [("batch.begin", began)]
    if steps.store.commits.committed_txid() >= txid:  # the process task's skip of a committed txid
        xcoms.append(("batch.process", {"txid": txid, "skipped": "already committed"}))
    else:
        xcoms.append(("batch.process", processed_summary(steps.process_local(txid))))
    xcoms.append(("batch.commit", steps.commit(txid)))
    steps.success(txid)
    return xcoms


def begin_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The lines of the begin task's log (its own and the coordinator's) naming an attempt."""
    begin_loggers = (LOG, "airflow_trident.coordination.coordinator")
    return [r.getMessage() for r in caplog.records
            if r.name in begin_loggers and "attempt" in r.getMessage()]  # fmt: skip


@pytest.fixture
def steps(zk_store: CoordinatorStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
          ) -> BatchSteps:  # fmt: skip
    # the begin's own note needs Airflow's metadata database: the listener's is tested here
    monkeypatch.setattr(begin_task, "note_begin", lambda context, summary: False)
    return make_steps(zk_store, tmp_path)


def test_a_new_txid_is_attempt_1_in_its_begin_log_xcom_note_and_run_tab(
    steps: BatchSteps, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    for i in (1, 2, 3):
        run_tasks(steps, f"run_{i}")
    caplog.clear()
    # When txid 4's run runs (its begin first)
    xcoms = run_tasks(steps, "run_4")
    # Then its begin's log line and XCom name attempt 1, as its note and its Trident tab do
    assert begin_lines(caplog) == ["run run_4 is txid 4 · attempt 1; committed txid is 3"]
    assert xcoms[0][1]["attempt_id"] == 1
    found = run_attempt(xcoms)
    assert found == (4, 1)
    assert run_note(*found, run_id="run_4", conf={}) == "txid 4 · attempt 1"
    tab = StatusCollector(steps.store, ledger=steps.ledger, staging=steps.staging).run("run_4")
    assert tab.batch is not None
    assert (tab.txid, tab.batch.attempt_id) == (4, 1)
    assert tab.summary() == "txid 4 · committed · attempt 1"


def test_a_replay_names_the_attempt_that_committed_its_txid_everywhere(
    steps: BatchSteps, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    run_tasks(steps, "run_1")
    run_tasks(steps, "run_2")
    caplog.clear()
    # When a run replays committed txid 1 (dag_run.conf {"txid": 1})
    xcoms = run_tasks(steps, "manual__replay", {"txid": 1})
    # Then its begin's log line and XCom name attempt 1 (the attempt that committed txid 1,
    # not ZooKeeper's counter, which the replay's begin raised to 2), as its note and tab do
    assert begin_lines(caplog) == [
        "run manual__replay replays txid 1 · attempt 1, committed: nothing to process, "
        "state unchanged"
    ]
    assert steps.store.attempts.attempt(1) == TransactionAttempt(1, 2)
    assert xcoms[0][1]["attempt_id"] == 1
    found = run_attempt(xcoms)
    assert found == (1, 1)
    assert run_note(*found, run_id="manual__replay", conf={"txid": 1}) == (
        "replay of txid 1 · attempt 1")
    # (the express task's XCom is its begin's summary: the same attempt)
    assert run_attempt([("batch.run", xcoms[0][1])]) == (1, 1)
    tab = StatusCollector(steps.store, ledger=steps.ledger, staging=steps.staging).run(
        "manual__replay")
    assert tab.batch is not None
    assert tab.is_replay
    assert (tab.txid, tab.batch.attempt_id) == (1, 1)


def test_a_replays_run_tab_shows_its_own_steps_not_those_of_the_run_that_committed_it(
    steps: BatchSteps,
) -> None:
    # Given txid 1 committed by run_1, and a replay of it begun a while later
    run_tasks(steps, "run_1")
    time.sleep(1.2)  # ZooKeeper's and the ledger's clocks: the replay is clearly later
    replay_started = datetime.now(UTC)
    run_tasks(steps, "manual__replay", {"txid": 1})
    collector = StatusCollector(steps.store, ledger=steps.ledger, staging=steps.staging)
    # When each run's Trident tab is read
    original, replay = collector.run("run_1").batch, collector.run("manual__replay").batch
    assert original is not None
    assert replay is not None
    # Then the committing run keeps its steps, all before the replay began
    assert None not in (original.begun_at, original.process_started_at,
                        original.commit_started_at, original.committed_at)  # fmt: skip
    assert original.committed_at is not None
    assert original.committed_at < replay_started
    # And the replay shows its own begin (when it was bound to txid 1) and no processing or
    # commit of its own (it processed and committed nothing), not run_1's
    assert replay.begun_at is not None
    assert replay.begun_at > replay_started - timedelta(seconds=0.5)
    assert replay.since == replay.begun_at
    assert (replay.process_started_at, replay.processed_at, replay.commit_started_at,
            replay.committed_at, replay.records_in) == (None, None, None, None, None)  # fmt: skip
    assert (replay.run_id, replay.replay_run_id, replay.attempt_id) == (
        "run_1", "manual__replay", 1)
