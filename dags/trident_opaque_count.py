"""Seed 002: opaque partitioned count surviving an unreadable partition.

Set TRIDENT_UNREADABLE_PARTITIONS=p1 in a run's environment to break a partition.

One DAG run is one batch (txid). Connections: `spark_local` (a Spark connection, e.g.
`AIRFLOW_CONN_SPARK_LOCAL='{"conn_type": "spark", "host": "local[2]"}'`) and
`trident_zookeeper_default` (a `trident_zookeeper` connection).
"""

from __future__ import annotations

from airflow_trident.dag import trident_dag

dag = trident_dag(
    "airflow_trident.examples.topologies:opaque_count",
    dag_id="trident_opaque_count",
    schedule=None,
    spark_conn_id="spark_local",
    max_active_batches=3,
)
