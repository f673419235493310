"""Read a Kafka offset range with Spark (``format("kafka")``) and with confluent-kafka, as
comparable records: the Kafka tests' reference reads (docs/jvm.md).

:func:`spark_records` takes any session: the tests' local one, a Spark Connect session, or the
one of a ``spark-submit`` run of this very file (it imports only pyspark and the standard
library, so ``spark-submit tests/harness/kafka_read.py BOOTSTRAP TOPIC RANGES OUT`` works
without the project on the path; ``--remote sc://...`` reads through a Connect server)::

    python tests/harness/kafka_read.py --remote sc://127.0.0.1:15002 127.0.0.1:39092 t \\
        '{"0": [0, 5]}' out.json

A record is ``[topic, partition, offset, timestamp_ms, key, value, headers]`` with key and
value as latin-1 text (bytes kept one to one) and headers as ``[[name, value], ...]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["Record", "confluent_records", "spark_records"]

Record = list[Any]
"""``[topic, partition, offset, timestamp_ms, key, value, headers]``"""


def _text(data: str | bytes | bytearray | None) -> str | None:
    if data is None or isinstance(data, str):
        return data
    return bytes(data).decode("latin-1")


def spark_records(
    spark: Any, bootstrap: str, topic: str, ranges: dict[int, tuple[int, int]]
) -> list[Record]:
    """The committed records of ``topic`` in ``ranges`` (partition -> ``[first, next)``
    offsets), read with ``spark.read.format("kafka")``: per-partition ``startingOffsets`` /
    ``endingOffsets`` JSON, ``includeHeaders``, ``kafka.isolation.level=read_committed``;
    sorted by partition and offset."""
    starting = json.dumps({topic: {str(p): first for p, (first, _) in ranges.items()}})
    ending = json.dumps({topic: {str(p): end for p, (_, end) in ranges.items()}})
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", json.dumps({topic: sorted(ranges)}))
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .option("includeHeaders", "true")
        .option("kafka.isolation.level", "read_committed")
        .load()
        .selectExpr(
            "topic", "partition", "offset", "unix_millis(timestamp) AS ts", "key", "value",
            "headers",
        )
    )
    records = [
        [
            row["topic"],
            row["partition"],
            row["offset"],
            row["ts"],
            _text(row["key"]),
            _text(row["value"]),
            [[h["key"], _text(h["value"])] for h in row["headers"] or []],
        ]
        for row in frame.collect()
    ]
    return sorted(records, key=lambda r: (r[1], r[2]))


def confluent_records(
    bootstrap: str, topic: str, ranges: dict[int, tuple[int, int]], timeout_s: float = 30.0
) -> list[Record]:
    """The same range read by a confluent-kafka consumer (``assign`` at ``first``,
    ``read_committed``, no group commits) up to ``next`` of each partition."""
    import time

    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"reader-{topic}",  # required by librdkafka; nothing is committed
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    })  # fmt: skip
    todo = {p: end for p, (first, end) in ranges.items() if end > first}
    consumer.assign([TopicPartition(topic, p, first) for p, (first, _) in ranges.items()])
    records: list[Record] = []
    deadline = time.monotonic() + timeout_s
    try:
        while todo:
            if time.monotonic() > deadline:
                msg = f"{topic}: partitions {sorted(todo)} not read to their end in {timeout_s}s"
                raise TimeoutError(msg)
            message = consumer.poll(0.5)
            if message is None:
                continue
            partition = message.partition()
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF and partition is not None:
                    # the end of what is there: a range ending at a transaction marker or an
                    # aborted record has nothing more to give
                    if (message.offset() or 0) >= todo.get(partition, 0):
                        todo.pop(partition, None)
                    continue
                raise RuntimeError(str(error))
            offset = message.offset()
            if partition is None or offset is None or partition not in todo:
                continue
            if offset >= todo[partition]:
                todo.pop(partition)
                continue
            records.append([
                message.topic(), partition, offset, message.timestamp()[1],
                _text(message.key()), _text(message.value()),
                [[name, _text(value)] for name, value in _header_pairs(message.headers())],
            ])  # fmt: skip
            if offset + 1 >= todo[partition]:
                todo.pop(partition)
    finally:
        consumer.close()
    return sorted(records, key=lambda r: (r[1], r[2]))


def _header_pairs(headers: Any) -> list[tuple[str, Any]]:
    """confluent-kafka's headers (a list of pairs, or ``None``) as a list of pairs."""
    if not headers:
        return []
    if isinstance(headers, dict):
        return list(headers.items())
    return [(str(name), value) for name, value in headers]


def main(argv: list[str] | None = None) -> None:
    """Read a range on Spark and write its records as JSON to ``out`` (see the module)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--remote", help="a Spark Connect URL (default: this spark-submit's)")
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("ranges", help='JSON {"partition": [first, next], ...}')
    parser.add_argument("out")
    args = parser.parse_args(argv)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    spark = (builder.remote(args.remote) if args.remote else builder).getOrCreate()
    ranges = {int(p): (first, end) for p, (first, end) in json.loads(args.ranges).items()}
    try:
        records = spark_records(spark, args.bootstrap, args.topic, ranges)
    finally:
        spark.stop()
    with open(args.out, "w") as out:
        json.dump(records, out)


if __name__ == "__main__":
    main(sys.argv[1:])
