"""The process task's ``spark-submit`` on YARN and Kubernetes in cluster deploy mode.

YARN and Kubernetes cannot run here: these tests build the command the Spark provider's hook
would run (its own ``_build_spark_submit_command``, no mock) and, for YARN, run the real
``spark-submit``, which fails for want of a Hadoop configuration — after the operator got past
the durability check that used to refuse every YARN cluster submit.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from airflow_trident.coordination.client import ZkConfig
from airflow_trident.hooks.spark import SPARK_JOB, job_arguments
from airflow_trident.operators.process import ProcessBatchOperator

SECRET = "zk-digest-secret"
CONNECTIONS = {
    "spark_yarn": {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}},
    "spark_yarn_rm": {
        "conn_type": "spark",
        "host": "yarn",
        "extra": {"deploy-mode": "cluster", "yarn_resourcemanager_webapp_address": "http://rm:8088"},
    },
    "spark_k8s": {
        "conn_type": "spark",
        "host": "k8s://https://k8s.example:6443",
        "extra": {"deploy-mode": "cluster", "namespace": "etl"},
    },
}


@pytest.fixture(autouse=True)
def _spark_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    for conn_id, conn in CONNECTIONS.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


def _operator(conn_id: str, **kwargs: Any) -> ProcessBatchOperator:
    op = ProcessBatchOperator(
        task_id="process", topology="pkg.mod:topology", staging_root="hdfs://nn/stage",
        spark_conn_id=conn_id, **kwargs,
    )  # fmt: skip
    zk = ZkConfig(hosts="zk1:2181,zk2:2181", username="etl", password=SECRET)
    op.application_args = job_arguments(op.topology, 7, op.staging_root, zk, emit_wait_s=60.0)
    return op


def _command(op: ProcessBatchOperator) -> list[str]:
    op.prepare_submit(mode="cluster")
    command: list[str] = op._get_hook()._build_spark_submit_command(op.application)
    return command


def _confs(command: list[str]) -> dict[str, str]:
    pairs = [command[i + 1] for i, arg in enumerate(command) if arg == "--conf"]
    return dict(pair.split("=", 1) for pair in pairs)


def test_yarn_cluster_command() -> None:
    # Given the process task on a YARN connection in cluster deploy mode
    command = _command(_operator("spark_yarn"))
    # Then spark-submit targets YARN in cluster mode with the batch's job and arguments
    assert command[command.index("--master") + 1] == "yarn"
    assert command[command.index("--deploy-mode") + 1] == "cluster"
    assert command[-len(command) + command.index(SPARK_JOB):][:3] == [SPARK_JOB, "--topology",
                                                                       "pkg.mod:topology"]
    assert command[command.index("--txid") + 1] == "7"
    # and Spark logs WARN and above, with no local log4j2 file the remote driver cannot read
    confs = _confs(command)
    assert confs["spark.log.level"] == "WARN"
    assert "spark.driver.extraJavaOptions" not in confs
    # and no secret is on the command line
    assert not any(SECRET in arg for arg in command)


def test_kubernetes_cluster_command() -> None:
    command = _command(_operator("spark_k8s"))
    assert command[command.index("--master") + 1] == "k8s://https://k8s.example:6443"
    assert command[command.index("--deploy-mode") + 1] == "cluster"
    confs = _confs(command)
    assert confs["spark.kubernetes.namespace"] == "etl"
    assert confs["spark.log.level"] == "WARN"
    assert not any(SECRET in arg for arg in command)


@pytest.mark.parametrize(
    ("conn_id", "kwargs", "durable"),
    [
        ("spark_yarn", {}, False),  # the provider cannot find the job again: resubmit
        ("spark_yarn_rm", {"yarn_track_via_rm_api": True}, True),  # it can: resume
        ("spark_k8s", {}, True),
        ("spark_yarn_rm", {"yarn_track_via_rm_api": True, "durable": False}, False),  # asked
    ],
)
def test_durability_follows_what_the_provider_can_track(
    conn_id: str, kwargs: dict[str, Any], durable: bool
) -> None:
    op = _operator(conn_id, **kwargs)
    op.prepare_submit(mode="cluster")
    assert op.durable is durable


@pytest.mark.skipif(shutil.which("spark-submit") is None, reason="spark-submit not on PATH")
def test_yarn_cluster_submit_gets_past_the_durability_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.exceptions import AirflowException

    # Given no Hadoop configuration (YARN cannot run here)
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.delenv("YARN_CONF_DIR", raising=False)
    op = _operator("spark_yarn")
    # When the operator submits (the real spark-submit), Then it is spark-submit that fails,
    # for want of YARN, not the provider's "durable=True requires yarn_track_via_rm_api"
    with pytest.raises(AirflowException, match="Cannot execute"):
        op.submit({}, mode="cluster")
