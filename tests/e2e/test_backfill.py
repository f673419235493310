"""``airflow-trident backfill`` end to end: the runs it creates are executed by real Airflow
tasks (real ``spark-submit``, Spark local), on a SQLite metadata database, real ZooKeeper and
SQLite state.

Txids 1..2 are committed by two ``airflow dags test`` runs; then the command backfills txids
1..4 twice and 6..7 once. ``airflow dags test`` cannot execute a run someone else created (it
makes its own run id), so the created runs' tasks run as ``airflow tasks test DAG TASK RUN_ID``
does — Airflow's own command, several in one process (``TASKS_SCRIPT``) to pay Airflow's start
once: the begins of the new runs in reverse txid order (what a scheduler may well do), and one
repeated committed run from begin to commit. Slow: ~1.5 min.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.harness.airflow import prepare_airflow_home, run_dag_test

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

DAG_ID = "e2e_backfill"
DAG_FILE = f"""
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.topologies:e2e_word_count",
    dag_id="{DAG_ID}",
    spark_conn_id="spark_local",
    retries=0,
)
"""

TASKS_SCRIPT = """
import sys
from airflow.cli import cli_parser

parser = cli_parser.get_parser()
dag_id, pairs = sys.argv[1], sys.argv[2:]
for pair in pairs:
    task_id, run_id = pair.split("@")
    args = parser.parse_args(["tasks", "test", dag_id, task_id, run_id])
    args.func(args)
"""


class BackfillDeployment:
    """An Airflow home with the DAG, its connections, state, staging and a fresh topology."""

    def __init__(self, root: Path, zk_hosts: str) -> None:
        self.root = root
        self.topology = f"e2e_bf_{uuid.uuid4().hex[:8]}"
        dags = root / "dags"
        dags.mkdir()
        (dags / f"{DAG_ID}.py").write_text(DAG_FILE)
        (root / "tasks.py").write_text(TASKS_SCRIPT)
        host, _, port = zk_hosts.partition(":")
        self.state_db = root / "state.db"
        self.env = {
            "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT": json.dumps({
                "conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
                "extra": {"root": "/trident_e2e_backfill"},
            }),
            "TRIDENT_STATE_URL": f"sqlite:///{self.state_db}",
            "TRIDENT_STAGING_ROOT": str(root / "staging"),
            "TRIDENT_TEST_TOPOLOGY": self.topology,
            "SPARK_LOCAL_IP": "127.0.0.1",
        }  # fmt: skip
        self.home = prepare_airflow_home(root / "airflow", dags_folder=dags)

    def _run(self, *args: str, timeout_s: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["timeout", "-s", "KILL", str(timeout_s), sys.executable, *args],
            env=self.home.env(self.env),
            cwd=self.home.path,
            capture_output=True,
            text=True,
            check=False,
            start_new_session=True,
        )

    def backfill(self, from_txid: int, to_txid: int) -> subprocess.CompletedProcess[str]:
        """``airflow-trident backfill`` of the DAG."""
        return self._run(
            "-m", "airflow_trident.cli", "backfill", DAG_ID,
            "--from-txid", str(from_txid), "--to-txid", str(to_txid), timeout_s=120,
        )  # fmt: skip

    def run_tasks(self, *pairs: tuple[str, str]) -> subprocess.CompletedProcess[str]:
        """Run each ``(task_id, run_id)`` as ``airflow tasks test`` does, in this order."""
        args = [f"{task}@{run}" for task, run in pairs]
        return self._run(str(self.root / "tasks.py"), DAG_ID, *args, timeout_s=400)

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(f"file:{self.home.metadata_db}?mode=ro", uri=True)) as db:
            return db.execute(sql, params).fetchall()

    def created_runs(self) -> dict[str, Any]:
        """run id -> conf of the runs the command created."""
        rows = self.query(
            "SELECT run_id, conf FROM dag_run WHERE dag_id = ? AND run_id LIKE 'trident%'", DAG_ID
        )
        return {run_id: json.loads(conf) if conf else None for run_id, conf in rows}

    def xcom(self, run_id: str, task_id: str) -> dict[str, Any]:
        ((value,),) = self.query(
            "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = ? "
            "AND key = 'return_value'",
            DAG_ID,
            run_id,
            task_id,
        )
        return dict(json.loads(value))

    def task_state(self, run_id: str, task_id: str) -> str | None:
        ((state,),) = self.query(
            "SELECT state FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = ?",
            DAG_ID,
            run_id,
            task_id,
        )
        return None if state is None else str(state)

    def state_snapshot(self) -> tuple[object, ...]:
        """Every stored (word, count, txid), and the commit ledger (txid, attempt, keys)."""
        with closing(sqlite3.connect(self.state_db)) as db:
            state = sorted(db.execute(f'SELECT word, val, txid FROM "{self.topology}"'))
            ledger = db.execute(
                "SELECT txid, attempt_id, keys_written FROM trident_commit_ledger "
                "WHERE topology = ? ORDER BY txid",
                (self.topology,),
            ).fetchall()
        return tuple(state), tuple(ledger)


@pytest.fixture
def deployment(tmp_path: Path) -> BackfillDeployment:
    hosts = os.environ.get("TRIDENT_ZK_HOSTS")
    if not hosts:
        pytest.skip("TRIDENT_ZK_HOSTS unset: run `bash scripts/test.sh`")
    return BackfillDeployment(tmp_path, hosts)


def _output(done: subprocess.CompletedProcess[str]) -> str:
    return (done.stdout + done.stderr)[-4000:]


@pytest.mark.timeout(900)
@pytest.mark.long  # backfill stays in the test command: the real-scheduler fault run's
def test_backfilled_runs_begin_the_txids_their_names_say_and_repeats_change_nothing(
    deployment: BackfillDeployment,
) -> None:
    # Given txids 1..2 committed by two ordinary runs
    for _ in range(2):
        result = run_dag_test(DAG_ID, home=deployment.home, extra_env=deployment.env, timeout_s=300)
        assert result.ok, result.describe()
    committed = deployment.state_snapshot()
    # When txids 1..4 are backfilled, then again, then 6..7 (beyond the next txid, 5)
    first = deployment.backfill(1, 4)
    second = deployment.backfill(1, 4)
    gap = deployment.backfill(6, 7)
    # Then the first two create distinct runs, each pinned to the txid its name says
    assert first.returncode == 0, _output(first)
    assert second.returncode == 0, _output(second)
    assert deployment.created_runs() == {
        "trident_replay__txid_1": {"txid": 1},
        "trident_replay__txid_2": {"txid": 2},
        "trident_new__txid_3": {"txid": 3},
        "trident_new__txid_4": {"txid": 4},
        "trident_replay__txid_1__2": {"txid": 1},
        "trident_replay__txid_2__2": {"txid": 2},
        "trident_replay__txid_3": {"txid": 3},
        "trident_replay__txid_4": {"txid": 4},
    }
    # And the gap is refused in one line, without a traceback
    assert gap.returncode == 2, _output(gap)
    assert "Traceback" not in gap.stderr, _output(gap)
    assert "beyond the next txid, 5" in gap.stderr, _output(gap)
    # When the new runs' begins run in reverse txid order, and a repeat of committed txid 2
    # runs begin, process and commit
    repeat = "trident_replay__txid_2__2"
    done = deployment.run_tasks(
        ("batch.begin", "trident_new__txid_4"),
        ("batch.begin", "trident_new__txid_3"),
        ("batch.begin", repeat),
        ("batch.process", repeat),
        ("batch.commit", repeat),
    )
    assert done.returncode == 0, _output(done)
    # Then each begin bound exactly the txid its run's name says
    for run_id, txid in (("trident_new__txid_4", 4), ("trident_new__txid_3", 3), (repeat, 2)):
        assert deployment.task_state(run_id, "batch.begin") == "success", _output(done)
        assert deployment.xcom(run_id, "batch.begin")["txid"] == txid
    # And the repeated committed txid was processed and committed without changing any state
    assert deployment.task_state(repeat, "batch.commit") == "success", _output(done)
    assert deployment.xcom(repeat, "batch.commit")["applied"] is False
    assert deployment.state_snapshot() == committed
