"""Topologies, a crash switch and a ``read_committed`` reader for the Kafka sink's tests.

:class:`CrashingKafkaSink` is a :func:`~airflow_trident.state.kafka.kafka_sink` whose last commit
partition dies at one point of its commit (:data:`CRASH_POINTS`): by an exception (the commit
fails in this process) or by ``os._exit`` (the process dies there, as a killed worker does:
nothing is aborted, closed or flushed). A commit that must really die runs in a child process,
``python -m tests.harness.kafka_sinks commit ...`` (:func:`commit_in_child`), against the same
ZooKeeper store and staging area as the test.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_trident.operation import Count, Split
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.kafka import KafkaSinkFactory, KafkaSinkState, KafkaWriter, kafka_sink
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology

__all__ = [
    "assert_each_word_once",
    "CRASH_POINTS",
    "SENTENCES",
    "SPARK_CONNECTION",
    "SPARK_TOPIC",
    "CrashingKafkaSink",
    "Record",
    "changelog_topology",
    "commit_in_child",
    "expected_words",
    "kafka_spark_words",
    "kafka_sink_for",
    "read_topic",
    "reset_spark_target",
    "words_topology",
]

CRASH_POINTS = ("before_produce", "mid_produce", "after_produce", "after_kafka_commit")
"""Where a commit partition dies: the transaction begun and nothing produced; half its records
produced (and flushed to the broker); every record produced and the txid sent to the
transaction, before the commit; after Kafka's commit (so before ZooKeeper's compare-and-set)."""
EXIT_CODE = 86
SENTENCES = {f"p{p}": [(f"w{p}{i} x{i % 3} y",) for i in range(12)] for p in range(3)}
"""3 source partitions of 12 sentences; 2 per partition and batch: 6 batches."""


class Crash(RuntimeError):
    """The injected failure (``mode="raise"``)."""


class _CrashingState(KafkaSinkState):
    def __init__(self, factory: CrashingKafkaSink, index: int, count: int) -> None:
        super().__init__(factory, index, count)
        self.switch = factory
        self.armed = index == count - 1 and factory.point is not None

    def _die(self, point: str) -> None:
        if not self.armed or self.switch.point != point:
            return
        self.switch.point = None  # once per process
        if self.switch.mode == "exit":
            sys.stdout.flush()
            os._exit(EXIT_CODE)
        msg = f"injected: partition {self.index} died at {point}"
        raise Crash(msg)

    def _produce(self, producer: Any, records: tuple[list[Any], list[Any]], headers: Any) -> None:
        self._die("before_produce")
        keys, values = records
        half = len(keys) // 2
        if self.armed and self.switch.point == "mid_produce":
            super()._produce(producer, (keys[:half], values[:half]), headers)
            producer.flush(30)  # on the broker, in the open transaction
            self._die("mid_produce")
        super()._produce(producer, records, headers)

    def _end_transaction(self, producer: Any, txid: int) -> None:
        if self.armed and self.switch.point == "after_produce":
            producer.flush(30)
            self._die("after_produce")
        super()._end_transaction(producer, txid)
        self._die("after_kafka_commit")


class CrashingKafkaSink(KafkaSinkFactory):
    """A Kafka sink whose last commit partition dies once at ``point`` (``None``: never), by
    ``mode``: ``"raise"`` (:class:`Crash`) or ``"exit"`` (``os._exit``)."""

    def __init__(
        self, *args: Any, point: str | None = None, mode: str = "raise", **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.point = point
        self.mode = mode

    def make_state(self, partition_index: int = 0, num_partitions: int = 1) -> KafkaSinkState:
        super().make_state(partition_index, num_partitions)  # its checks
        return _CrashingState(self, partition_index, num_partitions)


def words_topology(name: str, sink: KafkaSinkFactory, *, parallelism: int = 2) -> TridentTopology:
    """Sentences -> split -> every word produced (key: the word) by ``sink``, in
    ``parallelism`` commit partitions placed by the word."""
    topology = TridentTopology(name)
    (
        topology.new_stream(
            "sentences", MemoryTransactionalSpout(SENTENCES, ["sentence"], take_per_batch=2)
        )
        .each(["sentence"], Split(), ["word"])
        .partition_by(["word"])
        .parallelism_hint(parallelism)
        .partition_persist(sink, ["word"], KafkaWriter(key="word", value="word"), name="events")
    )
    return topology


SPARK_TOPIC = "trident_tests_kafka_sink_spark"
SPARK_TOPOLOGY = "kafka_sink_spark"
SPARK_CONNECTION = "trident_kafka_sink_test"


def kafka_spark_words() -> TridentTopology:
    """:func:`words_topology` producing to :data:`SPARK_TOPIC` through the Airflow ``kafka``
    connection :data:`SPARK_CONNECTION`, loaded by reference on Spark executors (the
    connection travels in the task closure; the test resets the topic and the sink's groups)."""
    sink = kafka_sink(SPARK_TOPIC, SPARK_CONNECTION, topology=SPARK_TOPOLOGY)
    return words_topology(SPARK_TOPOLOGY, sink)


def reset_spark_target(bootstrap: str) -> None:
    """Delete :data:`SPARK_TOPIC` and the sink's consumer groups, then create the topic anew."""
    from confluent_kafka.admin import AdminClient

    from tests.harness.kafka import create_topic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    groups = [
        g.group_id
        for g in admin.list_consumer_groups().result(timeout=30).valid
        if g.group_id.startswith(f"trident.{SPARK_TOPOLOGY}.")
    ]
    if groups:
        for future in admin.delete_consumer_groups(groups, request_timeout=30).values():
            future.result(timeout=30)
    if SPARK_TOPIC in admin.list_topics(timeout=30).topics:
        admin.delete_topics([SPARK_TOPIC], operation_timeout=30)[SPARK_TOPIC].result(timeout=30)
        deadline = time.monotonic() + 60
        while SPARK_TOPIC in admin.list_topics(timeout=30).topics:
            if time.monotonic() > deadline:
                raise TimeoutError(SPARK_TOPIC)
            time.sleep(0.2)
    for _ in range(50):  # the deletion may still be finishing on the broker
        try:
            create_topic(bootstrap, SPARK_TOPIC, partitions=3)
            return
        except Exception:
            time.sleep(0.2)
    create_topic(bootstrap, SPARK_TOPIC, partitions=3)


def changelog_topology(name: str, sink: KafkaSinkFactory) -> TridentTopology:
    """Word counts (a transactional memory state) whose committed updates ``sink`` produces as
    a changelog: key the word, value its new count."""
    topology = TridentTopology(name)
    counts = (
        topology.new_stream(
            "sentences", MemoryTransactionalSpout(SENTENCES, ["sentence"], take_per_batch=2)
        )
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(
            memory_state(name, "transactional"), Count(), ["count"], name="counts"
        )
    )
    counts.new_values_stream().partition_persist(
        sink, ["word", "count"], KafkaWriter(key="word", value="count"), name="changelog"
    )
    return topology


def expected_words(batches: int) -> dict[str, int]:
    """word -> count in the first ``batches`` batches."""
    counts: dict[str, int] = {}
    for rows in SENTENCES.values():
        for (sentence,) in rows[: 2 * batches]:
            for w in sentence.split():
                counts[w] = counts.get(w, 0) + 1
    return counts


def assert_each_word_once(records: list[Any], batches: int) -> None:
    """Every word of the first ``batches`` batches read once per occurrence, and no txid's
    record twice (a word's records of one txid are its occurrences in that batch)."""
    assert Counter(r.key for r in records) == expected_words(batches)
    per_txid = Counter((r.txid, r.key) for r in records)
    for txid in range(1, batches + 1):
        batch = Counter(
            w
            for rows in SENTENCES.values()
            for (s,) in rows[2 * (txid - 1) : 2 * txid]
            for w in s.split()
        )
        assert {k: n for (t, k), n in per_txid.items() if t == txid} == dict(batch)


@dataclass(frozen=True)
class Record:
    """One record a ``read_committed`` consumer read."""

    partition: int
    offset: int
    key: Any
    value: Any
    headers: dict[str, str]

    @property
    def txid(self) -> int:
        return int(self.headers["trident.txid"])


def read_topic(bootstrap: str, topic: str, *, timeout_s: float = 60.0) -> list[Record]:
    """Every record of ``topic`` a ``read_committed`` consumer reads, from the start to each
    partition's last stable offset (JSON keys and values decoded).

    Raises
    ------
    TimeoutError
        If the consumer does not reach the end (a transaction left open holds it back).
    """
    import json

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader_{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": "false",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
        parts = sorted(meta.partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1]
            for p in parts
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        records: list[Record] = []
        deadline = time.monotonic() + timeout_s
        while True:
            positions = {
                tp.partition: tp.offset
                for tp in consumer.position([TopicPartition(topic, p) for p in parts])
            }
            if all(ends[p] == 0 or positions.get(p, -1) >= ends[p] for p in parts):
                return records
            if time.monotonic() > deadline:
                msg = f"{topic}: read_committed did not reach {ends} (at {positions})"
                raise TimeoutError(msg)
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            found: Any = message  # confluent-kafka's stubs type headers loosely
            headers = {str(k): bytes(v).decode() for k, v in (found.headers() or [])}
            key, value = message.key(), message.value()
            records.append(
                Record(
                    int(found.partition()),
                    int(found.offset()),
                    None if key is None else json.loads(key),
                    None if value is None else json.loads(value),
                    headers,
                )
            )
    finally:
        consumer.close()


def kafka_sink_for(topology: str, topic: str, bootstrap: str, **kwargs: Any) -> KafkaSinkFactory:
    """The sink of the tests' topologies (``config`` with ``bootstrap.servers`` only)."""
    return kafka_sink(topic, config={"bootstrap.servers": bootstrap}, topology=topology, **kwargs)


def commit_in_child(
    *,
    name: str,
    topic: str,
    bootstrap: str,
    zk_hosts: str,
    zk_root: str,
    staging: str,
    txid: int,
    point: str,
) -> int:
    """Commit staged ``txid`` of :func:`words_topology` in a child process whose sink dies at
    ``point`` by ``os._exit``; the child's exit code."""
    args = [
        sys.executable,
        "-m",
        "tests.harness.kafka_sinks",
        "commit",
        "--name",
        name,
        "--topic",
        topic,
        "--bootstrap",
        bootstrap,
        "--zk-hosts",
        zk_hosts,
        "--zk-root",
        zk_root,
        "--staging",
        staging,
        "--txid",
        str(txid),
        "--point",
        point,
    ]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != EXIT_CODE:
        msg = f"the child exited {done.returncode}, not {EXIT_CODE}:\n{done.stderr[-4000:]}"
        raise AssertionError(msg)
    return done.returncode


def _main(argv: Sequence[str] | None = None) -> int:
    from airflow_trident.batch.steps import BatchSteps
    from airflow_trident.coordination.client import ZkConfig, connect
    from airflow_trident.coordination.paths import CoordinatorPaths
    from airflow_trident.coordination.store import CoordinatorStore
    from airflow_trident.runtime.staging import StagingArea

    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["commit"])
    for option in ("name", "topic", "bootstrap", "zk-hosts", "zk-root", "staging", "point"):
        parser.add_argument(f"--{option}", required=True)
    parser.add_argument("--txid", type=int, required=True)
    args = parser.parse_args(argv)
    sink = CrashingKafkaSink(
        args.topic,
        config={"bootstrap.servers": args.bootstrap},
        topology=args.name,
        point=args.point,
        mode="exit",
    )
    topology = words_topology(args.name, sink)
    client = connect(ZkConfig(hosts=args.zk_hosts, root=args.zk_root, timeout=10.0))
    store = CoordinatorStore(client, CoordinatorPaths(args.zk_root, args.name))
    steps = BatchSteps(topology, store, StagingArea(args.staging, topology.name))
    steps.commit(args.txid)
    print("the commit finished: the crash point was never reached", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(_main())
