"""The local cluster of ``scripts/cluster.sh`` for the cluster tests (``-m cluster``), and a
3-broker Kafka cluster (:func:`kafka_cluster`).

These tests run only with ``TRIDENT_CLUSTER=1`` (``bash scripts/cluster-test.sh`` sets it): the
README test command skips them. The session fixture :func:`local_cluster` uses the cluster
that runs in ``TRIDENT_CLUSTER_DIR`` (the script's default if unset), or starts it with the
script and stops it at the end.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness.kafka import PrivateKafkaCluster

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "cluster.sh"


@pytest.fixture(autouse=True)
def _cluster_tests_need_opt_in() -> None:
    if os.environ.get("TRIDENT_CLUSTER") != "1":
        pytest.skip("cluster test: set TRIDENT_CLUSTER=1, or run `bash scripts/cluster-test.sh`")


def cluster_script(*args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
    """Run ``scripts/cluster.sh *args`` (its output captured; never raises on its exit)."""
    return subprocess.run(
        ["timeout", "-s", "KILL", f"{timeout_s:g}", "bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        check=False,
    )


@dataclass(frozen=True)
class LocalCluster:
    """The running cluster: its settings (``scripts/cluster.sh env``) and its processes."""

    settings: dict[str, str]

    @property
    def directory(self) -> Path:
        return Path(self.settings["TRIDENT_CLUSTER_DIR"])

    @property
    def spark_master(self) -> str:
        return self.settings["TRIDENT_SPARK_MASTER"]

    @property
    def zk_ensemble(self) -> str:
        return self.settings["TRIDENT_ZK_ENSEMBLE"]

    def spark_workers(self) -> dict[str, int]:
        """Process (group) id of each live Spark worker, by name (``spark-worker1``, ...)."""
        workers = {}
        for pid_file in sorted((self.directory / "pids").glob("spark-worker*.pid")):
            pid = int(pid_file.read_text())
            if Path(f"/proc/{pid}").exists():
                workers[pid_file.stem] = pid
        return workers

    def worker_apps(self, worker: str) -> set[str]:
        """The application directories a worker created (one per app that ran an executor)."""
        return {p.name for p in (self.directory / "spark" / worker).glob("app-*")}

    def start(self) -> None:
        """Start what is not running (a killed worker comes back)."""
        done = cluster_script("start")
        assert done.returncode == 0, done.stderr[-3000:]


def _settings() -> dict[str, str]:
    done = cluster_script("env", timeout_s=30)
    assert done.returncode == 0, done.stderr
    pairs = (shlex.split(line)[1].split("=", 1) for line in done.stdout.splitlines() if line)
    return dict(pairs)


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    if os.environ.get("TRIDENT_CLUSTER") != "1":
        pytest.skip("cluster test: set TRIDENT_CLUSTER=1, or run `bash scripts/cluster-test.sh`")
    started_here = cluster_script("status", timeout_s=30).returncode != 0
    cluster = LocalCluster(_settings())
    cluster.start()
    yield cluster
    if started_here:
        cluster_script("stop")


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateKafkaCluster]:
    """Three KRaft brokers on loopback (``tests/harness/kafka.py``), beside the Spark standalone
    cluster and the ZooKeeper ensemble of ``scripts/cluster.sh``; stopped at the session's end.
    Tests may kill and restart its nodes (``cluster.node(i).kill()``)."""
    if os.environ.get("TRIDENT_CLUSTER") != "1":
        pytest.skip("cluster test: set TRIDENT_CLUSTER=1, or run `bash scripts/cluster-test.sh`")
    with PrivateKafkaCluster(tmp_path_factory.mktemp("kafka")) as cluster:
        yield cluster
