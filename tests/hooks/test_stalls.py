"""A waiting task gives its run slot back when the txid it waits for cannot progress."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_trident.batch import order as stalls
from airflow_trident.batch.order import StallWatch, wait_watching
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import BatchStalledError
from airflow_trident.tasks.base import no_retry_when_stalled

log = logging.getLogger(__name__)


def test_a_failed_run_of_the_awaited_txid_fails_the_waiting_task_with_the_fix() -> None:
    # Given a commit of txid 8 waiting for txid 7, whose only run has failed
    watch = StallWatch("wc", txid=8, waiting_for="commit", run_id="r8")
    # When the watch looks at txid 7's runs
    verdict = watch.verdict({"r7": "failed"}, now=0.0)
    # Then it gives up at once and says which runs to clear, in which order
    assert verdict is not None
    assert "txid 8 cannot commit before txid 7" in verdict
    assert "airflow dags clear wc --run-id r7 --only-failed --yes" in verdict
    assert "airflow dags clear wc --run-id r8 --only-failed --yes" in verdict
    assert verdict.index("--run-id r7") < verdict.index("--run-id r8")


def test_a_run_marked_success_without_committing_asks_for_a_replay() -> None:
    watch = StallWatch("wc", txid=3, waiting_for="emit")
    verdict = watch.verdict({"r2": "success"}, now=0.0)
    assert verdict is not None
    assert "never committed" in verdict
    assert """--conf '{"txid": 2}'""" in verdict


def test_a_queued_run_gets_a_grace_period_and_a_running_replay_resets_it() -> None:
    watch = StallWatch("wc", txid=5, waiting_for="commit", grace_s=30)
    assert watch.verdict({"a": "failed", "b": "queued"}, now=0.0) is None
    assert watch.verdict({"a": "failed", "b": "running"}, now=40.0) is None  # it started
    assert watch.verdict({"a": "failed", "b": "queued"}, now=41.0) is None  # grace again
    late = watch.verdict({"a": "failed", "b": "queued"}, now=72.0)
    assert late is not None
    assert "queued for 31 s" in late


@pytest.mark.integration
def test_wait_watching_fails_a_commit_wait_on_the_real_index(
    zk_store: CoordinatorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given txids 1 and 2 bound to runs, txid 1 never committing, and Airflow answering that
    # txid 1's run has failed (the Task Execution API cannot run outside a task: its answer is
    # the one thing given here)
    zk_store.runs.bind_run("run1")
    zk_store.runs.bind_run("run2")
    monkeypatch.setattr(stalls, "STALL_CHECK_S", 0.0)
    asked: list[Sequence[str]] = []

    def states(dag_id: str, runs: Sequence[str]) -> Mapping[str, str | None]:
        asked.append(list(runs))
        return dict.fromkeys(runs, "failed")

    # When txid 2's commit waits for txid 1's
    watch = StallWatch("wc", txid=2, waiting_for="commit", run_id="run2")
    # (the tasks wrap their waits in no_retry_when_stalled: a verdict fails them without retry)
    with pytest.raises(AirflowFailException) as failed, no_retry_when_stalled():
        wait_watching(
            lambda: zk_store.commits.committed_txid() >= 1,
            watch,
            lambda: zk_store.runs.runs_of_txid(1),
            timeout_s=30,
            poll_s=0.01,
            log=log,
            states=states,
        )
    # Then it asked about txid 1's run (from ZooKeeper's index) and failed with the fix
    assert asked[0] == ["run1"]
    assert "--run-id run1" in str(failed.value)
    assert isinstance(failed.value.__cause__, BatchStalledError)


@pytest.mark.integration
def test_wait_watching_returns_when_the_awaited_txid_commits(zk_store: CoordinatorStore) -> None:
    # Given a wait whose awaited txid commits on the third look, its run running meanwhile
    zk_store.runs.bind_run("run1")
    ready = iter([False, False, True])
    watch = StallWatch("wc", txid=2, waiting_for="commit")
    # When the task waits; Then it returns True (ready), no verdict on a running run
    assert wait_watching(
        lambda: next(ready), watch, lambda: ["run1"], timeout_s=30, poll_s=0.01, log=log,
        states=lambda d, r: dict.fromkeys(r, "running"),
    )  # fmt: skip
