"""The process task on a long-lived Spark Connect server (``process_mode="connect"``).

A ``spark-submit`` per batch starts a JVM and a SparkSession each time (seconds, before any
work). With Spark Connect the task itself is the Spark driver's client: it connects to a running
server (the Spark provider's ``spark_connect`` connection), emits the batch, runs the same plan
with the same runtime (only DataFrame APIs Connect supports are used) and stages the results, in
the Airflow worker's process. The server's Python workers run the topology's user code: they
must import ``airflow_trident`` and the topology's modules (run the server with the same Python
environment), and the staging root must be reachable by the server and the worker alike.

The route is :func:`~airflow_trident.hooks.spark.connect_route`'s; the connection's token
travels inside the ``sc://`` URL handed to pyspark, never to a log. The task is the generic
:class:`~airflow_trident.operators.batch.BatchStepsOperator` with the slice ``process``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_trident.operators.batch import BatchStepsOperator
from airflow_trident.operators.lineage import task_lineage

__all__ = ["ConnectProcessBatchOperator"]


class ConnectProcessBatchOperator(BatchStepsOperator):
    """Process this run's batch on a Spark Connect server: emit, run the plan, stage results.

    Every run of this task is a new attempt, as with :class:`ProcessBatchOperator
    <airflow_trident.operators.process.ProcessBatchOperator>`; XCom: the same summary.

    :param topology: ``package.module:attribute`` of the topology (templated).
    :param staging_root: where results are staged (templated; the server writes there).
    :param zookeeper_conn_id: the ``trident_zookeeper`` connection (templated).
    :param spark_connect_conn_id: a ``spark_connect`` connection (host ``sc://host``, port,
        token in the password; templated, as the Spark provider's ``PySparkOperator`` does).
    :param state_conn_id: the state database connection (templated).
    :param emit_wait_s: how long a transactional partitioned spout's emit waits for txid-1's.
    """

    template_fields: Sequence[str] = (
        "topology", "staging_root", "zookeeper_conn_id", "spark_connect_conn_id", "state_conn_id",
    )  # fmt: skip
    ui_color = "#fdf8e8"
    batch_slice = ("process",)

    def __init__(
        self,
        *,
        spark_connect_conn_id: str = "spark_connect_default",
        emit_wait_s: float = 600.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spark_connect_conn_id = spark_connect_conn_id
        self.emit_wait_s = emit_wait_s

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The task's lineage: the topology's spouts in, its states out
        (:func:`~airflow_trident.operators.lineage.task_lineage`)."""
        return task_lineage(self.topology, self.state_conn_id)
