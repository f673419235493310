"""The process task: a Spark job (through the Spark provider's ``SparkSubmitOperator``) that
emits the batch, runs the plan and stages the results."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

import airflow_trident.runtime
from airflow_trident.coordination.attempt import TransactionAttempt
from airflow_trident.hooks.zookeeper import ZooKeeperHook
from airflow_trident.operators.steps import STATE_URL_ENV, open_steps, state_url_from, txid_of

__all__ = ["SPARK_JOB", "ProcessBatchOperator"]

SPARK_JOB = str(Path(airflow_trident.runtime.__file__).parent / "spark_job.py")
"""The Spark application that processes one batch (``airflow_trident/runtime/spark_job.py``)."""

ZK_PASSWORD_ENV = "TRIDENT_ZK_PASSWORD"


class ProcessBatchOperator(SparkSubmitOperator):
    """Process this run's batch on Spark: emit, run the plan, stage results plus a manifest.

    The topology is shipped by module reference (the package must be importable where the
    driver runs); the txid comes from the begin task; every run of this task is a new attempt.
    Secrets (the ZooKeeper digest password, the state database URL) reach the job through its
    environment, never its command line. Spark settings (connection, ``conf``, ``py_files``...)
    are the ``SparkSubmitOperator``'s.

    :param topology: ``package.module:attribute`` of the topology (templated).
    :param staging_root: where results are staged (templated).
    :param spark_conn_id: the Spark connection (master, deploy mode, ...).
    :param emit_wait_s: how long a transactional partitioned spout's emit waits for txid-1's.
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "topology",
        "staging_root",
    )
    ui_color = "#fdf8e8"

    def __init__(
        self,
        *,
        topology: str,
        staging_root: str,
        zookeeper_conn_id: str = "trident_zookeeper_default",
        spark_conn_id: str = "spark_default",
        state_conn_id: str | None = None,
        begin_task_id: str = "begin",
        emit_wait_s: float = 600.0,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("name", "trident-batch")
        super().__init__(application=SPARK_JOB, conn_id=spark_conn_id, **kwargs)
        self.topology = topology
        self.staging_root = staging_root
        self.zookeeper_conn_id = zookeeper_conn_id
        self.state_conn_id = state_conn_id
        self.begin_task_id = begin_task_id
        self.emit_wait_s = emit_wait_s

    def execute(self, context: Any) -> dict[str, Any]:  # type: ignore[override]
        txid = txid_of(context, self.begin_task_id)
        config = ZooKeeperHook(zookeeper_conn_id=self.zookeeper_conn_id).get_config()
        args = [
            "--topology", self.topology,
            "--txid", str(txid),
            "--staging-root", self.staging_root,
            "--zk-hosts", config.hosts,
            "--zk-root", config.root,
            "--emit-wait", str(self.emit_wait_s),
        ]  # fmt: skip
        if config.chroot:
            args += ["--zk-chroot", config.chroot]
        if config.username:
            args += ["--zk-user", config.username]
        env = dict(self.env_vars or {})
        if config.password:
            env[ZK_PASSWORD_ENV] = config.password
        url = state_url_from(self.state_conn_id)
        if url is not None:
            env[STATE_URL_ENV] = url
        self.application_args = args
        self.env_vars = env
        python = sys.executable
        self.conf = {"spark.pyspark.python": python, "spark.pyspark.driver.python": python,
                     **(self.conf or {})}  # fmt: skip
        self.log.info("processing txid %d of %s on Spark", txid, self.topology)
        super().execute(context)
        return self._summary(txid)

    def _summary(self, txid: int) -> dict[str, Any]:
        with open_steps(
            self.topology, zookeeper_conn_id=self.zookeeper_conn_id, staging_root=self.staging_root
        ) as steps:
            attempt = steps.store.attempt(txid) or TransactionAttempt(txid, 0)
            manifest = steps.staging.read_manifest(attempt)
        summary = {
            "txid": txid,
            "attempt_id": attempt.attempt_id,
            "emitted": manifest["emitted"],
            "records_in": sum(sum(p.values()) for p in manifest["emitted"].values()),
            "staged_rows": {n: sum(f["rows"] for f in s["files"])
                            for n, s in manifest["states"].items()},
        }  # fmt: skip
        self.log.info("txid %d processed: %s", txid, summary)
        return summary
