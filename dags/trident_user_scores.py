"""Seed 003: partition_by(user) -> partition_aggregate -> parallelism_hint(3) -> global_()
-> aggregate (a combiner), persisted.

One DAG run is one batch (txid). Connections: `spark_local` (a Spark connection, e.g.
`AIRFLOW_CONN_SPARK_LOCAL='{"conn_type": "spark", "host": "local[2]"}'`) and
`trident_zookeeper_default` (a `trident_zookeeper` connection).
"""

from __future__ import annotations

from airflow_trident.dag import trident_dag

dag = trident_dag(
    "airflow_trident.examples.topologies:user_scores",
    dag_id="trident_user_scores",
    schedule=None,
    spark_conn_id="spark_local",
    max_active_batches=3,
)
