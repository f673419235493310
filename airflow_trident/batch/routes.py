"""The three ways a batch's process and commit phases run: the routes.

* :class:`InWorker` — in this process: the in-process interpreter, and one state commit per
  staged partition with pyarrow and batched SQL;
* :class:`OnSpark` — this process is the Spark driver's client on a session it opens (a Spark
  Connect server's): the plan runs on Spark, and a commit's partitions are applied by Spark
  tasks while the order check and the compare-and-set happen here;
* :class:`BySubmit` — a ``spark-submit`` of the batch's Spark job
  (:mod:`airflow_trident.batch.spark_job`, whose driver does what :class:`OnSpark` does); the
  task reads what the job staged or the summary it wrote.

A route is given its clients — a session opener, a submitter — by the Airflow adapters
(:mod:`airflow_trident.hooks.spark` turns connections and config into them), so nothing here
imports Airflow. :func:`process_by` and :func:`commit_by` are what every layout's tasks and the
express task call; the checks that must happen once wherever the work runs (txid order,
"already committed", the compare-and-set, the ledger row) are the lifecycle's
(:class:`~airflow_trident.batch.steps.BatchSteps`).

>>> CommitRoute(mode="auto", spark_commit_min_rows=10).on_spark_for(staged_rows=12)
True
>>> CommitRoute(mode="worker").on_spark_for(staged_rows=10**9)
False
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from airflow_trident.batch.order import RunStates, wait_for_emit_order
from airflow_trident.batch.process import processed_line, processed_summary
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.errors import ConfigurationError

__all__ = [
    "COMMIT_MODES",
    "BySubmit",
    "CommitRoute",
    "InWorker",
    "OnSpark",
    "Route",
    "commit_by",
    "process_by",
]

COMMIT_MODES = ("worker", "spark", "auto")

_log = logging.getLogger(__name__)


class Route(Protocol):
    """Where a phase's work runs (see the module's docstring)."""

    @property
    def where(self) -> str:
        """For logs: ``"in this worker"``, ``"on Spark Connect (connection c)"``..."""
        ...

    def process(self, steps: BatchSteps, txid: int, *, emit_wait_s: float) -> dict[str, Any]:
        """Emit ``txid`` (a new attempt), run its plan and stage it; its manifest."""
        ...

    def commit(self, steps: BatchSteps, txid: int) -> dict[str, Any]:
        """Commit staged ``txid`` (txid-1 committed); the commit summary."""
        ...


@dataclass(frozen=True)
class InWorker:
    """In this process."""

    where: str = "in this worker"

    def process(self, steps: BatchSteps, txid: int, *, emit_wait_s: float) -> dict[str, Any]:
        return steps.process_local(txid, wait_s=emit_wait_s)

    def commit(self, steps: BatchSteps, txid: int) -> dict[str, Any]:
        return steps.commit(txid)


@dataclass(frozen=True)
class OnSpark:
    """On a SparkSession this process drives: ``session(steps)`` opens it (and closes it at
    the block's end); ``reference`` is the topology's ``module:attribute`` (Spark tasks import
    it); ``read_here_bytes``, ``read_here_records`` and ``inline``: see
    :class:`~airflow_trident.runtime.spark.SparkBatchProcessor` (``None``: its default)."""

    session: Callable[[BatchSteps], AbstractContextManager[Any]]
    reference: str
    where: str = "on Spark"
    read_here_bytes: int | None = None
    read_here_records: int | None = None
    inline: bool | None = None

    def process(self, steps: BatchSteps, txid: int, *, emit_wait_s: float) -> dict[str, Any]:
        from airflow_trident.batch.on_spark import process_on_spark

        with self.session(steps) as spark:
            return process_on_spark(
                steps, spark, txid, emit_wait_s, read_here_bytes=self.read_here_bytes,
                read_here_records=self.read_here_records, inline=self.inline,
            )  # fmt: skip

    def commit(self, steps: BatchSteps, txid: int) -> dict[str, Any]:
        from airflow_trident.batch.on_spark import commit_on_spark

        with self.session(steps) as spark:
            return commit_on_spark(
                steps, spark, self.reference, txid, 0.0, read_here_bytes=self.read_here_bytes,
                read_here_records=self.read_here_records, inline=self.inline,
            )  # fmt: skip


@dataclass(frozen=True)
class BySubmit:
    """By a ``spark-submit`` of the batch's Spark job: ``submit(step, txid, emit_wait_s)``
    runs the job of ``step`` (``"process"`` or ``"commit"``) to its end and raises the job's
    own error if it failed (the adapter's: the Spark provider's hook or operator, the job's
    arguments and secrets); then the task reads what the job left in the staging area."""

    submit: Callable[[str, int, float], None]
    where: str = "by spark-submit"

    def process(self, steps: BatchSteps, txid: int, *, emit_wait_s: float) -> dict[str, Any]:
        self.submit("process", txid, emit_wait_s)
        return steps.staged_manifest(txid)

    def commit(self, steps: BatchSteps, txid: int) -> dict[str, Any]:
        self.submit("commit", txid, 0.0)
        summary: dict[str, Any] = steps.staging.read_commit_summary(txid)
        return summary


def process_by(
    route: Route,
    steps: BatchSteps,
    txid: int,
    *,
    dag_id: str,
    run_id: str | None,
    timeout_s: float,
    log: logging.Logger | Any = _log,
    states: RunStates | None = None,
) -> dict[str, Any]:
    """The process phase of every task that processes (each layout's process task, the express
    task): a txid already committed processes nothing (a cleared or backfilled run; its
    metadata may be rotated away); else wait in the task until ``txid`` may be emitted (up to
    ``timeout_s``, failing at once when txid-1's runs cannot progress: ``states``), process it
    by ``route`` and return the summary (the task's XCom), logged as
    :func:`~airflow_trident.batch.process.processed_line`."""
    if steps.is_committed(txid):
        log.info("txid %d is already committed: nothing to process", txid)
        return {"txid": txid, "skipped": "already committed: nothing to process, state unchanged"}
    emit_wait_s = wait_for_emit_order(
        steps, txid, dag_id=dag_id, run_id=run_id, timeout_s=timeout_s, log=log, states=states
    )
    log.info("processing txid %d of %s %s", txid, steps.topology.name, route.where)
    summary = processed_summary(route.process(steps, txid, emit_wait_s=emit_wait_s))
    log.info("%s", processed_line(summary))
    return summary


@dataclass(frozen=True)
class CommitRoute:
    """Which route a commit takes (``commit_mode``): ``"worker"``, ``"spark"``, or ``"auto"``
    (``"spark"`` when the batch staged at least ``spark_commit_min_rows`` rows).

    Raises
    ------
    ConfigurationError
        For an unknown mode (when the DAG is parsed: the operators build one at once).
    """

    mode: str = "worker"
    spark_commit_min_rows: int = 1_000_000

    def __post_init__(self) -> None:
        if self.mode not in COMMIT_MODES:
            msg = f"commit_mode must be one of {', '.join(COMMIT_MODES)}; got {self.mode!r}"
            raise ConfigurationError(msg)

    def on_spark_for(self, *, staged_rows: int) -> bool:
        """Whether a batch that staged ``staged_rows`` rows is committed on Spark."""
        if self.mode != "auto":
            return self.mode == "spark"
        return staged_rows >= self.spark_commit_min_rows


def commit_by(
    choice: CommitRoute,
    spark: Callable[[], Route],
    steps: BatchSteps,
    txid: int,
    *,
    log: logging.Logger | Any = _log,
    reference: str | None = None,
) -> dict[str, Any]:
    """The commit phase of every task that commits (txid-1 committed: see
    :func:`~airflow_trident.batch.order.await_commit_turn`): by the Spark route ``spark()``
    when ``choice`` says so, else in this worker. A committed txid is committed in the worker
    whatever the mode: the lifecycle's no-op (a cleared or backfilled run). ``reference``:
    the topology's ``module:attribute``, which the log of a Spark commit names (default: the
    topology's name)."""
    if steps.is_committed(txid) or choice.mode == "worker":
        return InWorker().commit(steps, txid)
    if choice.mode == "auto":
        rows = steps.staged_rows(txid)
        on_spark = choice.on_spark_for(staged_rows=rows)
        log.info(
            "txid %d staged %d rows: committing %s (spark_commit_min_rows=%d)",
            txid, rows, "on Spark" if on_spark else "in this worker", choice.spark_commit_min_rows,
        )  # fmt: skip
        if not on_spark:
            return InWorker().commit(steps, txid)
    route = spark()
    log.info("committing txid %d of %s %s", txid, reference or steps.topology.name, route.where)
    return route.commit(steps, txid)
