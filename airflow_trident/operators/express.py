"""A whole batch in one task: the DAG's ``layout="express"`` (Spark Connect processing only).

:class:`ExpressBatchOperator` waits for readiness as
:class:`~airflow_trident.sensors.begin.BeginWhenReadySensor` does (replays do not wait; a new
batch behind a failed run is skipped), begins, processes the batch on the Spark Connect server,
waits for txid-1's commit and commits as the commit task does
(:class:`~airflow_trident.operators.commit_turn.CommitInTurn`), and does the success step — in
one task process, with no scheduling hand-off between the steps.

The exactly-once rules are the other layouts': the txid is bound to the run in ZooKeeper, the
commit checks the order and compare-and-sets the committed txid, a committed txid is never
applied twice. A retried task resumes at the step it died in, read from ZooKeeper and the
staging manifests (nothing in the task's memory survives a retry):

* txid bound to the run and committed — commit (a no-op) and success again;
* txid bound and its current attempt staged (the task died waiting for txid-1, or in the
  commit) — straight to the commit, without processing again;
* otherwise — begin again (the same txid: the run is bound to it) and process a new attempt.

A cleared run (Airflow clears the task) is the same retry: it replays its txid.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_trident.batch.routes import CommitRoute, process_by
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.hooks.dagruns import dagrun_states
from airflow_trident.hooks.spark import connect_route
from airflow_trident.operators.commit_turn import CommitInTurn
from airflow_trident.operators.lineage import TridentLineageMixin
from airflow_trident.operators.metrics import emit_lag, emit_processed
from airflow_trident.tasks.base import no_retry_when_stalled, run_id_of
from airflow_trident.tasks.begin import BeginWhenReady, begin_batch

__all__ = ["ExpressBatchOperator"]


class ExpressBatchOperator(TridentLineageMixin, CommitInTurn, BeginWhenReady):
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
        *BeginWhenReady.template_fields, "spark_connect_conn_id",
    )  # fmt: skip
    ui_color = "#e8fdf8"

    def __init__(
        self,
        *,
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
        self.spark_connect_conn_id = spark_connect_conn_id
        self.commit_mode = commit_mode
        self.spark_commit_min_rows = spark_commit_min_rows
        self.commit_deferrable = self.deferrable if commit_deferrable is None else commit_deferrable
        self.commit_poll_interval = commit_poll_interval
        self.inline_wait_s = inline_wait_s
        self.emit_wait_s = emit_wait_s

    def _batch_task_ids(self) -> list[str]:
        return [self.task_id]  # the whole batch is this task

    # -- the steps ---------------------------------------------------------------------------

    def when_ready(self, context: Any) -> dict[str, Any]:
        """After readiness (or at once for a bound run): begin, process, then commit."""
        hook = self.trident_hook()
        with (
            hook.session(),
            hook.batch_steps(
                self.topology, staging_root=self.staging_root, keep_txids=self.keep_txids
            ) as steps,
        ):
            conf = context["dag_run"].conf or {}
            step, txid = steps.resume_point(context["dag_run"].run_id, conf.get("txid"))
            summary: dict[str, Any]
            if step == "begin":
                summary = begin_batch(context, steps, self.log)
                txid = int(summary["txid"])
                if not steps.is_committed(txid):
                    summary["processed"] = self._process(context, steps, txid)
                    # the attempt the processing got (the note reads it here)
                    summary["attempt_id"] = summary["processed"].get(
                        "attempt_id", summary["attempt_id"])  # fmt: skip
            else:
                assert txid is not None
                attempt = steps.store.attempts.attempt(txid)
                staged = None if attempt is None else attempt.attempt_id
                summary = {
                    "txid": txid,
                    # the staged processing attempt; a committed txid's from the ledger (a
                    # replay's begin raised ZooKeeper's counter since)
                    "attempt_id": (
                        (steps.committed_attempt(txid) or staged) if step == "success" else staged
                    ),
                    "run_id": context["dag_run"].run_id,
                    "committed_txid": steps.store.commits.committed_txid(),
                }
                self.log.info(
                    "run %s resumes txid %d at its %s (attempt %s %s)",
                    summary["run_id"], txid, step, summary["attempt_id"] or "-",
                    "committed" if step == "success" else "staged",
                )  # fmt: skip
            summary["resumed_at"] = step
            context["ti"].xcom_push(key="begin", value=summary)
            if self.commit_in_turn(
                context, steps, txid, deferrable=self.commit_deferrable,
                poll_s=self.commit_poll_interval, inline_wait_s=self.inline_wait_s,
                resume_method="commit_complete",
            ):  # fmt: skip
                return self._commit_then_success(context, steps, txid, summary)
        return {}  # pragma: no cover - deferred

    def _process(self, context: Any, steps: BatchSteps, txid: int) -> dict[str, Any]:
        with no_retry_when_stalled():
            summary = process_by(
                connect_route(str(self.spark_connect_conn_id), self.topology), steps, txid,
                dag_id=context["ti"].dag_id, run_id=run_id_of(context),
                timeout_s=self.emit_wait_s, log=self.log, states=dagrun_states,
            )  # fmt: skip
        return emit_processed(context, summary)

    def commit_complete(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger saw txid-1 committed (or fail: txid-1 cannot commit)."""
        self.resumed(event)
        summary = context["ti"].xcom_pull(task_ids=self.task_id, key="begin")
        hook = self.trident_hook()
        with (
            hook.session(),
            hook.batch_steps(
                self.topology, staging_root=self.staging_root, keep_txids=self.keep_txids
            ) as steps,
        ):
            return self._commit_then_success(context, steps, int(summary["txid"]), dict(summary))

    def _commit_then_success(
        self, context: Any, steps: BatchSteps, txid: int, summary: dict[str, Any]
    ) -> dict[str, Any]:
        summary["committed"] = self.commit_now(context, steps, txid)
        self.log.info("txid %d success: %s", txid, steps.success(txid))
        emit_lag(steps, txid, self.log)
        return summary

    def route(self) -> CommitRoute:
        """Which route this task's commits take (a Spark commit: the same Connect server)."""
        return self.commit_route()
