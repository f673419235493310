"""The begin, commit and success tasks of a batch (thin over :class:`BatchSteps`)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from airflow.sdk import BaseOperator

from airflow_trident.batch.routes import COMMIT_MODES, CommitRoute
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.operators.commit_turn import CommitInTurn
from airflow_trident.operators.lineage import TridentLineageMixin
from airflow_trident.operators.metrics import emit_lag
from airflow_trident.tasks.base import TridentTask, default_deferrable, txid_of
from airflow_trident.tasks.begin import begin_batch, begun_line

__all__ = [
    "COMMIT_MODES",
    "BatchSuccessOperator",
    "BeginBatchOperator",
    "CommitBatchOperator",
    "begin_batch",
    "begun_line",
]  # begin_batch and begun_line: airflow_trident.tasks.begin's, here for the begin task


class _BatchOperator(TridentTask, BaseOperator):
    """Arguments every batch task shares."""

    template_fields: Sequence[str] = (
        "topology", "staging_root", "zookeeper_conn_id", "state_conn_id",
    )  # fmt: skip

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

    def _steps(self) -> AbstractContextManager[BatchSteps]:
        return self.trident_hook().batch_steps(
            self.topology, staging_root=self.staging_root, keep_txids=self.keep_txids
        )


class BeginBatchOperator(_BatchOperator):
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

    def __init__(self, **kwargs: Any) -> None:
        # Begins run in logical-date order, so txids follow it and the commits'
        # depends_on_past (also by logical date) can never wait on a later txid.
        kwargs.setdefault("depends_on_past", True)
        super().__init__(**kwargs)

    def execute(self, context: Any) -> dict[str, Any]:
        with self._steps() as steps:
            return begin_batch(context, steps, self.log)


class CommitBatchOperator(TridentLineageMixin, CommitInTurn, _BatchOperator):
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

    The wait and the route are every committing task's (:class:`~airflow_trident.operators.
    commit_turn.CommitInTurn`, over :mod:`airflow_trident.batch.order` and
    :mod:`airflow_trident.batch.routes`).

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
        *_BatchOperator.template_fields, "spark_conn_id", "spark_connect_conn_id",
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

    def execute(self, context: Any) -> dict[str, Any]:
        txid = txid_of(context, self.begin_task_id)
        with self._steps() as steps:
            if self.commit_in_turn(
                context, steps, txid, deferrable=self.deferrable, poll_s=self.poll_interval,
                inline_wait_s=self.inline_wait_s, resume_method="execute_complete",
            ):  # fmt: skip
                return self._commit_then_success(context, steps, txid)
        return {}  # pragma: no cover - deferred

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after the trigger saw txid-1 committed (or fail: txid-1 cannot commit)."""
        self.resumed(event)
        txid = txid_of(context, self.begin_task_id)
        with self._steps() as steps:
            return self._commit_then_success(context, steps, txid)

    def _commit_then_success(self, context: Any, steps: BatchSteps, txid: int) -> dict[str, Any]:
        summary = self.commit_now(context, steps, txid)
        if self.success_after:
            # the success task's step, in this task (the compact layout: one task fewer)
            self.log.info("txid %d success: %s", txid, steps.success(txid))
            emit_lag(steps, txid, self.log)
        return summary

    def route(self) -> CommitRoute:
        """Which route this task's commits take (its rendered arguments)."""
        return self.commit_route()


class BatchSuccessOperator(_BatchOperator):
    """Tell the spouts the batch committed; rotate old metadata and staging away."""

    ui_color = "#e8fdf0"

    def execute(self, context: Any) -> dict[str, Any]:
        txid = txid_of(context, self.begin_task_id)
        with self._steps() as steps:
            summary: dict[str, Any] = steps.success(txid)
            emit_lag(steps, txid, self.log)
        self.log.info("txid %d success: %s", txid, summary)
        return summary
