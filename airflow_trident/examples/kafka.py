"""Word count over a Kafka topic: sentences produced as JSON records, counted by word.

* :func:`produce_sentences` — a small producer: creates the topic (2 partitions) if it does not
  exist and produces ``n`` records ``{"sentence": ...}`` round robin over its partitions
  (idempotent producer, every delivery awaited);
* :data:`kafka_word_count` — a :class:`~airflow_trident.spout.kafka.KafkaSpout` (transactional:
  a txid's offsets are fixed the first time it runs and re-read on every replay) over the topic
  ``TRIDENT_KAFKA_TOPIC`` (default ``trident_sentences``), through the Airflow ``kafka``
  connection ``trident_kafka`` -> split -> group by word -> persistent count (transactional SQL
  state in the run's state database), and the DRPC stream ``words`` summing the counts of the
  words asked for.

The topic is read when the module is imported (the DAG's tasks and Spark jobs read it from their
environment); the broker only when a batch runs (``docs/sources/kafka.md``). The demo:
``bash scripts/kafka-demo.sh`` (``docs/kafka-demo.md``).

>>> kafka_word_count.name, [n.kind for n in kafka_word_count.nodes.values()][:3]
('kafka_word_count', ['spout', 'each', 'persist'])
>>> sorted(word_counts(["the cow", "the moon"]).items())
[('cow', 1), ('moon', 1), ('the', 2)]
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from collections.abc import Iterable

from airflow_trident.errors import TridentError
from airflow_trident.operation import Count, FilterNull, MapGet, Split, Sum
from airflow_trident.spout.kafka import KafkaSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology

__all__ = [
    "CONNECTION_ID",
    "MAX_OFFSETS_PER_PARTITION",
    "PARTITIONS",
    "SENTENCES",
    "TOPIC_ENV",
    "kafka_word_count",
    "produce_sentences",
    "topic",
    "word_counts",
]

TOPIC_ENV = "TRIDENT_KAFKA_TOPIC"
CONNECTION_ID = "trident_kafka"
"""The Airflow ``kafka`` connection: ``{"bootstrap.servers": ...}`` in its extra."""
PARTITIONS = 2
MAX_OFFSETS_PER_PARTITION = 10_000
"""A batch takes at most this many offsets of each partition (the rest: the next batches)."""
SENTENCES = (
    "the cow jumped over the moon",
    "the man went to the store and bought some candy",
    "four score and seven years ago",
    "how many apples can you eat",
    "to be or not to be the person",
)


def topic() -> str:
    """``TRIDENT_KAFKA_TOPIC``, else ``trident_sentences``."""
    return os.environ.get(TOPIC_ENV) or "trident_sentences"


def word_counts(sentences: Iterable[str]) -> Counter[str]:
    """What the topology counts for ``sentences``: each whitespace-separated word."""
    return Counter(word for sentence in sentences for word in sentence.split())


def _create_topic(bootstrap: str, name: str, partitions: int, timeout_s: float) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if name in admin.list_topics(timeout=timeout_s).topics:
        return
    future = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1)],
        operation_timeout=timeout_s, request_timeout=timeout_s,
    )[name]  # fmt: skip
    try:
        future.result(timeout=timeout_s)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # made meanwhile: fine
            raise


def produce_sentences(
    bootstrap: str,
    topic: str,
    n: int,
    seed: int,
    *,
    partitions: int = PARTITIONS,
    timeout_s: float = 30.0,
) -> list[str]:
    """Produce ``n`` records ``{"sentence": ...}`` (sentences drawn by ``random.Random(seed)``)
    into ``topic``, record ``i`` into partition ``i % partitions``, creating the topic with
    ``partitions`` partitions if it does not exist; return the sentences once every record is
    acknowledged (an idempotent producer: a retry never writes a record twice).

    Raises
    ------
    TridentError
        If a record is not delivered within ``timeout_s``.
    """
    from confluent_kafka import Producer

    _create_topic(bootstrap, topic, partitions, timeout_s)
    rng = random.Random(seed)
    sentences = [rng.choice(SENTENCES) for _ in range(n)]
    failed: list[str] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5})  # fmt: skip
    for i, sentence in enumerate(sentences):
        value = json.dumps({"sentence": sentence}).encode()
        producer.produce(topic, value=value, partition=i % partitions, on_delivery=delivered)
        producer.poll(0)
    pending = producer.flush(timeout_s)
    if pending or failed:
        msg = (f"produce_sentences: {pending} of {n} records into {topic!r} not acknowledged "
               f"after {timeout_s} s, {len(failed)} failed ({failed[:1]})")  # fmt: skip
        raise TridentError(msg)
    return sentences


def _build() -> TridentTopology:
    topology = TridentTopology("kafka_word_count")
    spout = KafkaSpout(
        topic(),
        kafka_config_id=CONNECTION_ID,
        value_format="json",
        fields=["sentence"],
        max_offsets_per_partition=MAX_OFFSETS_PER_PARTITION,
    )
    counts = (
        topology.new_stream("sentences", spout)
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(
            sql_state(None, "kafka_word_counts", "transactional", key_fields=("word",),
                      value_type="bigint"),
            Count(),
            ["count"],
            name="word_counts",
        )
    )  # fmt: skip
    (
        topology.new_drpc_stream("words")
        .each(["args"], Split(), ["word"])
        .group_by(["word"])
        .state_query(counts, ["word"], MapGet(), ["count"])
        .each(["count"], FilterNull())
        .aggregate(["count"], Sum(), ["sum"])
    )
    return topology


kafka_word_count = _build()
