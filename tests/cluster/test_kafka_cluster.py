"""The 3-broker KRaft cluster of the cluster tier (``tests/harness/kafka.py``): a topic of
replication factor 1 spread over the brokers loses exactly the partitions of a killed broker
(unreadable, no leader) and gets them back when it restarts; a replicated topic written by a
transactional producer stays readable, committed records only, through the loss of a leader.

Run with ``bash scripts/cluster-test.sh`` (skipped by the README test command).
"""

from __future__ import annotations

import json
import time

import pytest

from tests.harness.kafka import PrivateKafkaCluster, create_topic, unique_topic
from tests.harness.kafka_read import confluent_records

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def _wait(predicate: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def _end(bootstrap: str, topic: str, partition: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{topic}"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1])
    finally:
        consumer.close()


def test_a_killed_broker_takes_its_unreplicated_partitions_and_gives_them_back(
    kafka_cluster: PrivateKafkaCluster,
) -> None:
    # Given a 6-partition topic without replicas: each broker leads some partitions
    topic = unique_topic("outage")
    create_topic(kafka_cluster.bootstrap, topic, partitions=6, replication=1)
    leaders = {p: kafka_cluster.leader_of(topic, p) for p in range(6)}
    assert set(leaders.values()) == {1, 2, 3}
    victim = leaders[3]
    # When the broker leading partition 3 is killed
    kafka_cluster.node(victim).kill()
    try:
        # Then its partitions have no leader; the others keep theirs
        _wait(lambda: kafka_cluster.leader_of(topic, 3) == -1)
        now = {p: kafka_cluster.leader_of(topic, p) for p in range(6)}
        lost = {p for p, n in leaders.items() if n == victim}
        assert {p for p, n in now.items() if n == -1} == lost
    finally:
        # And once it is back, so are they
        kafka_cluster.node(victim).start()
    _wait(lambda: kafka_cluster.leader_of(topic, 3) == victim)


def test_a_replicated_topic_survives_its_leader_with_committed_records_only(
    kafka_cluster: PrivateKafkaCluster,
) -> None:
    from confluent_kafka import Producer

    bootstrap = kafka_cluster.bootstrap
    topic = unique_topic("replicated")
    create_topic(bootstrap, topic, partitions=1, replication=3, config={"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic})
    producer.init_transactions(60)

    def transaction(batch: int, *, commit: bool) -> None:
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, key=f"{batch}.{i}", value=json.dumps({"batch": batch}))
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)

    transaction(0, commit=True)
    transaction(1, commit=False)
    # When the partition's leader is killed, and the producer goes on with another leader
    leader = kafka_cluster.leader_of(topic, 0)
    kafka_cluster.node(leader).kill()
    try:
        _wait(lambda: kafka_cluster.leader_of(topic, 0) not in (-1, leader))
        transaction(2, commit=True)
        # Then a read_committed consumer gets the two committed transactions, nothing else
        records = confluent_records(bootstrap, topic, {0: (0, _end(bootstrap, topic, 0))})
        assert [json.loads(r[5])["batch"] for r in records] == [0] * 5 + [2] * 5
    finally:
        kafka_cluster.node(leader).start()
    kafka_cluster.wait_for_brokers(3)
