"""The generic operator of a batch (:class:`BatchStepsOperator`: a slice of the batch's steps
that does not start with readiness) and the begin, commit and success tasks, each it with its
slice preset.

The operator runs its slice through the driver (:func:`airflow_trident.batch.driver.drive`)
with the handlers of its task object (:class:`~airflow_trident.tasks.batch_task.BatchTask`);
a commit that must wait for txid-1 in the triggerer is a ``Defer`` value the operator turns into
Airflow's deferral, resumed in ``execute_complete``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_trident.batch.driver import BatchRun
from airflow_trident.batch.routes import COMMIT_MODES, CommitRoute
from airflow_trident.operators.lineage import task_lineage
from airflow_trident.operators.metrics import RECORDING
from airflow_trident.tasks.base import default_deferrable, txid_of
from airflow_trident.tasks.batch_task import (
    BatchTask,
    Recording,
    held_task,
    rendered,
)
from airflow_trident.tasks.begin import begin_batch, begun_line

__all__ = [
    "COMMIT_MODES",
    "BatchStepsOperator",
    "BatchSuccessOperator",
    "BeginBatchOperator",
    "CommitBatchOperator",
    "begin_batch",
    "begun_line",
]  # begin_batch and begun_line: airflow_trident.tasks.begin's, here for the begin task


class BatchStepsOperator(BaseOperator):
    """Runs the slice ``batch_slice`` of a batch's steps (a class's or an instance's preset:
    begin; commit; success; commit and success; process on Spark Connect) through the driver,
    with the handlers of its task object. XCom: the slice's summary (its first step's, with the
    later steps' in it: :mod:`~airflow_trident.tasks.batch_task`).

    :param topology: ``package.module:attribute`` of the topology (templated).
    :param staging_root: where processed batches are staged (templated).
    :param zookeeper_conn_id: the ``trident_zookeeper`` connection (templated).
    :param state_conn_id: the state connection (templated; ``None``: the embedded default).
    :param keep_txids: ZooKeeper keeps batch metadata for that many txids.
    :param begin_task_id: the task whose XCom holds the run's txid (a slice without begin).
    """

    template_fields: Sequence[str] = (
        "topology", "staging_root", "zookeeper_conn_id", "state_conn_id",
    )  # fmt: skip
    batch_slice: tuple[str, ...] = ()
    """The steps this task runs (a contiguous slice of the driver's, without readiness)."""
    recording: Recording = RECORDING
    _batch_task: BatchTask | None = None

    def __init__(
        self,
        *,
        topology: str,
        staging_root: str,
        zookeeper_conn_id: str = "trident_zookeeper_default",
        state_conn_id: str | None = None,
        keep_txids: int = 16,
        begin_task_id: str = "begin",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.topology = topology
        self.staging_root = staging_root
        self.zookeeper_conn_id = zookeeper_conn_id
        self.state_conn_id = state_conn_id
        self.keep_txids = keep_txids
        self.begin_task_id = begin_task_id

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        rendered(self, super().render_template_fields, context, jinja_env)

    def batch_task(self) -> BatchTask:
        """This task's task object (:func:`~airflow_trident.tasks.batch_task.held_task`)."""
        return held_task(self)

    def execute(self, context: Any) -> Any:
        return self._drive(context)

    def execute_complete(
        self, context: Any, event: dict[str, Any] | None = None, step: str = "commit"
    ) -> Any:
        """Resume after the trigger saw txid-1 committed (or fail: txid-1 cannot commit)."""
        self.batch_task().resumed(event)
        return self._drive(context, start=step)

    def _drive(self, context: Any, *, start: str | None = None) -> Any:
        """Run the slice (from ``start``; default: its first step); defer when its commit must
        wait in the triggerer. Its XCom."""
        run = BatchRun()
        if "begin" not in self.batch_slice:
            run.txid = txid_of(context, self.begin_task_id)
        task = self.batch_task()
        deferral = task.run_slice(context, self.batch_slice, run, start=start)
        if deferral is not None:
            trigger, step = deferral
            self.defer(trigger=trigger, method_name="execute_complete", kwargs={"step": step})
        return run.summary

    def on_kill(self) -> None:
        """Stop a running ``spark-submit`` commit (its applied partitions keep their txid)."""
        if self._batch_task is not None:
            self._batch_task.on_kill()


class BeginBatchOperator(BatchStepsOperator):
    """Trident's coordinator for this run: bind the run to its txid and store the batch metadata.

    The first run of a DAG run allocates the next txid; a retry or a cleared task re-binds the
    same txid (transactional spouts get the same metadata). ``dag_run.conf = {"txid": N}``
    replays txid ``N``. Returns (XCom) the txid, attempt and each spout's metadata.
    ``depends_on_past`` is on by default: begins (fast) run in logical-date order, so txids
    follow the runs' order and the commit's ``depends_on_past`` cannot deadlock.

    :param topology: ``package.module:attribute`` of the topology (templated).
    :param staging_root: where processed batches are staged (templated).
    :param zookeeper_conn_id: the ``trident_zookeeper`` connection.
    """

    ui_color = "#e8f4fd"
    batch_slice = ("begin",)

    def __init__(self, **kwargs: Any) -> None:
        # Begins run in logical-date order, so txids follow it and the commits'
        # depends_on_past (also by logical date) can never wait on a later txid.
        kwargs.setdefault("depends_on_past", True)
        super().__init__(**kwargs)


class CommitBatchOperator(BatchStepsOperator):
    """Apply the staged batch to state, strictly after txid-1 committed.

    ``depends_on_past`` (on by default) keeps Airflow's order, but it does not enforce
    contiguity (manual runs pass it trivially): the task also waits until ZooKeeper's committed
    txid is txid-1 — in the triggerer when ``deferrable`` (no worker slot held), else polling —
    and the commit itself is a compare-and-set. A txid already committed changes nothing.
    Returns (XCom) the records in (per source partition), keys written per state, each
    partition's range (``partitions``) and the metadata.

    Where the staged partitions are applied (``commit_mode``):

    * ``"worker"`` — in this task, with pyarrow and batched SQL, one state commit per partition;
    * ``"spark"`` — by Spark: one Spark task per staged partition, while the driver checks the
      order and does the compare-and-set. For batches too large for one Airflow worker. With
      ``spark_connect_conn_id`` (the DAG's ``process_mode="connect"``) this task is the driver,
      a client of the Spark Connect server whose executors apply the partitions (no JVM start:
      :func:`~airflow_trident.hooks.spark.connect_route`); without it, a
      ``spark-submit`` job through the Spark provider's hook;
    * ``"auto"`` — ``"spark"`` when the batch staged at least ``spark_commit_min_rows`` rows.

    The wait and the route are every committing task's (its task object's,
    :class:`~airflow_trident.tasks.batch_task.BatchTask`, over :mod:`airflow_trident.batch.order`
    and :mod:`airflow_trident.batch.routes`).

    When txid-1 is already processed (staged), its commit is imminent: the task then waits for
    it here, up to ``inline_wait_s``, before deferring — ordered commits form a chain, and a
    deferral's round trip (triggerer, scheduler, a new task process) would be paid per batch.

    :param deferrable: wait for txid-1 in the triggerer; ``None`` (the default): Airflow's
        ``[operators] default_deferrable``.
    :param poll_interval: seconds between checks of the committed txid (non-deferrable wait;
        the trigger's fallback re-check).
    :param inline_wait_s: how long to wait here for an imminent txid-1 before deferring.
    :param commit_mode: ``"worker"``, ``"spark"`` or ``"auto"``.
    :param spark_conn_id: the Spark connection of a Spark commit by ``spark-submit``.
    :param spark_connect_conn_id: a ``spark_connect`` connection: a Spark commit then runs
        through that Spark Connect server instead of ``spark-submit`` (templated).
    :param spark_conf: Spark conf of a Spark commit.
    :param py_files: ``--py-files`` of a Spark commit (the topology's package).
    :param spark_commit_min_rows: the ``"auto"`` threshold.
    :param success_after: also do the success step (:class:`BatchSuccessOperator`'s) once
        committed, in this task (the DAG's ``layout="compact"``). A retry after a failed
        success step commits nothing twice (the commit is then a no-op) and does it again.
    """

    template_fields: Sequence[str] = (
        *BatchStepsOperator.template_fields, "spark_conn_id", "spark_connect_conn_id",
    )  # fmt: skip
    ui_color = "#fdf1e8"

    def __init__(
        self,
        *,
        deferrable: bool | None = None,
        poll_interval: float = 2.0,
        commit_mode: str = "worker",
        spark_conn_id: str = "spark_default",
        spark_conf: dict[str, Any] | None = None,
        py_files: str | None = None,
        spark_commit_min_rows: int = 1_000_000,
        inline_wait_s: float = 30.0,
        spark_connect_conn_id: str | None = None,
        success_after: bool = False,
        **kwargs: Any,
    ) -> None:
        CommitRoute(mode=commit_mode)  # refuses an unknown mode when the DAG is parsed
        kwargs.setdefault("depends_on_past", True)
        super().__init__(**kwargs)
        self.deferrable = default_deferrable() if deferrable is None else deferrable
        self.poll_interval = poll_interval
        self.commit_mode = commit_mode
        self.spark_conn_id = spark_conn_id
        self.spark_conf = spark_conf
        self.py_files = py_files
        self.spark_commit_min_rows = spark_commit_min_rows
        self.inline_wait_s = inline_wait_s
        self.spark_connect_conn_id = spark_connect_conn_id
        self.success_after = success_after
        # the success task's step too, in this task (the compact layout: one task fewer)
        self.batch_slice = ("commit", "success") if success_after else ("commit",)

    def route(self) -> CommitRoute:
        """Which route this task's commits take (its rendered arguments)."""
        return self.batch_task().commit_route()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The task's lineage: the topology's spouts in, its states out
        (:func:`~airflow_trident.operators.lineage.task_lineage`)."""
        return task_lineage(self.topology, self.state_conn_id)


class BatchSuccessOperator(BatchStepsOperator):
    """Tell the spouts the batch committed; rotate old metadata and staging away."""

    ui_color = "#e8fdf0"
    batch_slice = ("success",)
