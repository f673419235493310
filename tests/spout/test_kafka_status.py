"""A Kafka spout's lag as ``airflow-trident status`` and the Trident tab show it (issue 35,
item 5): per partition, the offsets after its last batch (high watermark minus the batch's
``next``). Real broker and ZooKeeper, SQLite state and ledger, batches in process."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.lifecycle import zookeeper_batch_steps
from airflow_trident.batch.status import StatusCollector, TopologyStatus
from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.operation import Count
from airflow_trident.spout.kafka import KafkaSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology
from tests.harness.kafka import create_topic, unique_topic

pytestmark = pytest.mark.integration


def produce(bootstrap: str, topic: str, partition: int, n: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        producer.produce(topic, value=json.dumps({"w": f"w{i % 3}"}), partition=partition)
    producer.flush(30)


def test_the_status_shows_each_partitions_offsets_after_its_last_batch(
    kafka_bootstrap: str, zk_hosts: str, tmp_path: Path
) -> None:
    # Given a topic of two partitions and one committed batch of at most 4 offsets a partition
    topic = unique_topic("lag")
    create_topic(kafka_bootstrap, topic, partitions=2)
    name, state_url = f"kafka_lag_{uuid.uuid4().hex[:8]}", f"sqlite:///{tmp_path / 'state.db'}"
    topology = TridentTopology(name)
    spout = KafkaSpout(topic, config={"bootstrap.servers": kafka_bootstrap},
                       value_format="json", fields=["w"], max_offsets_per_partition=4,
                       timeout_s=10.0)  # fmt: skip
    topology.new_stream("events", spout).group_by(["w"]).persistent_aggregate(
        sql_state(None, name, "transactional", key_fields=("w",), value_type="bigint"),
        Count(), ["n"], name="counts",
    )  # fmt: skip
    produce(kafka_bootstrap, topic, 0, 10)
    produce(kafka_bootstrap, topic, 1, 3)
    zk = ZkConfig(hosts=zk_hosts, root="/trident_test_kafka_lag", timeout=5.0)
    client = connect(zk)
    try:
        steps = zookeeper_batch_steps(topology, client, root=zk.root,
                                      staging_root=str(tmp_path / "staging"),
                                      state_url=state_url)  # fmt: skip
        steps.run_batch("run_1")
        # When more records arrive in partition 1 and the status is read
        produce(kafka_bootstrap, topic, 1, 5)
        status: TopologyStatus = StatusCollector(
            steps.store, ledger=CommitLedger(state_url), topology=topology, staging=steps.staging
        ).collect(dag_id="kafka_lag")
        steps.store.delete_all()
    finally:
        client.stop()
        client.close()
    # Then each partition's lag is its offsets after the batch: 10 - 4, and 8 - 3
    text = status.format_text()
    assert f"events/{topic}:0: 6 offsets after txid 1" in text, text
    assert f"events/{topic}:1: 5 offsets after txid 1" in text, text
    assert sorted(lag.text() for lag in status.lag) == ["5 offsets", "6 offsets"]
