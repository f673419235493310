"""Where a commit applies a batch's staged partitions: the commit task's three routes.

:meth:`BatchSteps.commit <airflow_trident.batch.steps.BatchSteps.commit>` does what must happen
once — txid order check, stale-opaque check, compare-and-set, ledger row — wherever the writes
go. :class:`BatchCommitter` picks the route (``commit_mode``):

* ``"worker"`` — in the commit task, with pyarrow and batched SQL, one state commit per
  partition;
* ``"spark"`` — one Spark task per staged partition, while the driver checks the order and does
  the compare-and-set: through the DAG's Spark Connect server when it has one
  (``process_mode="connect"``: the commit task is the driver, no JVM start,
  :func:`~airflow_trident.hooks.spark.commit_on_connect`), else a ``spark-submit`` of the batch's
  Spark job through the Spark provider's hook (its driver commits, the task reads the summary it
  wrote);
* ``"auto"`` — ``"spark"`` when the batch staged at least ``spark_commit_min_rows`` rows.

A txid already committed is committed again in the worker whatever the mode: a no-op.

>>> CommitRoute(mode="auto", spark_commit_min_rows=10).on_spark_for(staged_rows=12)
True
>>> CommitRoute(mode="worker").on_spark_for(staged_rows=10**9)
False
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.errors import BatchIncompleteError, ConfigurationError
from airflow_trident.hooks.config import spark_read_here_bytes
from airflow_trident.hooks.spark import (
    SPARK_JOB,
    commit_on_connect,
    deploy_mode,
    exported,
    job_arguments,
    job_conf,
    job_secrets,
    spark_job_errors,
    warn_if_remote_driver,
)
from airflow_trident.hooks.trident import TridentHook

__all__ = ["COMMIT_MODES", "BatchCommitter", "CommitRoute", "is_staged", "staged_rows"]

COMMIT_MODES = ("worker", "spark", "auto")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitRoute:
    """How a commit task applies staged partitions (see the module's docstring).

    :param mode: ``"worker"``, ``"spark"`` or ``"auto"``.
    :param spark_commit_min_rows: the ``"auto"`` threshold.
    :param spark_connect_conn_id: a ``spark_connect`` connection: a Spark commit goes through
        that server; ``None``: by ``spark-submit``.
    :param spark_conn_id: the Spark connection of a ``spark-submit`` commit.
    :param spark_conf: its Spark conf.
    :param py_files: its ``--py-files`` (the topology's package).
    """

    mode: str = "worker"
    spark_commit_min_rows: int = 1_000_000
    spark_connect_conn_id: str | None = None
    spark_conn_id: str = "spark_default"
    spark_conf: dict[str, Any] | None = field(default=None, hash=False)
    py_files: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in COMMIT_MODES:
            msg = f"commit_mode must be one of {', '.join(COMMIT_MODES)}; got {self.mode!r}"
            raise ConfigurationError(msg)

    def on_spark_for(self, *, staged_rows: int) -> bool:
        """Whether a batch that staged ``staged_rows`` rows is committed on Spark."""
        if self.mode != "auto":
            return self.mode == "spark"
        return staged_rows >= self.spark_commit_min_rows


def staged_rows(steps: BatchSteps, txid: int) -> int:
    """The rows the current attempt of ``txid`` staged, from its manifest."""
    manifest = steps.staging.read_manifest(steps.plan(txid).attempt)
    return sum(f["rows"] for s in manifest["states"].values() for f in s["files"])


def is_staged(steps: BatchSteps, txid: int) -> bool:
    """Whether the current attempt of ``txid`` is processed and staged (its commit is next)."""
    attempt = steps.store.attempt(txid)
    if attempt is None:
        return False
    try:
        steps.staging.read_manifest(attempt)
    except BatchIncompleteError:
        return False
    return True


class BatchCommitter:
    """Commits a topology's staged batches by its :class:`CommitRoute`.

    :param hook: the task's hook (the ZooKeeper settings and state URL a ``spark-submit`` job
        gets as secrets).
    :param topology: ``package.module:attribute`` of the topology.
    :param staging_root: the staging root.
    :param route: the route.
    :param log: where the task logs.
    """

    def __init__(
        self,
        hook: TridentHook,
        topology: str,
        staging_root: str,
        route: CommitRoute,
        *,
        log: logging.Logger | Any = log,
    ) -> None:
        self.hook = hook
        self.topology = topology
        self.staging_root = staging_root
        self.route = route
        self.log = log
        self._submit: Any = None  # the running spark-submit's hook, for on_kill

    def commit(self, steps: BatchSteps, txid: int) -> dict[str, Any]:
        """Commit ``txid`` (txid-1 must be committed; a committed txid is a no-op) by the route;
        return the commit summary (the task's XCom)."""
        if steps.store.committed_txid() >= txid:
            summary: dict[str, Any] = steps.commit(txid)  # a no-op, whatever the route
        elif self._on_spark(steps, txid):
            summary = self._commit_on_spark(steps, txid)
        else:
            summary = steps.commit(txid)
        return summary

    def on_kill(self) -> None:
        """Stop a running ``spark-submit`` commit (its applied partitions keep their txid)."""
        if self._submit is not None:
            self._submit.on_kill()

    def _on_spark(self, steps: BatchSteps, txid: int) -> bool:
        if self.route.mode != "auto":
            return self.route.on_spark_for(staged_rows=0)
        rows = staged_rows(steps, txid)
        on_spark = self.route.on_spark_for(staged_rows=rows)
        self.log.info(
            "txid %d staged %d rows: committing %s (spark_commit_min_rows=%d)",
            txid,
            rows,
            "on Spark" if on_spark else "in this worker",
            self.route.spark_commit_min_rows,
        )
        return on_spark

    def _commit_on_spark(self, steps: BatchSteps, txid: int) -> dict[str, Any]:
        # commit() answered an already committed txid; a race is the Spark commit's own no-op
        if self.route.spark_connect_conn_id:
            self.log.info(
                "committing txid %d of %s on Spark Connect (connection %s)",
                txid,
                self.topology,
                self.route.spark_connect_conn_id,
            )
            return commit_on_connect(steps, self.route.spark_connect_conn_id, self.topology, txid)
        return self._commit_by_submit(steps, txid)

    def _commit_by_submit(self, steps: BatchSteps, txid: int) -> dict[str, Any]:
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        config = self.hook.zookeeper_config()
        secrets = job_secrets(config, self.hook.state_url())
        self._submit = SparkSubmitHook(
            conf=job_conf(self.route.spark_conf),
            conn_id=self.route.spark_conn_id,
            py_files=self.route.py_files,
            name=f"trident-{steps.topology.name}-commit",
            application_args=job_arguments(
                self.topology,
                txid,
                self.staging_root,
                config,
                emit_wait_s=0.0,
                commit=True,
                read_here_bytes=spark_read_here_bytes(),  # a stale staged batch: reprocessed
            ),
        )
        warn_if_remote_driver(deploy_mode(self.route.spark_conn_id), secrets)
        self.log.info("committing txid %d of %s on Spark", txid, self.topology)
        with exported(secrets), spark_job_errors(self.staging_root, self.topology, txid, "commit"):
            self._submit.submit(SPARK_JOB)
        summary: dict[str, Any] = steps.staging.read_commit_summary(txid)
        return summary
