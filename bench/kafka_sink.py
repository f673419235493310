"""Benchmark: records/s of our ``kafka_sink`` against a plain confluent-kafka transactional
producer writing the same records (issue 36).

Each round writes one batch of ``--records`` tuples ``(word, sentence)`` (a 1,000-word
vocabulary, 10-word sentences, as ``bench/sss.py``) on each side, alternating which goes first;
the first round is a warm-up:

* *ours*: one commit partition of ``kafka_sink(topic, config=..., topology=..., name=...)``
  with ``KafkaWriter(key="word")`` (the value: every field as a JSON object), applied as a
  batch's commit applies it (:func:`~airflow_trident.state.bracket.apply_in_commit`:
  ``begin_commit(txid)``, the writer's ``update_state`` over the batch's
  :class:`~airflow_trident.tuple.TridentTuple` s, ``commit(txid)``): a new producer of the
  partition's ``transactional.id``, ``init_transactions``, the two txid records read, one
  transaction holding the records and the txid records, committed; a new txid per round.
* *plain*: what a user writes by hand for one transaction of the same records, through the
  same serialisation (JSON key, JSON object value, ``separators=(",", ":")``), with the same
  four ``trident.*`` headers and the same partitioner (``murmur2_random``): a new producer with
  a ``transactional.id``, ``init_transactions``, ``begin_transaction``, ``produce`` +
  ``poll(0)`` per record, ``commit_transaction`` (which reports a failed delivery), ``close``.

Each side writes a topic of its own (``--partitions`` partitions), and each is timed from its
tuples in memory to the transaction committed. Printed: each round, each side's median records/s
with its spread, and a last line ``ratio=<ours records/s / plain records/s>`` (target >= 0.9).
At the end a ``read_committed`` consumer reads both topics: each must hold exactly the records
written (``(rounds + 1) * records``), nothing twice.

    source scripts/env.sh
    timeout 900 flock /tmp/heavy.lock .venv/bin/python bench/kafka_sink.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests/

WORDS_PER_SENTENCE = 10
FIELDS = ("word", "sentence")


def vocabulary(seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.choice(['w', 'W'])}ord{i:04d}" for i in range(1000)]


def batch(index: int, records: int) -> list[tuple[str, str]]:
    """``records`` tuples ``(word, sentence)``: the sentence's first word is the key."""
    rng = random.Random(1000 + index)
    vocab = vocabulary()
    out = []
    for _ in range(records):
        chosen = rng.choices(vocab, k=WORDS_PER_SENTENCE)
        out.append((chosen[0], " ".join(chosen)))
    return out


def spread(values: Sequence[float], digits: int = 0) -> str:
    """``median [min, max], spread (max - min) / median`` of ``values``, and the values."""
    mid = statistics.median(values)
    width = (max(values) - min(values)) / mid
    rounded = [round(v, digits) if digits else round(v) for v in values]
    return (f"median {mid:,.{digits}f} [{min(values):,.{digits}f}, {max(values):,.{digits}f}], "
            f"spread {width:.0%} of {rounded}")  # fmt: skip


class Ours:
    """One commit partition of ``kafka_sink``, applied as a batch's commit does."""

    def __init__(self, bootstrap: str, topic: str, topology: str) -> None:
        from airflow_trident.state.kafka import KafkaWriter, kafka_sink

        self.sink = kafka_sink(topic, config={"bootstrap.servers": bootstrap},
                               topology=topology, name="bench")  # fmt: skip
        self.writer = KafkaWriter(key="word")
        self.txid = 0

    def write(self, tuples: Sequence[tuple[Any, ...]]) -> float:
        from airflow_trident.state.bracket import apply_in_commit
        from airflow_trident.tuple import TridentCollector, tuple_type

        make = tuple_type(FIELDS)
        batch_tuples = [make(t) for t in tuples]  # as the commit's partition hands them over
        self.txid += 1
        started = time.perf_counter()
        state = self.sink.make_state(0, 1)
        apply_in_commit(
            self.txid, state,
            lambda: self.writer.update_state(state, batch_tuples, TridentCollector()),
        )  # fmt: skip
        elapsed = time.perf_counter() - started
        if self.sink.records() != {"topology": self.sink.topology, "sink": "bench",
                                   "txid": self.txid, "partitions": 1}:  # fmt: skip
            msg = f"ours: txid {self.txid} is not the sink's last txid"
            raise RuntimeError(msg)
        return elapsed


class Plain:
    """A confluent-kafka transactional producer, one transaction per batch, by hand."""

    def __init__(self, bootstrap: str, topic: str, topology: str) -> None:
        self.bootstrap, self.topic, self.topology = bootstrap, topic, topology
        self.txid = 0

    def write(self, tuples: Sequence[tuple[Any, ...]]) -> float:
        from confluent_kafka import Producer

        self.txid += 1
        headers: list[tuple[str, str | bytes | None]] = [
            ("trident.topology", self.topology.encode()),
            ("trident.sink", b"bench"),
            ("trident.txid", str(self.txid).encode()),
            ("trident.partition", b"0/1"),
        ]
        dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
        started = time.perf_counter()
        producer = Producer({"bootstrap.servers": self.bootstrap, "partitioner": "murmur2_random",
                             "transactional.id": f"bench.plain.{self.topic}"})  # fmt: skip
        producer.init_transactions(60)
        producer.begin_transaction()
        topic = self.topic
        for t in tuples:
            key = dumps(t[0]).encode()
            value = dumps(dict(zip(FIELDS, t, strict=True))).encode()
            while True:
                try:
                    producer.produce(topic, value=value, key=key, headers=headers)
                    break
                except BufferError:  # the local queue is full: let it drain
                    producer.poll(0.05)
            producer.poll(0)
        producer.commit_transaction(60)
        producer.close()
        return time.perf_counter() - started


def delete_topics(bootstrap: str, names: list[str]) -> None:
    """Delete the benchmark's topics, waiting for the broker's answer (``delete_topics`` only
    queues the request: a process that exits at once leaves them)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures die with it
    for future in admin.delete_topics(names).values():
        future.result(timeout=60)


def committed_records(bootstrap: str, topic: str, partitions: int) -> int:
    """The records a ``read_committed`` consumer reads in ``topic`` (all partitions)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench_{uuid.uuid4().hex}",
                       "isolation.level": "read_committed", "enable.auto.commit": "false",
                       "enable.partition.eof": "true"})  # fmt: skip
    try:
        reader.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        seen, ended, deadline = 0, set[int](), time.monotonic() + 600
        while len(ended) < partitions and time.monotonic() < deadline:
            for message in reader.consume(10_000, timeout=1.0):
                error = message.error()
                if error is None:
                    seen += 1
                elif error.code() == KafkaError._PARTITION_EOF:
                    ended.add(int(message.partition() or 0))
        return seen
    finally:
        reader.close()


def run_size(
    records: int, rounds: int, sides: dict[str, Any], start: int
) -> dict[str, list[float]]:
    """``rounds + 1`` batches of ``records`` on each side; records/s of the timed ones."""
    rates: dict[str, list[float]] = defaultdict(list)
    names = list(sides)
    for r in range(rounds + 1):
        tuples = batch(start + r, records)
        shift = r % len(names)
        line = []
        for name in names[shift:] + names[:shift]:  # each side goes first in turn
            elapsed = sides[name].write(tuples)
            line.append(f"{name} {elapsed:.2f} s ({records / elapsed:,.0f} records/s)")
            if r:
                rates[name].append(records / elapsed)
        warm = " (warm-up)" if r == 0 else ""
        print(f"{records:,} round {r}: {', '.join(line)}{warm}", flush=True)
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed batches per side and size")
    parser.add_argument("--records", default="100000,1000000",
                        help="records per batch, comma-separated sizes")  # fmt: skip
    parser.add_argument("--partitions", type=int, default=4, help="topic partitions")
    args = parser.parse_args()
    bootstrap = os.environ.get("TRIDENT_KAFKA_BOOTSTRAP")
    if not bootstrap:
        print("TRIDENT_KAFKA_BOOTSTRAP unset: source scripts/env.sh", file=sys.stderr)
        return 2
    from tests.harness.kafka import create_topic

    sizes = [int(s) for s in args.records.split(",")]
    tag = uuid.uuid4().hex[:8]
    topology = f"bench_sink_{tag}"
    topics = {name: f"bench_sink_{name}_{tag}" for name in ("ours", "plain")}
    for topic in topics.values():
        create_topic(bootstrap, topic, partitions=args.partitions)
    makers: dict[str, Callable[[str, str, str], Any]] = {"ours": Ours, "plain": Plain}
    sides = {name: makers[name](bootstrap, topic, topology) for name, topic in topics.items()}
    print(
        f"broker {bootstrap}, topics of {args.partitions} partitions; ours: kafka_sink, one "
        f"commit partition; plain: a confluent-kafka transactional producer",
        flush=True,
    )
    ratios: dict[int, float] = {}
    exact = False
    try:
        start = 0
        for records in sizes:
            rates = run_size(records, args.rounds, sides, start)
            start += args.rounds + 1
            med = {name: statistics.median(v) for name, v in rates.items()}
            for name in sides:
                print(f"{records:,} {name} records/s: {spread(rates[name])}")
            per_round = [o / p for o, p in zip(rates["ours"], rates["plain"], strict=True)]
            print(f"{records:,} ours / plain, per round: {spread(per_round, 3)}")
            ratios[records] = med["ours"] / med["plain"]
        written = sum(sizes) * (args.rounds + 1)
        exact = True
        for name, topic in topics.items():
            seen = committed_records(bootstrap, topic, args.partitions)
            print(f"{name}: read_committed reads {seen:,} records of the {written:,} written: "
                  f"{seen == written}")  # fmt: skip
            exact = exact and seen == written
    finally:
        delete_topics(bootstrap, list(topics.values()))
    for records, ratio in ratios.items():
        print(f"ratio_{records}={ratio:.3f} ({records:,} records per batch, ours / plain "
              f"records/s)")  # fmt: skip
    for ratio in ratios.values():
        print(f"ratio={ratio:.3f}")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
