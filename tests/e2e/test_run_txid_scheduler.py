"""A run's txid while it runs, under a real scheduler (issue 20, UI): the run's Trident tab (the
status view's ``/trident-status/.../runs/<run_id>``, served by the API server from ZooKeeper's
run binding) names the txid from the moment the begin bound it, not only when the run ends.

Under a scheduler no task may write the metadata database (the Task SDK has no DB access), so
the run's note gets its txid only from the scheduler's DAG-run listener when the run ends; the
tab is what shows it meanwhile. The run is held in flight without timing: its first processing
fails (``TRIDENT_FAIL_ONCE_MARKER``) and its retry waits an hour, until the test clears it as the
UI's "Clear" does. Slow: ~1 min (Airflow start, two spark-submit processings).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.test_scheduler import deployment_env
from tests.harness.scheduler import AirflowCluster, running_airflow

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.scheduler]

DAG_ID = "e2e_run_txid"
DAG_FILE = f"""
from datetime import timedelta
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.topologies:e2e_word_count",
    dag_id="{DAG_ID}",
    schedule=None,
    spark_conn_id="spark_local",
    retries=1,
    retry_delay=timedelta(hours=1),
)
"""


def wait_for_task_state(
    af: AirflowCluster, run_id: str, task_id: str, states: set[str], *, timeout_s: float
) -> str:
    """Wait until ``task_id`` of ``run_id`` is in one of ``states``; return the state."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = {t.task_id: t.state for t in af.task_instances(DAG_ID) if t.run_id == run_id}
        if found.get(task_id) in states:
            return str(found[task_id])
        if time.monotonic() > deadline:
            pytest.fail(f"{task_id} of {run_id} never reached {states}: {found}\n"
                        f"{af.describe(DAG_ID)}")  # fmt: skip
        af.check_alive()
        time.sleep(1.0)


def run_tab(af: AirflowCluster, run_id: str) -> dict[str, object]:
    """The run's facts as its Trident tab shows them (the view's JSON route)."""
    facts: dict[str, object] = af.api("GET", f"/trident-status/api/dags/{DAG_ID}/runs/{run_id}")
    return facts


def note(af: AirflowCluster, run_id: str) -> str | None:
    ((text,),) = af.query(
        "SELECT n.content FROM dag_run r LEFT JOIN dag_run_note n ON n.dag_run_id = r.id "
        "WHERE r.dag_id = %s AND r.run_id = %s",
        (DAG_ID, run_id),
    )
    return None if text is None else str(text)


@pytest.mark.timeout(600)
def test_a_running_runs_tab_names_its_txid_under_a_real_scheduler(
    tmp_path: Path, zk_hosts: str, pg_url: str
) -> None:
    topology = f"e2e_run_txid_{uuid.uuid4().hex[:8]}"
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / f"{DAG_ID}.py").write_text(DAG_FILE)
    env = {**deployment_env(tmp_path, zk_hosts, topology),
           "TRIDENT_FAIL_ONCE_MARKER": str(tmp_path / "failed_once")}  # fmt: skip
    with running_airflow(
        tmp_path, pg_url=pg_url, dags_folder=dags, env=env, parallelism=2, expect_dags=[DAG_ID]
    ) as af:
        af.unpause(DAG_ID)
        # Given a new-txid run whose begin ran and whose processing failed once (retry in 1 h)
        run_id = af.trigger(DAG_ID)
        wait_for_task_state(af, run_id, "batch.process", {"up_for_retry"}, timeout_s=300)

        # When its Trident tab is read while the run is still running
        running = run_tab(af, run_id)
        (state,) = [r.state for r in af.runs(DAG_ID) if r.run_id == run_id]

        # Then it names the run's txid and the batch's phase and attempt
        assert state == "running", af.describe(DAG_ID)
        assert running["txid"] == 1, running
        assert running["summary"] == "txid 1 · processing · attempt 1", running
        # (the note cannot say it yet: no task process may write the metadata database)
        assert note(af, run_id) is None

        # When the failed processing is cleared (the UI's Clear) and the run finishes
        body = {"dag_run_id": run_id, "dry_run": False, "only_failed": False,
                "task_ids": ["batch.process"]}  # fmt: skip
        af.api("POST", f"/api/v2/dags/{DAG_ID}/clearTaskInstances", body)
        (done,) = af.wait_for_runs(DAG_ID, [run_id], timeout_s=300)

        # Then the tab shows the txid committed by this run, and the note now says it too
        finished = run_tab(af, run_id)
        assert done.state == "success", af.describe(DAG_ID)
        assert (finished["txid"], finished["replay"]) == (1, False), finished
        batch = finished["batch"]
        assert isinstance(batch, dict)
        assert (batch["phase"], batch["run_id"], batch["attempt_id"]) == ("committed", run_id, 2)
        assert note(af, run_id) == "txid 1 · attempt 2"
