"""Seed 001: word count with a DRPC query of the counts (transactional).

One DAG run is one batch (txid). Connections: `spark_local` (a Spark connection, e.g.
`AIRFLOW_CONN_SPARK_LOCAL='{"conn_type": "spark", "host": "local[2]"}'`),
`trident_zookeeper_default` (a `trident_zookeeper` connection) and `trident_state` (the state
database); `bash scripts/main.sh` stores all three in its Airflow home's metadata database.
"""

from __future__ import annotations

from airflow_trident.dag import trident_dag

dag = trident_dag(
    "airflow_trident.examples.topologies:word_count",   # the topology, by module reference
    dag_id="trident_word_count",
    schedule=None,                                       # a run per trigger (or e.g. "@hourly")
    spark_conn_id="spark_local",                         # any Spark connection
    zookeeper_conn_id="trident_zookeeper_default",       # a trident_zookeeper connection
    state_conn_id="trident_state",                       # the state database (e.g. postgres)
    max_active_batches=3,                                # batches processing at once
)  # fmt: skip
