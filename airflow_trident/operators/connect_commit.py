"""The Spark commit on a Spark Connect server (``commit_mode="spark"`` with
``process_mode="connect"``).

The commit task is the Spark driver's client, as the Connect process task is: it opens a session
on the server (the Spark provider's ``spark_connect`` connection) and runs the same commit as the
``spark-submit`` job's driver (:func:`airflow_trident.batch.spark_job.commit_on_spark`): the
order check, the stale-opaque check, ZooKeeper's compare-and-set and the ledger row happen in
this task, while :class:`~airflow_trident.runtime.spark.commit.SparkBatchApplier` applies each
staged partition in a Spark task on the server's executors (``range`` + ``mapInArrow``, both
supported by Spark Connect). The state database reaches the executors inside the task closure
(the run's :class:`~airflow_trident.state.binding.StateBinding`), so the server needs the same
Python environment and must reach the state database and the staging root; no JVM starts per
commit.

The connection's token travels inside the ``sc://`` URL handed to pyspark, never to a log.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["commit_on_connect"]


def commit_on_connect(
    steps: Any,
    spark_connect_conn_id: str,
    reference: str,
    txid: int,
    *,
    log: logging.Logger | Any,
) -> dict[str, Any]:
    """Commit staged batch ``txid`` through the Spark Connect server of
    ``spark_connect_conn_id``; write and return the commit summary.

    Parameters
    ----------
    steps
        The task's :class:`~airflow_trident.batch.steps.BatchSteps` (ZooKeeper, staging,
        ledger, state binding).
    spark_connect_conn_id
        A ``spark_connect`` connection.
    reference
        The topology's ``package.module:attribute`` (the executors import it).
    txid
        The batch to commit (txid-1 must be committed; an already committed txid is a no-op).
    log
        Where the task logs.

    Raises
    ------
    TridentError
        An executor's own error (``StateBehindError``, ``BatchIncompleteError``, ...) or
        ``BatchFailedError``; partitions applied before it keep their txid and a retry of the
        commit skips them.

    Example (needs a Connect server: ``airflow_trident.testing.connect``)::

        summary = commit_on_connect(steps, "spark_connect_default", "pkg.flows:wc", 7, log=log)
    """
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    from airflow_trident.batch.spark_job import commit_on_spark
    from airflow_trident.runtime.spark.session import remote_session

    url = SparkConnectHook(conn_id=spark_connect_conn_id).get_connection_url()
    log.info(
        "committing txid %d of %s on Spark Connect (connection %s)",
        txid,
        reference,
        spark_connect_conn_id,
    )
    with remote_session(url) as spark:
        summary: dict[str, Any] = commit_on_spark(steps, spark, reference, txid, 0.0)
    return summary
