"""The begin, commit and success tasks of a batch (thin over :class:`BatchSteps`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.errors import ConfigurationError
from airflow_trident.hooks.commit import COMMIT_MODES, BatchCommitter, CommitRoute, is_staged
from airflow_trident.hooks.stalls import StallWatch, wait_for_commit_order
from airflow_trident.operators.lineage import TridentLineageMixin
from airflow_trident.operators.metrics import emit_committed
from airflow_trident.operators.notes import note_begin
from airflow_trident.operators.steps import TridentTask, default_deferrable, run_id_of, txid_of
from airflow_trident.triggers.zookeeper import CommittedTxidTrigger

__all__ = [
    "COMMIT_MODES",
    "BatchSuccessOperator",
    "BeginBatchOperator",
    "CommitBatchOperator",
    "begin_batch",
    "begun_line",
]


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


def begin_batch(context: Any, steps: BatchSteps, log: Any) -> dict[str, Any]:
    """Bind ``context``'s DAG run to its txid (``dag_run.conf["txid"]`` replays one) and store
    the batch metadata through ``steps`` (the begin task's, or a readiness sensor's that begins
    too); log it to ``log`` and note it on the run. Returns the begin summary (the task's XCom).

    Raises
    ------
    ConfigurationError
        If ``dag_run.conf["txid"]`` is not a positive integer.
    """
    dag_run = context["dag_run"]
    conf = dag_run.conf or {}
    txid = conf.get("txid")
    if txid is not None and (not isinstance(txid, int) or isinstance(txid, bool) or txid < 1):
        msg = f"dag_run.conf txid must be a positive integer, got {txid!r}"
        raise ConfigurationError(msg)
    summary: dict[str, Any] = steps.begin(dag_run.run_id, txid)
    log.info("%s", begun_line(dag_run.run_id, summary))
    note_begin(context, summary)  # the run's note shows its txid (operators/notes.py)
    for spout, meta in summary["metas"].items():
        log.info("spout %s metadata: %s", spout, str(meta)[:500])
    return summary


def begun_line(run_id: str, summary: dict[str, Any]) -> str:
    """The begin's log line: the run's txid and its attempt as the run's note, the process and
    commit tasks and the Trident tab show it (the processing attempt, 1 for the first).

    >>> begun_line("manual__1", {"txid": 4, "attempt_id": 1, "committed_txid": 3})
    'run manual__1 is txid 4 · attempt 1; committed txid is 3'
    >>> begun_line("manual__2", {"txid": 1, "attempt_id": 1, "committed_txid": 4})
    'run manual__2 replays txid 1 · attempt 1, committed: nothing to process, state unchanged'
    """
    txid, attempt = summary["txid"], summary["attempt_id"]
    shown = "" if attempt is None else f" · attempt {attempt}"
    if txid <= summary["committed_txid"]:
        return (f"run {run_id} replays txid {txid}{shown}, committed: nothing to process, "
                f"state unchanged")  # fmt: skip
    return f"run {run_id} is txid {txid}{shown}; committed txid is {summary['committed_txid']}"


_INLINE_POLL_S = 0.2


class CommitBatchOperator(TridentLineageMixin, _BatchOperator):
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
      :func:`~airflow_trident.hooks.spark.commit_on_connect`); without it, a
      ``spark-submit`` job through the Spark provider's hook;
    * ``"auto"`` — ``"spark"`` when the batch staged at least ``spark_commit_min_rows`` rows.

    The route is :class:`~airflow_trident.hooks.commit.BatchCommitter`'s; this task waits for
    its turn and hands the batch over.

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
        self._committer: BatchCommitter | None = None

    def execute(self, context: Any) -> dict[str, Any]:
        txid = txid_of(context, self.begin_task_id)
        with self._steps() as steps:
            committed = steps.store.committed_txid()
            topology = steps.topology.name
            watch = StallWatch(context["ti"].dag_id, txid, "commit", run_id=run_id_of(context))
            if not self.deferrable:
                committed = wait_for_commit_order(
                    steps, txid, watch, deadline=None, poll_s=self.poll_interval, log=self.log
                )
            elif committed < txid - 1 and is_staged(steps, txid - 1):
                # txid-1's commit is imminent: waiting here beats a deferral's hand-offs
                deadline = time.monotonic() + self.inline_wait_s
                committed = wait_for_commit_order(
                    steps, txid, watch, deadline=deadline, poll_s=_INLINE_POLL_S, log=self.log
                )
            if committed >= txid - 1:
                return self._commit_then_success(context, steps, txid)
        self.log.info("txid %d waits for txid %d (committed: %d)", txid, txid - 1, committed)
        self.defer(
            trigger=CommittedTxidTrigger(
                zookeeper_conn_id=self.zookeeper_conn_id,
                topology=topology,
                txid=txid - 1,
                poll_interval=self.poll_interval,
                dag_id=context["ti"].dag_id,
                waiting_run_id=run_id_of(context),
            ),
            method_name="execute_complete",
        )
        return {}  # pragma: no cover - defer() raises

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after the trigger saw txid-1 committed (or fail: txid-1 cannot commit)."""
        if event is not None and event.get("status") == "stalled":
            message = str(event.get("message"))
            self.log.error("%s", message)
            raise AirflowFailException(message)
        txid = txid_of(context, self.begin_task_id)
        with self._steps() as steps:
            return self._commit_then_success(context, steps, txid)

    def _commit_then_success(self, context: Any, steps: BatchSteps, txid: int) -> dict[str, Any]:
        summary: dict[str, Any] = emit_committed(
            context, lambda: self._commit(steps, txid), steps.store.runs_of_txid, self.log
        )
        if self.success_after:
            # the success task's step, in this task (the compact layout: one task fewer)
            self.log.info("txid %d success: %s", txid, steps.success(txid))
        return summary

    def on_kill(self) -> None:
        """Stop a running Spark commit (its applied partitions keep their txid)."""
        if self._committer is not None:
            self._committer.on_kill()

    def route(self) -> CommitRoute:
        """Where this task applies the staged partitions (its rendered arguments)."""
        return CommitRoute(
            mode=self.commit_mode,
            spark_commit_min_rows=self.spark_commit_min_rows,
            spark_connect_conn_id=self.spark_connect_conn_id or None,
            spark_conn_id=self.spark_conn_id,
            spark_conf=self.spark_conf,
            py_files=self.py_files,
        )

    def _commit(self, steps: BatchSteps, txid: int) -> dict[str, Any]:
        self._committer = BatchCommitter(
            self.trident_hook(), self.topology, self.staging_root, self.route(), log=self.log
        )
        summary = self._committer.commit(steps, txid)
        if summary["applied"]:
            self.log.info(
                "txid %d committed: %d records in, keys written %s; partition ranges %s",
                txid,
                summary["records_in"],
                summary["keys_written"],
                str(summary.get("partitions", {}))[:1000],
            )
        else:
            self.log.info(
                "txid %d was already committed: state unchanged (committed txid is now %d)",
                txid,
                steps.store.committed_txid(),
            )
        return summary


class BatchSuccessOperator(_BatchOperator):
    """Tell the spouts the batch committed; rotate old metadata and staging away."""

    ui_color = "#e8fdf0"

    def execute(self, context: Any) -> dict[str, Any]:
        txid = txid_of(context, self.begin_task_id)
        with self._steps() as steps:
            summary: dict[str, Any] = steps.success(txid)
        self.log.info("txid %d success: %s", txid, summary)
        return summary
