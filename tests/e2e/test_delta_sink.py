"""The Delta sink through the DAG: the runs ``airflow-trident backfill`` creates, executed by
real Airflow tasks (as ``airflow tasks test`` runs them, in one process), real ``spark-submit``,
real ZooKeeper, a Delta table written by delta-rs. The backfilled txid's commit dies right
after its Delta commit (before ZooKeeper's compare-and-set) and is run again, as a cleared task
is; then, committed, it is cleared and run once more: the table holds every word once. ~50 s."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from tests.harness.airflow import prepare_airflow_home
from tests.harness.topologies import E2E_DATA

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

DAG_ID = "e2e_delta_sink"
DAG_FILE = f"""
from datetime import timedelta
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.sinks:e2e_delta_words",
    dag_id="{DAG_ID}",
    spark_conn_id="spark_local",
    retries=1,
    retry_delay=timedelta(seconds=1),
)
"""


TASKS_SCRIPT = """
import json, sys
from airflow.cli import cli_parser

parser = cli_parser.get_parser()
dag_id, out, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
results = []
for pair in pairs:
    task_id, run_id = pair.split("@")
    args = parser.parse_args(["tasks", "test", dag_id, task_id, run_id])
    try:
        args.func(args)
        results.append([pair, "ok"])
    except BaseException as exc:  # a failed task: go on, as the next try of a cleared task
        results.append([pair, f"{type(exc).__name__}: {exc}"[:300]])
with open(out, "w") as f:
    json.dump(results, f)
"""


def words_of_batches(batches: int) -> Counter[str]:
    """The words of the first ``batches`` batches (2 sentences per partition each)."""
    return Counter(
        w for rows in E2E_DATA.values() for (s,) in rows[: 2 * batches] for w in s.split()
    )


@pytest.mark.timeout(600)
@pytest.mark.long  # the Delta sink's exactness stays in the test command: tests/state
def test_delta_rows_are_written_once_across_a_dying_commit_and_cleared_commits(
    tmp_path: Path, zk_hosts: str
) -> None:
    # Given a DAG appending every word to a Delta table, whose first commit dies after Delta
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / f"{DAG_ID}.py").write_text(DAG_FILE)
    (tmp_path / "tasks.py").write_text(TASKS_SCRIPT)
    marker = tmp_path / "fail-after-delta-commit"
    marker.touch()
    table = tmp_path / "events"
    topology = f"e2e_delta_{uuid.uuid4().hex[:8]}"
    host, _, port = zk_hosts.partition(":")
    env = {
        "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT": json.dumps({
            "conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
            "extra": {"root": "/trident_e2e_delta"},
        }),
        "TRIDENT_STATE_URL": f"sqlite:///{tmp_path / 'state.db'}",
        "TRIDENT_STAGING_ROOT": str(tmp_path / "staging"),
        "TRIDENT_TEST_TOPOLOGY": topology,
        "TRIDENT_DELTA_PATH": str(table),
        "TRIDENT_DELTA_FAIL_MARKER": str(marker),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }  # fmt: skip
    home = prepare_airflow_home(tmp_path / "airflow", dags_folder=dags)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["timeout", "-s", "KILL", "300", sys.executable, *args],
            env=home.env(env), cwd=home.path, capture_output=True, text=True, check=False,
            start_new_session=True,
        )  # fmt: skip

    def output(done: subprocess.CompletedProcess[str]) -> str:
        return (done.stdout + done.stderr)[-4000:]

    # When the DAG is serialized and txid 1 backfilled (bound to a new run)
    serialized = run("-m", "airflow", "dags", "reserialize")
    assert serialized.returncode == 0, output(serialized)
    backfill = run(
        "-m", "airflow_trident.cli", "backfill", DAG_ID, "--from-txid", "1", "--to-txid", "1"
    )
    assert backfill.returncode == 0, output(backfill)
    # And its tasks run: the commit dies after its Delta commit and runs again; done, it is
    # cleared and runs once more
    one = "trident_new__txid_1"
    steps = [
        f"batch.begin@{one}", f"batch.process@{one}", f"batch.commit@{one}",
        f"batch.commit@{one}", f"batch.commit@{one}",
    ]  # fmt: skip
    results_file = tmp_path / "results.json"
    done = run(str(tmp_path / "tasks.py"), DAG_ID, str(results_file), *steps)
    assert done.returncode == 0, output(done)
    results = json.loads(results_file.read_text())
    # Then the injected death happened after Delta had txid 1
    assert not marker.exists(), results
    # And the table holds the words of txid 1, each once: no row twice, none lost
    dt = DeltaTable(str(table))
    words = Counter(pq.read_table(dt.file_uris())["word"].to_pylist())
    assert words == words_of_batches(1), (results, output(done))
    # And Delta's application transactions say which txid each partition wrote last
    versions = {
        dt.transaction_version(f"{topology}.events.p{i}of{n}") for n in range(1, 9)
        for i in range(n)
    } - {None}  # fmt: skip
    assert versions == {1}
