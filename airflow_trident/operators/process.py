"""The process task: a Spark job (through the Spark provider's ``SparkSubmitOperator``) that
emits the batch, runs the plan and stages the results.

It is the generic adapter of a ``spark-submit`` step: a ``SparkSubmitOperator`` holding its task
object (:class:`~airflow_trident.tasks.batch_task.BatchTask`), which runs its slice
(``process``) through the driver by a route that submits this operator's job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_trident.batch.driver import BatchRun
from airflow_trident.batch.routes import BySubmit, Route
from airflow_trident.hooks.config import spark_read_here_bytes, spark_read_here_records
from airflow_trident.hooks.spark import (
    SPARK_JOB,
    deploy_mode,
    durable_submit,
    exported,
    job_arguments,
    job_conf,
    job_secrets,
    spark_job_errors,
    warn_if_remote_driver,
)
from airflow_trident.operators.lineage import task_lineage
from airflow_trident.operators.metrics import RECORDING
from airflow_trident.tasks.base import txid_of
from airflow_trident.tasks.batch_task import (
    BatchTask,
    Recording,
    held_task,
    rendered,
)

__all__ = ["SPARK_JOB", "ProcessBatchOperator"]


class ProcessBatchOperator(SparkSubmitOperator):
    """Process this run's batch on Spark: emit, run the plan, stage results plus a manifest.

    The topology is shipped by module reference (the package must be importable where the
    driver runs); the txid comes from the begin task; every run of this task is a new attempt.
    Secrets (the ZooKeeper digest password, the state database URL) reach the job through the
    environment ``spark-submit`` inherits, never its command line or ``env_vars`` (which the
    Spark provider turns into ``--conf`` arguments on YARN and Kubernetes). Spark settings
    (connection, ``conf``, ``py_files``...) are the ``SparkSubmitOperator``'s.

    :param topology: ``package.module:attribute`` of the topology (templated).
    :param staging_root: where results are staged (templated).
    :param spark_conn_id: the Spark connection (master, deploy mode, ...).
    :param emit_wait_s: how long a transactional partitioned spout's emit waits for txid-1's.
    :param durable: whether a retry reconnects to the Spark job of an earlier try (the Spark
        provider's; unset: where the provider can track the job, see
        :func:`~airflow_trident.hooks.spark.durable_submit` for why either is exact).
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "topology",
        "staging_root",
        "zookeeper_conn_id",
        "state_conn_id",
    )
    ui_color = "#fdf8e8"
    batch_slice: tuple[str, ...] = ("process",)
    recording: Recording = RECORDING
    _batch_task: BatchTask | None = None

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
        self._durable_requested: bool | None = kwargs.get("durable")
        super().__init__(application=SPARK_JOB, conn_id=spark_conn_id, **kwargs)
        self.topology = topology
        self.staging_root = staging_root
        self.zookeeper_conn_id = zookeeper_conn_id
        self.spark_conn_id = spark_conn_id
        self.deploy_mode = kwargs.get("deploy_mode")
        self.state_conn_id = state_conn_id
        self.begin_task_id = begin_task_id
        self.emit_wait_s = emit_wait_s

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        rendered(self, super().render_template_fields, context, jinja_env)

    def batch_task(self) -> BatchTask:
        """This task's task object (:func:`~airflow_trident.tasks.batch_task.held_task`)."""
        return held_task(self)

    def execute(self, context: Any) -> dict[str, Any]:  # type: ignore[override]
        txid = txid_of(context, self.begin_task_id)
        task = self.batch_task()
        run = BatchRun(txid)

        def submitted() -> Route:  # the route: this operator's spark-submit of the job
            return BySubmit(lambda step, _, wait_s: self._submit_job(context, txid, wait_s))

        with (
            task.hook().session(),  # one ZooKeeper session for the task, not one per step
            task.batch_steps() as steps,
        ):
            task.drive(context, steps, self.batch_slice, run, process_route=submitted)
        return run.summary

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The task's lineage: the topology's spouts in, its states out
        (:func:`~airflow_trident.operators.lineage.task_lineage`)."""
        return task_lineage(self.topology, self.state_conn_id)

    def _submit_job(self, context: Any, txid: int, emit_wait_s: float) -> None:
        """The ``spark-submit`` of the process job (the route's ``submit``): its arguments
        (never a secret), its secrets exported only while it runs, its own error if it fails."""
        hook = self.batch_task().hook()
        config = hook.zookeeper_config()
        self.application_args = job_arguments(
            self.topology, txid, self.staging_root, config, emit_wait_s=emit_wait_s,
            read_here_bytes=spark_read_here_bytes(), read_here_records=spark_read_here_records(),
        )  # fmt: skip
        mode = deploy_mode(self.spark_conn_id, self.deploy_mode)
        secrets = job_secrets(config, hook.state_url())
        warn_if_remote_driver(mode, secrets)
        with exported(secrets), spark_job_errors(self.staging_root, self.topology, txid, "process"):
            self.submit(context, mode=mode)

    def prepare_submit(self, *, mode: str | None) -> None:
        """Settle the Spark conf (the batch's defaults, :func:`~airflow_trident.hooks.spark.
        job_conf`) and durability (:func:`~airflow_trident.hooks.spark.durable_submit`) of the
        ``spark-submit`` in deploy ``mode``; ``application_args`` are set before."""
        self.conf = job_conf(self.conf, mode=mode)
        self.durable = durable_submit(self._get_hook(), self._durable_requested)

    def submit(self, context: Any, *, mode: str | None) -> None:
        """The ``spark-submit`` of the job: the Spark provider's operator, prepared."""
        self.prepare_submit(mode=mode)
        super().execute(context)
