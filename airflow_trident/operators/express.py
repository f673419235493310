"""A whole batch in one task: the DAG's ``layout="express"`` (Spark Connect processing only).

:class:`ExpressBatchOperator` waits for readiness as
:class:`~airflow_trident.sensors.begin.BeginWhenReadySensor` does (replays do not wait; a new
batch behind a failed run is skipped), begins, processes the batch on the Spark Connect server,
waits for txid-1's commit and commits as the commit task does, and does the success step — in
one task process, with no scheduling hand-off between the steps. It is the generic
:class:`~airflow_trident.tasks.readiness.BatchStepsSensor` with every step as its slice: the
driver orders the steps (:mod:`airflow_trident.batch.driver`), the task object
(:class:`~airflow_trident.tasks.batch_task.BatchTask`) does them.

The exactly-once rules are the other layouts': the txid is bound to the run in ZooKeeper, the
commit checks the order and compare-and-sets the committed txid, a committed txid is never
applied twice. A retried task resumes at the step it died in, read from ZooKeeper and the
staging manifests (nothing in the task's memory survives a retry):

* txid bound to the run and committed — commit (a no-op) and success again;
* txid bound and its current attempt staged (the task died waiting for txid-1, or in the
  commit) — straight to the commit, without processing again;
* otherwise — begin again (the same txid: the run is bound to it) and process a new attempt.

A cleared run (Airflow clears the task) is the same retry: it replays its txid. Where a try
starts is :func:`~airflow_trident.batch.driver.resume_point`'s; a wait for txid-1 in the
triggerer resumes in ``commit_complete`` from the summary the task kept in XCom ``begin``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_trident.batch.driver import STEPS
from airflow_trident.batch.routes import CommitRoute
from airflow_trident.operators.lineage import task_lineage
from airflow_trident.operators.metrics import RECORDING
from airflow_trident.tasks.readiness import BatchStepsSensor

__all__ = ["ExpressBatchOperator"]


class ExpressBatchOperator(BatchStepsSensor):
    """Readiness, begin, process (on Spark Connect), commit and success of one batch in one
    task (the DAG's ``layout="express"``). XCom: the begin summary (``txid``, ``attempt_id``,
    ``metas``...) with ``processed`` and ``committed`` (the process and commit tasks' XComs)
    and ``resumed_at`` (the step this try started at).

    ``depends_on_past`` is off: runs overlap up to ``max_active_runs`` (the DAG's
    ``max_active_batches``) — the next batches are processed while one waits for its turn to
    commit — and commits stay in txid order (ZooKeeper's compare-and-set).

    :param topology: ``package.module:attribute`` of the topology (templated).
    :param staging_root: the staging root (templated; the Connect server writes there).
    :param zookeeper_conn_id: the ``trident_zookeeper`` connection (templated).
    :param spark_connect_conn_id: the ``spark_connect`` connection (templated).
    :param state_conn_id: the state connection (templated; ``None``: the embedded default).
    :param commit_mode: ``"worker"``, ``"spark"`` (on the Connect server) or ``"auto"``.
    :param spark_commit_min_rows: the ``"auto"`` threshold.
    :param commit_deferrable: wait for txid-1's commit in the triggerer (when txid-1 is not
        staged yet); ``None``: Airflow's ``[operators] default_deferrable``.
    :param commit_poll_interval: seconds between checks of the committed txid (one ZooKeeper
        read each: the commits of a pipeline form a chain, and every second lost here is lost
        per batch).
    :param inline_wait_s: how long to wait in the task for a staged txid-1 before deferring.
    :param emit_wait_s: how long a transactional partitioned spout's emit waits for txid-1's.

    Examples
    --------
    >>> from airflow.sdk import DAG
    >>> with DAG("express_doc", schedule=None):
    ...     task = ExpressBatchOperator(
    ...         task_id="run", topology="airflow_trident.examples.topologies:word_count",
    ...         staging_root="/tmp/staging", spark_connect_conn_id="spark_connect_default")
    >>> task.depends_on_past, task.commit_mode
    (False, 'worker')
    """

    template_fields: Sequence[str] = (
        *BatchStepsSensor.template_fields, "state_conn_id", "spark_connect_conn_id",
    )  # fmt: skip
    ui_color = "#e8fdf8"
    batch_slice = STEPS
    recording = RECORDING

    def __init__(
        self,
        *,
        state_conn_id: str | None = None,
        keep_txids: int = 16,
        spark_connect_conn_id: str = "spark_connect_default",
        commit_mode: str = "worker",
        spark_commit_min_rows: int = 1_000_000,
        commit_deferrable: bool | None = None,
        commit_poll_interval: float = 0.5,
        inline_wait_s: float = 30.0,
        emit_wait_s: float = 600.0,
        **kwargs: Any,
    ) -> None:
        CommitRoute(mode=commit_mode)  # refuses an unknown mode when the DAG is parsed
        kwargs.setdefault("depends_on_past", False)
        super().__init__(**kwargs)
        self.state_conn_id = state_conn_id
        self.keep_txids = keep_txids
        self.spark_connect_conn_id = spark_connect_conn_id
        self.commit_mode = commit_mode
        self.spark_commit_min_rows = spark_commit_min_rows
        self.commit_deferrable = self.deferrable if commit_deferrable is None else commit_deferrable
        self.commit_poll_interval = commit_poll_interval
        self.inline_wait_s = inline_wait_s
        self.emit_wait_s = emit_wait_s

    def route(self) -> CommitRoute:
        """Which route this task's commits take (a Spark commit: the same Connect server)."""
        return self.batch_task().commit_route()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The task's lineage: the topology's spouts in, its states out
        (:func:`~airflow_trident.operators.lineage.task_lineage`)."""
        return task_lineage(self.topology, self.state_conn_id)
