"""The express DAG layout (``layout="express"``: the whole batch in one task, ``batch.run``)
end to end: real ``airflow dags test`` / ``airflow tasks test``, ZooKeeper, a Spark Connect
server and SQLite state; the same exactly-once cases as the other layouts'.

* consecutive runs give exact counts; a failed process is retried with the same txid; a commit
  that failed part-way is resumed at the commit (the staged attempt is not processed again); a
  replay of a committed txid and a cleared committed run change nothing;
* a failed txid blocks later commits with the other layouts' verdict and message, and a later
  new batch behind it is skipped; once the failed run is cleared, both commit in txid order;
* backfilled runs bind the txids their names say and a repeat of a committed txid changes
  nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_backfill import DAG_ID as BACKFILL_DAG_ID
from tests.e2e.test_backfill import BackfillDeployment, _output
from tests.e2e.test_compact_layout import _attempt_txids
from tests.e2e.test_dag_runs import Deployment, _connect_to, expected
from tests.harness.airflow import run_airflow, run_dag_test
from tests.harness.commit_faults import commit_fault_marker
from tests.harness.connect import running_connect_server
from tests.harness.topologies import POISON_WORD_ENV

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

DAG_ID = "e2e_express"
EXPRESS_DAG = """
from datetime import timedelta
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "{topology}",
    dag_id="{dag_id}",
    layout="express",
    process_mode="connect",
    spark_connect_conn_id="e2e_connect",
    keep_txids=1,
    retries={retries},
    retry_delay=timedelta(seconds=1),
)
"""
COMMIT_FAULT_TOPOLOGY = "tests.harness.commit_faults:commit_fault_word_count"


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not os.environ.get("TRIDENT_ZK_HOSTS"):
        pytest.skip("TRIDENT_ZK_HOSTS unset: run `bash scripts/test.sh`")
    # several staged partitions even for a small batch: the commit fault hits partition 1
    conf = {"spark.sql.adaptive.coalescePartitions.enabled": "false"}
    with running_connect_server(tmp_path_factory.mktemp("express_connect"), conf=conf) as url:
        yield url


def _express(
    root: Path,
    url: str,
    *,
    dag_id: str = DAG_ID,
    retries: int = 1,
    topology: str = COMMIT_FAULT_TOPOLOGY,
) -> Deployment:
    dag = EXPRESS_DAG.format(topology=topology, dag_id=dag_id, retries=retries)
    deployment = Deployment(root, os.environ["TRIDENT_ZK_HOSTS"], dag_id=dag_id, dag_file=dag)
    return _connect_to(deployment, url)


def _out(result: object) -> str:
    process = getattr(result, "process", result)
    return str(process.stdout + process.stderr)


def _clear(deployment: Deployment, run_id: str) -> subprocess.CompletedProcess[str]:
    """Run run ``run_id``'s task again, as a clear does (``airflow tasks test`` on the run:
    ``dags test`` makes a new run id every time)."""
    return run_airflow(
        deployment.home, "tasks", "test", deployment.dag_id, "batch.run", run_id,
        timeout_s=300, extra_env=deployment.env,
    )  # fmt: skip


def test_express_runs_retries_resume_and_replays(
    tmp_path_factory: pytest.TempPathFactory, connect_server: str, tmp_path: Path
) -> None:
    express = _express(tmp_path_factory.mktemp("express"), connect_server)
    # Given the express layout: one task per batch
    result = express.run()
    assert result.ok, result.describe()
    assert set(result.task_states) == {"batch.run"}, result.task_states
    assert express.counts() == expected(1)
    assert "spark-submit" not in _out(result)
    # When txid 2's processing fails once, Then the retry keeps txid 2 and counts stay exact
    marker = tmp_path / "failed-once"
    result = express.run(env={"TRIDENT_FAIL_ONCE_MARKER": str(marker)})
    assert marker.exists()
    assert result.ok, result.describe()
    assert express.counts() == expected(2)
    assert max(express.txids()) == 2
    assert "txid 2 success:" in _out(result)
    assert _attempt_txids(express) == {2}  # the success step rotated txid 1's away
    # When txid 3's commit fails part-way (partition 1's state), Then the retry resumes at the
    # commit: the staged attempt is committed, not processed again, and counts stay exact
    fault = commit_fault_marker(express.topology)
    fault.touch()
    try:
        result = express.run()
    finally:
        fault.unlink(missing_ok=True)
    output = _out(result)
    assert result.ok, result.describe()
    assert "partition 1 is unreachable" in output
    assert "resumes txid 3 at its commit" in output
    assert output.count("processing txid 3 of") == 1, output[-4000:]
    assert express.counts() == expected(3)
    # When a committed txid is replayed, Then nothing changes
    before = express.counts()
    replay = express.run(conf={"txid": 1})
    assert replay.ok, replay.describe()
    assert "replays txid 1: no wait for new data" in _out(replay)
    assert express.counts() == before
    # When txid 3's committed run is cleared (run again), Then it replays txid 3: no change
    cleared = _clear(express, result.run_id)
    assert cleared.returncode == 0, _out(cleared)[-4000:]
    assert "resumes txid 3 at its success" in _out(cleared)
    assert express.counts() == before
    assert max(express.txids()) == 3


@pytest.mark.long  # kept in the test command: the fault run's failed_run (standard layout)
def test_express_failed_txid_blocks_later_commits_until_cleared(
    tmp_path_factory: pytest.TempPathFactory, connect_server: str
) -> None:
    express = _express(
        tmp_path_factory.mktemp("express_blocked"), connect_server, dag_id="e2e_express_blocked",
        retries=0, topology="tests.harness.topologies:e2e_word_count",
    )  # fmt: skip
    assert express.run(logical_date="2026-04-01").ok
    # Given txid 2's run fails: a poison record fails its processing every time
    failed = express.run(logical_date="2026-04-02", env={POISON_WORD_ENV: "the"})
    assert not failed.ok
    assert failed.task_states == {"batch.run": "failed"}, failed.task_states
    # When a later new batch would begin behind it, Then it is skipped (no txid taken)
    later = express.run(logical_date="2026-04-03")
    assert later.task_states == {"batch.run": "skipped"}, later.task_states
    assert "no new batch begins while the earlier run" in _out(later)
    # When a run begins txid 3 anyway (no earlier run by date), Then its commit fails at once
    # with the other layouts' verdict, naming txid 2's failed run
    early = express.run(logical_date="2026-03-01")
    assert early.task_states == {"batch.run": "failed"}, early.task_states
    assert "txid 3 cannot commit before txid 2, and txid 2's run" in _out(early)
    assert express.counts() == expected(1)
    # When the failed run is cleared, Then it commits txid 2, and the other run resumes at its
    # commit (txid 3 staged) and commits it: exact counts
    retried = _clear(express, failed.run_id)
    assert retried.returncode == 0, _out(retried)[-4000:]
    assert express.counts() == expected(2)
    resumed = _clear(express, early.run_id)
    assert resumed.returncode == 0, _out(resumed)[-4000:]
    assert "resumes txid 3 at its commit" in _out(resumed)
    assert express.counts() == expected(3)


EXPRESS_BACKFILL_DAG = EXPRESS_DAG.format(
    topology="tests.harness.topologies:e2e_word_count", dag_id=BACKFILL_DAG_ID, retries=0
)


@pytest.mark.timeout(900)
@pytest.mark.long  # backfill stays in the test command: the standard layout's (test_backfill.py)
def test_express_backfilled_runs_bind_their_txids_and_repeats_change_nothing(
    tmp_path: Path, connect_server: str
) -> None:
    deployment = BackfillDeployment(tmp_path, os.environ["TRIDENT_ZK_HOSTS"])
    (tmp_path / "dags" / f"{BACKFILL_DAG_ID}.py").write_text(EXPRESS_BACKFILL_DAG)
    host, _, port = connect_server.rpartition(":")
    deployment.env["AIRFLOW_CONN_E2E_CONNECT"] = json.dumps(
        {"conn_type": "spark_connect", "host": host, "port": int(port)}
    )
    # Given txids 1..2 committed by two ordinary runs
    for _ in range(2):
        result = run_dag_test(
            BACKFILL_DAG_ID, home=deployment.home, extra_env=deployment.env, timeout_s=300
        )
        assert result.ok, result.describe()
    committed = deployment.state_snapshot()
    # When txids 1..4 are backfilled
    first = deployment.backfill(1, 4)
    assert first.returncode == 0, _output(first)
    # and a repeat of committed txid 2 and the new txid 3 run their one task
    done = deployment.run_tasks(
        ("batch.run", "trident_replay__txid_2"), ("batch.run", "trident_new__txid_3")
    )
    assert done.returncode == 0, _output(done)
    # Then each bound the txid its name says; the repeat changed nothing, txid 3 committed
    for run_id, txid in (("trident_replay__txid_2", 2), ("trident_new__txid_3", 3)):
        assert deployment.task_state(run_id, "batch.run") == "success", _output(done)
        assert deployment.xcom(run_id, "batch.run")["txid"] == txid
    assert deployment.xcom("trident_replay__txid_2", "batch.run")["committed"]["applied"] is False
    assert deployment.xcom("trident_new__txid_3", "batch.run")["committed"]["applied"] is True
    _state, ledger = deployment.state_snapshot()
    assert ledger[: len(committed[1])] == committed[1]
    assert len(ledger) == len(committed[1]) + 1
