"""Word count over a Kafka topic (issue 35): a `KafkaSpout` reads JSON records `{"sentence"}`
from the topic `$TRIDENT_KAFKA_TOPIC` (default `trident_sentences`) through the Airflow `kafka`
connection `trident_kafka` (`{"bootstrap.servers": ...}` in its extra); counts in the run's
state database and the DRPC stream `words` (`airflow_trident.examples.kafka`,
`docs/sources/kafka.md`). A run's txid reads a fixed range of offsets of each partition, the
same on every replay. Connections and layout as `trident_file_word_count.py`: the express layout
on a Spark Connect server (`spark_connect_local`). The demo: `bash scripts/kafka-demo.sh`
(`docs/kafka-demo.md`).
"""

from __future__ import annotations

from airflow_trident.dag import trident_dag

dag = trident_dag(
    "airflow_trident.examples.kafka:kafka_word_count",
    dag_id="trident_kafka_word_count",
    schedule=None,
    layout="express",
    process_mode="connect",
    spark_connect_conn_id="spark_connect_local",
    zookeeper_conn_id="trident_zookeeper_default",
    state_conn_id="trident_state",
    max_active_batches=3,
)
