"""The main job: word count over JSON-lines files landing in a directory (a real source).

`FileLogSpout` over `$TRIDENT_DATA_DIR/landing` (partitions = its directories, files landed by
write-then-rename), counts in the run's state database and every sentence appended to the Delta
table `$TRIDENT_DATA_DIR/delta/sentences`; see `docs/sources/file_log.md`. The readiness
sensor waits until a new file has landed. Connections as `trident_word_count.py`, and Spark
through a Spark Connect server (`spark_connect_local`, a `spark_connect` connection): the express
layout runs each whole batch in one task (`batch.run`), so a batch costs seconds, not a
`spark-submit` (`trident_word_count.py` shows the standard layout with `spark-submit`).
"""

from __future__ import annotations

from airflow_trident.dag import trident_dag

dag = trident_dag(
    "airflow_trident.examples.file_log:file_word_count",
    dag_id="trident_file_word_count",
    schedule=None,
    layout="express",
    process_mode="connect",
    spark_connect_conn_id="spark_connect_local",
    zookeeper_conn_id="trident_zookeeper_default",
    state_conn_id="trident_state",
    max_active_batches=3,
)
