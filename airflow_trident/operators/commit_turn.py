"""What every task that commits does — each layout's commit task and the express task — once:
wait for txid-1's commit (in the task, or deferred to the triggerer), commit by the route the
task's ``commit_mode`` picks, record the commit (metrics, asset event) and log it.

The wait and its stall verdicts are :func:`airflow_trident.batch.order.await_commit_turn`'s,
the route :func:`airflow_trident.batch.routes.commit_by`'s; this mixin adds only what is
Airflow's: the deferral, the runs' states, the failure without retry.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_trident.batch.order import StallWatch, await_commit_turn
from airflow_trident.batch.routes import BySubmit, CommitRoute, Route, commit_by
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.hooks.dagruns import dagrun_states
from airflow_trident.hooks.spark import JobSubmitter, connect_route
from airflow_trident.operators.metrics import emit_committed
from airflow_trident.tasks.base import no_retry_when_stalled, run_id_of
from airflow_trident.triggers.zookeeper import CommittedTxidTrigger

__all__ = ["CommitInTurn"]


class CommitInTurn:
    """Mixin of the tasks that commit (see the module's docstring). The task gives
    ``topology``, ``staging_root``, ``zookeeper_conn_id``, ``commit_mode``,
    ``spark_commit_min_rows``, ``spark_connect_conn_id`` (a Spark commit on that Connect
    server; ``None``: by ``spark-submit`` through ``spark_conn_id``, ``spark_conf``,
    ``py_files``)."""

    topology: str
    staging_root: str
    zookeeper_conn_id: str
    commit_mode: str
    spark_commit_min_rows: int
    spark_connect_conn_id: str | None
    spark_conn_id: str = "spark_default"
    spark_conf: dict[str, Any] | None = None
    py_files: str | None = None
    _submitter: JobSubmitter | None = None
    log: Any
    trident_hook: Any
    defer: Any

    def commit_route(self) -> CommitRoute:
        """Which route a commit of this task takes (its rendered arguments)."""
        return CommitRoute(mode=self.commit_mode, spark_commit_min_rows=self.spark_commit_min_rows)

    def spark_route(self) -> Route:
        """The Spark route of this task's commits: its Connect server, else ``spark-submit``."""
        if self.spark_connect_conn_id:
            return connect_route(self.spark_connect_conn_id, self.topology)
        self._submitter = JobSubmitter(
            self.trident_hook(), self.topology, self.staging_root, spark_conn_id=self.spark_conn_id,
            spark_conf=self.spark_conf, py_files=self.py_files,
        )  # fmt: skip
        return BySubmit(self._submitter)

    def commit_in_turn(
        self,
        context: Any,
        steps: BatchSteps,
        txid: int,
        *,
        deferrable: bool,
        poll_s: float,
        inline_wait_s: float,
        resume_method: str,
    ) -> bool:
        """Wait until ``txid`` may commit: ``True`` when it may now; else defer (the task
        resumes in ``resume_method`` once txid-1 committed, see :meth:`resumed`)."""
        watch = StallWatch(context["ti"].dag_id, txid, "commit", run_id=run_id_of(context))
        with no_retry_when_stalled():
            if await_commit_turn(
                steps, txid, watch, deferrable=deferrable, inline_wait_s=inline_wait_s,
                poll_s=poll_s, log=self.log, states=dagrun_states,
            ):  # fmt: skip
                return True
        self.defer(
            trigger=CommittedTxidTrigger(
                zookeeper_conn_id=self.zookeeper_conn_id,
                topology=steps.topology.name,
                txid=txid - 1,
                poll_interval=poll_s,
                dag_id=context["ti"].dag_id,
                waiting_run_id=run_id_of(context),
            ),
            method_name=resume_method,
        )
        return False  # pragma: no cover - defer() raises

    def resumed(self, event: dict[str, Any] | None) -> None:
        """After the trigger: go on, or fail without retry when txid-1 cannot commit."""
        if event is not None and event.get("status") == "stalled":
            message = str(event.get("message"))
            self.log.error("%s", message)
            raise AirflowFailException(message)

    def commit_now(self, context: Any, steps: BatchSteps, txid: int) -> dict[str, Any]:
        """Commit ``txid`` (its turn) by the route, record and log it; the commit summary."""
        summary: dict[str, Any] = emit_committed(
            context,
            lambda: commit_by(
                self.commit_route(),
                self.spark_route,
                steps,
                txid,
                log=self.log,
                reference=self.topology,
            ),
            steps.store.runs.runs_of_txid,
            self.log,
        )
        if summary["applied"]:
            self.log.info(
                "txid %d committed: %d records in, keys written %s; partition ranges %s",
                txid, summary["records_in"], summary["keys_written"],
                str(summary.get("partitions", {}))[:1000],
            )  # fmt: skip
        else:
            self.log.info(
                "txid %d was already committed: state unchanged (committed txid is now %d)",
                txid, steps.store.commits.committed_txid(),
            )  # fmt: skip
        return summary

    def on_kill(self) -> None:
        """Stop a running ``spark-submit`` commit (its applied partitions keep their txid)."""
        if self._submitter is not None:
            self._submitter.on_kill()
