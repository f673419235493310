"""A whole batch in one task: the DAG's ``layout="express"`` (Spark Connect processing only).

:class:`ExpressBatchOperator` waits for readiness as
:class:`~airflow_trident.sensors.begin.BeginWhenReadySensor` does (replays do not wait; a new
batch behind a failed run is skipped), begins, processes the batch on the Spark Connect server,
waits for txid-1's commit, commits with the commit task's routes
(:class:`~airflow_trident.hooks.commit.BatchCommitter`) and does the success step — in one task
process, with no scheduling hand-off between the steps.

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

import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.hooks.commit import BatchCommitter, CommitRoute, is_staged
from airflow_trident.hooks.process import process_in_turn_on_connect
from airflow_trident.hooks.stalls import StallWatch, wait_for_commit_order
from airflow_trident.operators.batch import begin_batch
from airflow_trident.operators.lineage import TridentLineageMixin
from airflow_trident.operators.metrics import emit_committed, emit_processed
from airflow_trident.operators.steps import run_id_of
from airflow_trident.sensors.begin import BeginWhenReadySensor
from airflow_trident.triggers.zookeeper import CommittedTxidTrigger

__all__ = ["ExpressBatchOperator", "resume_point"]

_INLINE_POLL_S = 0.2


def resume_point(steps: BatchSteps, run_id: str, conf_txid: int | None) -> tuple[str, int | None]:
    """Where a run of an express task starts: ``("begin", None)`` for a run bound to no txid
    (or replaying another one), else ``(step, txid)`` with ``step`` ``"begin"`` (nothing of
    the bound txid's current attempt is staged: begin again and process), ``"commit"`` (its
    current attempt is staged, not committed) or ``"success"`` (committed)."""
    txid = steps.store.txid_for_run(run_id)
    if txid is None or (conf_txid is not None and conf_txid != txid):
        return "begin", None
    if steps.store.committed_txid() >= txid:
        return "success", txid
    if is_staged(steps, txid):
        return "commit", txid
    return "begin", txid


class ExpressBatchOperator(TridentLineageMixin, BeginWhenReadySensor):
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
        *BeginWhenReadySensor.template_fields, "spark_connect_conn_id",
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
        self._committer: BatchCommitter | None = None

    def _batch_task_ids(self) -> list[str]:
        return [self.task_id]  # the whole batch is this task

    # -- the steps ---------------------------------------------------------------------------

    def _begin(self, context: Any) -> dict[str, Any]:
        """After readiness (or at once for a bound run): begin, process, then commit."""
        hook = self.trident_hook()
        with (
            hook.session(),
            hook.batch_steps(
                self.topology, staging_root=self.staging_root, keep_txids=self.keep_txids
            ) as steps,
        ):
            conf = context["dag_run"].conf or {}
            step, txid = resume_point(steps, context["dag_run"].run_id, conf.get("txid"))
            summary: dict[str, Any]
            if step == "begin":
                summary = begin_batch(context, steps, self.log)
                txid = int(summary["txid"])
                if steps.store.committed_txid() < txid:
                    summary["processed"] = self._process(context, steps, txid)
                    # the attempt the processing got (the note reads it here)
                    summary["attempt_id"] = summary["processed"].get(
                        "attempt_id", summary["attempt_id"])  # fmt: skip
            else:
                assert txid is not None
                attempt = steps.store.attempt(txid)
                staged = None if attempt is None else attempt.attempt_id
                summary = {
                    "txid": txid,
                    # the staged processing attempt; a committed txid's from the ledger (a
                    # replay's begin raised ZooKeeper's counter since)
                    "attempt_id": (
                        (steps.committed_attempt(txid) or staged) if step == "success" else staged
                    ),
                    "run_id": context["dag_run"].run_id,
                    "committed_txid": steps.store.committed_txid(),
                }
                self.log.info(
                    "run %s resumes txid %d at its %s (attempt %s %s)",
                    summary["run_id"], txid, step, summary["attempt_id"] or "-",
                    "committed" if step == "success" else "staged",
                )  # fmt: skip
            summary["resumed_at"] = step
            context["ti"].xcom_push(key="begin", value=summary)
            return self._commit_in_order(context, steps, txid, summary)

    def _process(self, context: Any, steps: BatchSteps, txid: int) -> dict[str, Any]:
        summary = process_in_turn_on_connect(
            steps, self.spark_connect_conn_id, txid, dag_id=context["ti"].dag_id,
            run_id=run_id_of(context), timeout_s=self.emit_wait_s, log=self.log,
        )  # fmt: skip
        return emit_processed(context, summary)

    def _commit_in_order(
        self, context: Any, steps: BatchSteps, txid: int, summary: dict[str, Any]
    ) -> dict[str, Any]:
        committed = steps.store.committed_txid()
        watch = StallWatch(context["ti"].dag_id, txid, "commit", run_id=run_id_of(context))
        if committed < txid - 1:
            if not self.commit_deferrable:
                committed = wait_for_commit_order(
                    steps, txid, watch, deadline=None, poll_s=self.commit_poll_interval,
                    log=self.log,
                )  # fmt: skip
            elif is_staged(steps, txid - 1):
                # txid-1's commit is imminent: waiting here beats a deferral's hand-offs
                deadline = time.monotonic() + self.inline_wait_s
                committed = wait_for_commit_order(
                    steps, txid, watch, deadline=deadline, poll_s=_INLINE_POLL_S, log=self.log
                )
        if committed >= txid - 1:
            return self._commit_then_success(context, steps, txid, summary)
        self.log.info("txid %d waits for txid %d (committed: %d)", txid, txid - 1, committed)
        self.defer(
            trigger=CommittedTxidTrigger(
                zookeeper_conn_id=self.zookeeper_conn_id,
                topology=steps.topology.name,
                txid=txid - 1,
                poll_interval=self.commit_poll_interval,
                dag_id=context["ti"].dag_id,
                waiting_run_id=run_id_of(context),
            ),
            method_name="commit_complete",
        )
        return {}  # pragma: no cover - defer() raises

    def commit_complete(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger saw txid-1 committed (or fail: txid-1 cannot commit)."""
        if event is not None and event.get("status") == "stalled":
            message = str(event.get("message"))
            self.log.error("%s", message)
            raise AirflowFailException(message)
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
        self._committer = BatchCommitter(
            self.trident_hook(), self.topology, self.staging_root, self.route(), log=self.log
        )
        committer = self._committer
        commit = emit_committed(
            context, lambda: committer.commit(steps, txid), steps.store.runs_of_txid, self.log
        )
        if commit["applied"]:
            self.log.info(
                "txid %d committed: %d records in, keys written %s",
                txid, commit["records_in"], commit["keys_written"],
            )  # fmt: skip
        else:
            self.log.info(
                "txid %d was already committed: state unchanged (committed txid is now %d)",
                txid, steps.store.committed_txid(),
            )  # fmt: skip
        self.log.info("txid %d success: %s", txid, steps.success(txid))
        summary["committed"] = commit
        return summary

    def route(self) -> CommitRoute:
        """Where this task applies the staged partitions (a Spark commit: the same server)."""
        return CommitRoute(
            mode=self.commit_mode,
            spark_commit_min_rows=self.spark_commit_min_rows,
            spark_connect_conn_id=self.spark_connect_conn_id,
        )

    def on_kill(self) -> None:
        """Stop a running Spark commit (its applied partitions keep their txid)."""
        if self._committer is not None:
            self._committer.on_kill()
