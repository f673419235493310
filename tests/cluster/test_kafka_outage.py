"""Seed 002's outage story with real brokers: the Kafka spouts in process (``BatchSteps``,
coordinated in the real ZooKeeper, counts in a memory state) over a 6-partition topic without
replicas spread over the 3 brokers of :func:`kafka_cluster`, while the broker leading
partition 3 is killed and restarted.

* :class:`KafkaSpout` (transactional) waits: ``is_ready`` is false and ``spout.waiting`` names
  the partitions of the dead broker; a batch begun anyway fails with ``SpoutUnavailableError``,
  is retried once the broker is back with the ranges its first attempt fixed, and every record
  counts once.
* :class:`OpaqueKafkaSpout` goes on: txid 2, emitted once with partition 3 and failed, is
  re-emitted while partition 3 is unreadable and takes only the readable partitions; the
  records it lost are read by txid 4, after the restart, and every record counts once.

Each test asserts which offsets ``[first, next)`` of which partition every batch read (its
metadata in ZooKeeper) and the exact count of every word produced. ``timeout_s`` is small so a
partition without leader costs seconds, not minutes; nothing is timed.

Run with ``bash scripts/cluster-test.sh`` (skipped by the README test command).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import SpoutUnavailableError
from airflow_trident.operation import Count
from airflow_trident.spout.kafka import KafkaSpout, OpaqueKafkaSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology
from tests.harness.kafka import PrivateKafkaCluster, create_topic, unique_topic

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

PARTITIONS = 6
TIMEOUT_S = 2.0
"""The spouts' broker call timeout: what a partition without leader costs per call."""


def _wait(predicate: Callable[[], bool], timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


class Outage:
    """A 6-partition topic without replicas on the cluster, what was produced to it, and the
    broker leading partition 3 (the victim) with the partitions it leads (lost when killed)."""

    def __init__(self, cluster: PrivateKafkaCluster) -> None:
        self.cluster = cluster
        self.topic = unique_topic("outage")
        create_topic(cluster.bootstrap, self.topic, partitions=PARTITIONS, replication=1)
        leaders = {p: cluster.leader_of(self.topic, p) for p in range(PARTITIONS)}
        assert set(leaders.values()) == {1, 2, 3}  # spread over the brokers
        self.victim = leaders[3]
        self.lost = frozenset(p for p, n in leaders.items() if n == self.victim)
        self.readable = frozenset(range(PARTITIONS)) - self.lost
        self.records: list[tuple[int, int, str]] = []
        """``(round, partition, word)`` of every record produced."""

    def produce(self, round_: int, partitions: Iterable[int], n: int) -> None:
        """``n`` records to each of ``partitions``: words ``r<round>p<partition>`` (which
        round, which partition) and ``all`` (every record)."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.cluster.bootstrap})
        for p in partitions:
            for i in range(n):
                word = f"r{round_}p{p}" if i % 2 == 0 else "all"
                producer.produce(self.topic, value=json.dumps({"w": word}), partition=p)
                self.records.append((round_, p, word))
        assert producer.flush(30) == 0

    @property
    def words(self) -> set[str]:
        return {word for _, _, word in self.records}

    def counted(self, *pairs: tuple[int, Iterable[int]]) -> dict[str, int]:
        """The count of each word in the records of the ``(round, partitions)`` given."""
        chosen = {(r, p) for r, parts in pairs for p in parts}
        return dict(Counter(word for r, p, word in self.records if (r, p) in chosen))

    def everything(self) -> dict[str, int]:
        return dict(Counter(word for _, _, word in self.records))

    def kill(self) -> None:
        self.cluster.node(self.victim).kill()
        _wait(lambda: all(self.cluster.leader_of(self.topic, p) == -1 for p in self.lost))
        assert all(self.cluster.leader_of(self.topic, p) >= 0 for p in self.readable)

    def restart(self) -> None:
        self.cluster.node(self.victim).start()
        _wait(lambda: all(self.cluster.leader_of(self.topic, p) == self.victim
                          for p in self.lost))  # fmt: skip
        self.cluster.wait_for_brokers(3)

    def pid(self, partition: int) -> str:
        return f"{self.topic}:{partition}"


def word_count(spout: Any, store: CoordinatorStore, name: str, kind: str) -> BatchSteps:
    t = TridentTopology(name)
    t.new_stream("events", spout).group_by(["w"]).persistent_aggregate(
        memory_state(t.name, kind), Count(), ["n"], name="counts"
    )
    return BatchSteps(t, store, None)


def counts(steps: BatchSteps, outage: Outage) -> dict[str, int]:
    """The committed count of every word produced (words not counted yet left out)."""
    words = sorted(outage.words)
    values = steps.query_state("counts").multi_get([(w,) for w in words])
    return {w: int(v) for w, v in zip(words, values, strict=True) if v is not None}


def spout_of(cls: Any, outage: Outage) -> Any:
    return cls(outage.topic, config={"bootstrap.servers": outage.cluster.bootstrap},
               value_format="json", fields=["w"], timeout_s=TIMEOUT_S)  # fmt: skip


def _metas(steps: BatchSteps, outage: Outage, txid: int) -> dict[int, Any]:
    state = steps.store.partition_state("events")
    return {p: state.get(outage.pid(p), txid) for p in range(PARTITIONS)}


def read_ranges(steps: BatchSteps, outage: Outage, txid: int) -> dict[int, tuple[int, int]]:
    """Partition -> the offsets ``[first, next)`` transactional batch ``txid`` read (its fixed
    metadata in ZooKeeper; partitions it took nothing from are left out)."""
    out = {}
    for p, meta in _metas(steps, outage, txid).items():
        if isinstance(meta, dict) and meta.get("next", 0) > meta.get("first", 0):
            out[p] = (int(meta["first"]), int(meta["next"]))
    return out


def opaque_ranges(steps: BatchSteps, outage: Outage, txid: int) -> dict[int, tuple[int, int]]:
    """Partition -> the offsets ``[first, next)`` opaque batch ``txid`` (its last emit) read:
    its ``end``; a partition that took nothing keeps its ``start`` as ``end``."""
    out = {}
    for p, staged in _metas(steps, outage, txid).items():
        assert staged is not None, (txid, p)
        end = staged["end"]
        if end != staged["start"] and end["next"] > end["first"]:
            out[p] = (int(end["first"]), int(end["next"]))
    return out


def _named(outage: Outage, waiting: str | None) -> set[int]:
    assert waiting is not None
    return {int(n) for n in re.findall(rf"'{outage.topic}:(\d+)'", waiting)}


def test_the_transactional_spout_waits_for_a_dead_broker_and_retries_its_batch(
    kafka_cluster: PrivateKafkaCluster, zk_store: CoordinatorStore, unique_name: str
) -> None:
    outage = Outage(kafka_cluster)
    spout = spout_of(KafkaSpout, outage)
    steps = word_count(spout, zk_store, unique_name, "transactional")
    every = range(PARTITIONS)
    # txid 1: 3 records in every partition, every broker up
    outage.produce(1, every, 3)
    assert steps.run_batch().txid == 1
    assert read_ranges(steps, outage, 1) == {p: (0, 3) for p in every}
    # 2 more records in every partition, then the broker leading partition 3 dies
    outage.produce(2, every, 2)
    outage.kill()
    # The spout is not ready and names the partitions it waits for
    assert steps.is_ready() is False
    assert _named(outage, spout.waiting) == set(outage.lost)
    # txid 2 begun anyway fails and commits nothing
    with pytest.raises(SpoutUnavailableError, match="does not answer"):
        steps.run_batch()
    assert (steps.begins.pending_txid(), steps.is_committed(2)) == (2, False)
    assert counts(steps, outage) == outage.counted((1, every))
    # 1 more record in each readable partition while the broker is down
    outage.produce(3, outage.readable, 1)
    assert steps.is_ready() is False
    # When the broker is back the spout is ready; the retry of txid 2 reads round 2 in every
    # partition, not round 3: the readable partitions' ends were fixed when txid 2 began
    outage.restart()
    assert steps.is_ready() is True
    assert spout.waiting is None
    report = steps.run_batch()
    assert (report.txid, report.records_in) == (2, 2 * PARTITIONS)
    assert read_ranges(steps, outage, 2) == {p: (3, 5) for p in every}
    # txid 3 reads round 3
    report = steps.run_batch()
    assert (report.txid, report.records_in) == (3, len(outage.readable))
    assert read_ranges(steps, outage, 3) == {p: (5, 6) for p in outage.readable}
    # Then every record counted exactly once, and nothing is left
    assert counts(steps, outage) == outage.everything()
    assert steps.is_ready() is False


def test_the_opaque_spout_goes_on_without_a_dead_broker_and_catches_up(
    kafka_cluster: PrivateKafkaCluster,
    zk_store: CoordinatorStore,
    unique_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage(kafka_cluster)
    spout = spout_of(OpaqueKafkaSpout, outage)
    steps = word_count(spout, zk_store, unique_name, "opaque")
    every, readable, lost = range(PARTITIONS), outage.readable, outage.lost
    # txid 1: 3 records in every partition, every broker up
    outage.produce(1, every, 3)
    assert steps.run_batch().txid == 1
    assert opaque_ranges(steps, outage, 1) == {p: (0, 3) for p in every}
    # txid 2 begins and is emitted with round 2 of every partition (partition 3's too) ...
    outage.produce(2, every, 2)
    txid = int(steps.begin(None)["txid"])
    first_emit = steps.emit(steps.plan(txid))["events"]
    assert txid == 2
    assert {p: len(first_emit[outage.pid(p)]) for p in every} == {p: 2 for p in every}
    # ... and fails before its commit; then the broker leading partition 3 dies
    outage.kill()
    # The opaque spout does not wait: new records in the readable partitions make it ready
    outage.produce(3, readable, 1)
    assert steps.is_ready() is True
    assert spout.waiting is None
    # The retry of txid 2 takes the readable partitions only (rounds 2 and 3: an opaque
    # re-emit reads to the watermark now); the lost partitions take nothing
    with caplog.at_level(logging.WARNING, logger="airflow_trident.spout.kafka"):
        report = steps.run_batch()
    assert (report.txid, report.records_in) == (2, 3 * len(readable))
    skipped = re.findall(r"partition (\d+) does not answer .*; an opaque Kafka batch skips it",
                         caplog.text)  # fmt: skip
    assert set(map(int, skipped)) == set(lost)
    assert opaque_ranges(steps, outage, 2) == {p: (3, 6) for p in readable}
    assert counts(steps, outage) == outage.counted((1, every), (2, readable), (3, readable))
    # txid 3, the broker still down: round 4 of the readable partitions
    outage.produce(4, readable, 1)
    report = steps.run_batch()
    assert (report.txid, report.records_in) == (3, len(readable))
    assert opaque_ranges(steps, outage, 3) == {p: (6, 7) for p in readable}
    # When the broker is back, txid 4 reads what the lost partitions held since txid 1:
    # round 2's records, emitted once in txid 2's first attempt, counted now
    outage.restart()
    assert steps.is_ready() is True
    report = steps.run_batch()
    assert (report.txid, report.records_in) == (4, 2 * len(lost))
    assert opaque_ranges(steps, outage, 4) == {p: (3, 5) for p in lost}
    # Then every record counted exactly once, and nothing is left
    assert counts(steps, outage) == outage.everything()
    assert steps.is_ready() is False
