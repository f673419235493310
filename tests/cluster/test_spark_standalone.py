"""Batches on a Spark standalone cluster (a master and two workers of ``scripts/cluster.sh``):
the process and commit steps are ``spark-submit``-ted to ``spark://`` through the DAG's Spark
connection, with real Airflow task execution (``airflow dags test``), the cluster's 3-node
ZooKeeper ensemble, PostgreSQL state and a staging directory every worker reads.

Run with ``bash scripts/cluster-test.sh`` (~3 min; skipped by the README test command).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.cluster.conftest import LocalCluster
from tests.harness.airflow import (
    AirflowHome,
    DagTestResult,
    prepare_airflow_home,
    run_dag_test,
)
from tests.harness.spark_cluster import cluster_expected
from tests.runtime.test_jvm_split import submit_split

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.cluster]

DAG_ID = "cluster_word_count"
# The executors load the topology in their own environment: its settings go to them as
# spark.executorEnv.* (the stall marker only to them: the driver must not stall).
DAG_FILE = """
import os
from datetime import timedelta
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.spark_cluster:cluster_word_count",
    dag_id="cluster_word_count",
    spark_conn_id="spark_cluster",
    state_conn_id="cluster_state_pg",
    commit_mode="spark",
    spark_conf={
        "spark.executorEnv.TRIDENT_TEST_TOPOLOGY": os.environ["TRIDENT_TEST_TOPOLOGY"],
        "spark.executorEnv.TRIDENT_STALL_ONCE_MARKER": os.environ.get("CLUSTER_STALL_MARKER", ""),
        "spark.sql.shuffle.partitions": "2",
    },
    retries=1,
    retry_delay=timedelta(seconds=1),
)
"""


class ClusterDeployment:
    """An isolated Airflow home whose DAG runs on the standalone cluster."""

    def __init__(self, root: Path, cluster: LocalCluster, pg_url: str) -> None:
        self.topology = f"cluster_{uuid.uuid4().hex[:8]}"
        self.pg_url = pg_url
        dags = root / "dags"
        dags.mkdir()
        (dags / f"{DAG_ID}.py").write_text(DAG_FILE)
        master_host, _, master_port = cluster.spark_master.rpartition(":")
        url = sa.make_url(pg_url)
        self.env = {
            "AIRFLOW_CONN_SPARK_CLUSTER": json.dumps({
                "conn_type": "spark", "host": master_host, "port": int(master_port),
            }),
            "AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT": json.dumps({
                "conn_type": "trident_zookeeper", "host": cluster.zk_ensemble,
                "extra": {"root": "/trident_cluster"},
            }),
            "AIRFLOW_CONN_CLUSTER_STATE_PG": json.dumps({
                "conn_type": "postgres", "host": url.host, "port": url.port,
                "login": url.username, "password": url.password, "schema": url.database,
            }),
            "TRIDENT_STAGING_ROOT": str(root / "staging"),
            "TRIDENT_HOME": str(root / "trident_home"),
            "TRIDENT_TEST_TOPOLOGY": self.topology,
            "SPARK_LOCAL_IP": "127.0.0.1",
        }  # fmt: skip
        self.home: AirflowHome = prepare_airflow_home(root / "airflow", dags_folder=dags)

    def run(self, env: dict[str, str] | None = None) -> DagTestResult:
        result = run_dag_test(
            DAG_ID, home=self.home, extra_env={**self.env, **(env or {})}, timeout_s=420
        )
        assert not result.timed_out, result.describe()
        return result

    def counts(self) -> dict[str, int]:
        engine = sa.create_engine(self.pg_url)
        with engine.connect() as conn:
            rows = conn.execute(sa.text(f'SELECT word, val FROM "{self.topology}"')).all()
        engine.dispose()
        return {r[0]: int(r[1]) for r in rows}


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory, local_cluster: LocalCluster
) -> ClusterDeployment:
    pg_url = os.environ.get("TRIDENT_PG_URL")
    if not pg_url:
        pytest.skip("TRIDENT_PG_URL unset: run `bash scripts/cluster-test.sh`")
    return ClusterDeployment(tmp_path_factory.mktemp("cluster"), local_cluster, pg_url)


@pytest.mark.timeout(900)
def test_batches_run_on_both_workers_and_count_exactly(
    deployment: ClusterDeployment, local_cluster: LocalCluster
) -> None:
    # Given a standalone master with two registered workers
    workers = local_cluster.spark_workers()
    assert len(workers) == 2, workers
    apps_before = {w: local_cluster.worker_apps(w) for w in workers}
    for batch in (1, 2):
        # When one DAG run (one batch) runs its process and commit steps on the cluster
        result = deployment.run()
        # Then it succeeds and the counts equal a direct count of the batches' data
        assert result.ok, result.describe()
        assert deployment.counts() == cluster_expected(batch)
    # and both workers ran executors of the process and the commit jobs of both batches
    for worker, before in apps_before.items():
        assert len(local_cluster.worker_apps(worker) - before) == 4, worker


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _kill_stalled_worker(
    marker: Path, cluster: LocalCluster, run: threading.Thread, killed: list[str]
) -> None:
    """Wait for the stalled executor's Python worker, then SIGKILL the process groups of its
    Spark worker (the worker JVM and its executor JVM) and of its Python workers (PySpark's
    daemon puts them in a group of their own)."""
    while not marker.exists() or not marker.read_text().strip():
        if not run.is_alive():
            return
        time.sleep(0.2)
    python_worker = int(marker.read_text())
    python_group = os.getpgid(python_worker)
    workers = {pid: name for name, pid in cluster.spark_workers().items()}
    ancestor = _parent(python_worker)
    while ancestor > 1 and ancestor not in workers:
        ancestor = _parent(ancestor)
    if ancestor in workers:
        os.killpg(ancestor, signal.SIGKILL)
        os.killpg(python_group, signal.SIGKILL)
        killed.append(workers[ancestor])


@pytest.mark.timeout(900)
def test_worker_killed_during_process_the_batch_is_retried_and_exact(
    deployment: ClusterDeployment, local_cluster: LocalCluster, tmp_path: Path
) -> None:
    # Given two batches committed, and the next batch's first executor task stalling
    before = deployment.counts()
    assert before == cluster_expected(2)
    marker = tmp_path / "stalled"
    outcome: dict[str, Any] = {}
    run = threading.Thread(
        target=lambda: outcome.update(result=deployment.run({"CLUSTER_STALL_MARKER": str(marker)}))
    )
    killed: list[str] = []
    try:
        # When the Spark worker running that task is killed during the process step
        run.start()
        _kill_stalled_worker(marker, local_cluster, run, killed)
        run.join()
    finally:
        local_cluster.start()  # the killed worker comes back for the next tests
    # Then the stalled task ran on an executor of a worker, which was killed ...
    assert len(killed) == 1, (killed, marker.exists())
    # ... and the batch was retried on the surviving worker: the run succeeded, exact counts
    result = outcome["result"]
    assert result.ok, result.describe()
    assert deployment.counts() == cluster_expected(3)


def test_the_java_split_loads_on_the_workers_executors(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    # Given an application on the standalone master: executors in the workers' own JVMs, the
    # jar only in the driver's installed package
    texts: list[str | None] = ["a\u3000b\x1cc", None, " \u2029 ", "x y"] * 50
    result, output = submit_split(tmp_path, local_cluster.spark_master, texts)
    # Then the driver's ADD JAR shipped it: the self-check and the words ran on the executors
    assert result == {"function": "trident_str_split",
                      "words": [[] if t is None else t.split() for t in texts]}  # fmt: skip
    assert "words split by io.github.airflowtrident.spark.StrSplit" in output
