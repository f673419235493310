"""A batch's Kafka ranges read ahead by one consumer (``KafkaRange.read_together``, called by
``read_ahead`` in the in-process runtime and the Spark driver's read): the same records as
reading them one by one, and the same errors in the same order."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.errors import MalformedRecordError, SpoutEmitError
from airflow_trident.spout import kafka_client
from airflow_trident.spout.kafka import KafkaSpout
from airflow_trident.spout.kafka_records import KafkaRange
from airflow_trident.spout.ranges import PartitionRows, read_ahead
from tests.harness.kafka import create_topic, unique_topic

pytestmark = pytest.mark.integration

PARTITIONS = 4


@pytest.fixture
def topic(kafka_bootstrap: str) -> Iterator[str]:
    name = unique_topic("krt")
    create_topic(kafka_bootstrap, name, partitions=PARTITIONS)
    yield name
    from confluent_kafka.admin import AdminClient

    AdminClient({"bootstrap.servers": kafka_bootstrap}).delete_topics([name])


def produce(bootstrap: str, topic: str, values: dict[int, list[str]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, items in values.items():
        for i, value in enumerate(items):
            producer.produce(topic, key=f"k{i}", value=value, partition=partition,
                             headers=[("h", str(i).encode())])  # fmt: skip
    producer.flush(30)


def ranges(bootstrap: str, topic: str, ends: dict[int, tuple[int, int]]) -> list[KafkaRange]:
    spout = KafkaSpout(topic, config={"bootstrap.servers": bootstrap}, value_format="json",
                       fields=["w"], timeout_s=10.0)  # fmt: skip
    attempt = TransactionAttempt(1, 1)
    return [
        spout.range_of(attempt, {"topic": topic, "partition": p, "first": f, "next": n})
        for p, (f, n) in sorted(ends.items())
    ]


def partitions_of(sources: list[KafkaRange]) -> list[PartitionRows]:
    out = []
    for source in sources:
        part = PartitionRows()
        part.add_range(source)
        out.append(part)
    return out


@pytest.fixture
def consumers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the consumers the reads make."""
    made: list[int] = []
    original = kafka_client.consumer

    def counting(*args: Any, **kwargs: Any) -> Any:
        made.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(kafka_client, "consumer", counting)
    return made


def read_each(parts: list[PartitionRows]) -> list[Any]:
    """Each partition's rows, or the error reading it raised (as the runtimes meet them)."""
    out: list[Any] = []
    for part in parts:
        try:
            out.append(list(part))
        except Exception as exc:  # the error, by type and words
            out.append((type(exc).__name__, str(exc)))
    return out


def test_a_batchs_ranges_are_read_by_one_consumer_and_give_every_field_alike(
    kafka_bootstrap: str, topic: str, consumers: list[int]
) -> None:
    # Given records in all four partitions, a different number in each
    produce(kafka_bootstrap, topic, {p: [json.dumps({"w": f"w{p}-{i}"}) for i in range(3 + p)]
                                     for p in range(PARTITIONS)})  # fmt: skip
    ends = {p: (1, 3 + p) for p in range(PARTITIONS)}  # from offset 1: not the partition's start
    # When one batch's ranges are read one by one, and another's read ahead first
    one_by_one = read_each(partitions_of(ranges(kafka_bootstrap, topic, ends)))
    assert len(consumers) == PARTITIONS
    consumers.clear()
    together = partitions_of(ranges(kafka_bootstrap, topic, ends))
    read_ahead(together)
    # Then one consumer read them all
    assert len(consumers) == 1
    # And every field of every record is the same, in each partition's offset order
    assert read_each(together) == one_by_one
    assert [len(rows) for rows in one_by_one] == [2 + p for p in range(PARTITIONS)]
    assert [row[2:4] for row in one_by_one[3]] == [(topic, 3)] * 5
    assert [row[4] for row in one_by_one[3]] == [1, 2, 3, 4, 5]  # offsets
    assert len(consumers) == 1  # reading them took nothing more from the broker


def test_errors_are_met_in_the_order_reading_one_by_one_meets_them(
    kafka_bootstrap: str, topic: str
) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    # Given partition 0 with a malformed record, partition 1 whose start retention removed,
    # and good records in partitions 2 and 3
    produce(kafka_bootstrap, topic, {0: ['{"w": "a"}', "not json"],
                                     1: ['{"w": "b"}'] * 3,
                                     2: ['{"w": "c"}'] * 2,
                                     3: ['{"w": "d"}'] * 2})  # fmt: skip
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 1, 2)]).values():
        future.result(30)
    ends = {0: (0, 2), 1: (0, 3), 2: (0, 2), 3: (0, 2)}
    # When the batch reads its partitions one by one, and again after reading ahead
    one_by_one = read_each(partitions_of(ranges(kafka_bootstrap, topic, ends)))
    together = partitions_of(ranges(kafka_bootstrap, topic, ends))
    read_ahead(together)
    met = read_each(together)
    # Then each partition gives the same rows or the same error
    assert met == one_by_one
    assert met[0][0] == MalformedRecordError.__name__
    assert "partition 0 offset 1" in met[0][1]
    assert met[1][0] == SpoutEmitError.__name__
    assert "partition 1 offsets [0, 3)" in met[1][1]
    assert [row[1] for row in met[2]] == ["c", "c"]
    # And a range whose read failed reads again when asked again (a retry in the process)
    again = together[1]
    with pytest.raises(SpoutEmitError, match=r"partition 1 offsets \[0, 3\)"):
        list(again)


def test_ranges_of_one_partition_or_of_other_connections_are_read_each_on_their_own(
    kafka_bootstrap: str, topic: str, consumers: list[int]
) -> None:
    produce(kafka_bootstrap, topic, {0: [json.dumps({"w": str(i)}) for i in range(4)]})
    # Two ranges of one partition: not read together (one consumer reads one range each)
    first, second = ranges(kafka_bootstrap, topic, {0: (0, 2)}) + ranges(
        kafka_bootstrap, topic, {0: (2, 4)}
    )
    part = PartitionRows()
    part.add_range(first)
    part.add_range(second)
    read_ahead([part])
    assert consumers == []
    assert [row[1] for row in part] == ["0", "1", "2", "3"]
    assert len(consumers) == 2
