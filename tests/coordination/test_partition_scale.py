"""Thousands of partitions on the real ZooKeeper: exact counts after batches, a replay and an
opaque re-emit, and a batch's ZooKeeper requests counted: they do not grow with the partitions
(issue 55)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from kazoo.client import KazooClient

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.operation import Count
from airflow_trident.spout.memory import MemoryOpaqueSpout, MemoryTransactionalSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology
from tests.harness.zk_requests import RequestCounter

pytestmark = pytest.mark.integration

MANY = 2048
TAKE = 4


def data(partitions: int, per_partition: int) -> dict[str, list[tuple[str]]]:
    return {
        f"p{i:04d}": [(f"w{(i + j) % 7}",) for j in range(per_partition)] for i in range(partitions)
    }


def steps_for(store: CoordinatorStore, spout: Any, name: str) -> BatchSteps:
    t = TridentTopology(store.paths.topology)
    t.new_stream("words", spout).group_by(["word"]).persistent_aggregate(
        memory_state(f"{store.paths.topology}_{name}", "opaque"), Count(), ["n"], name="counts"
    )
    return BatchSteps(t, store)


def counts(steps: BatchSteps) -> dict[str, int]:
    words = [f"w{i}" for i in range(7)]
    values = steps.query_state("counts").multi_get([(w,) for w in words])
    return {w: v for w, v in zip(words, values, strict=True) if v}


def expected(rows: dict[str, list[tuple[str]]], upto: int) -> dict[str, int]:
    return dict(Counter(w for ts in rows.values() for (w,) in ts[:upto]))


def flat(emitted: dict[str, dict[str, list[Any]]]) -> dict[str, list[Any]]:
    return {p: list(ts) for parts in emitted.values() for p, ts in parts.items()}


def test_transactional_2048_partitions_exact_and_replayed(zk_store: CoordinatorStore) -> None:
    rows = data(MANY, 3 * TAKE - 1)
    steps = steps_for(zk_store, MemoryTransactionalSpout(rows, ["word"], TAKE), "tx")
    first = steps.begin("r1")
    plan = steps.new_attempt(int(first["txid"]))
    emitted_first = flat(steps.emit(plan))
    assert sum(map(len, emitted_first.values())) == MANY * TAKE
    assert steps.run_batch("r1").txid == 1
    assert counts(steps) == expected(rows, TAKE)
    for i in (2, 3, 4):
        steps.run_batch(f"r{i}")
    assert counts(steps) == expected(rows, 3 * TAKE - 1)
    # a replay of an old txid re-emits exactly its ranges, and changes nothing
    again = flat(steps.emit(steps.new_attempt(1)))
    assert again == emitted_first
    assert steps.replay(2).committed is False
    assert counts(steps) == expected(rows, 3 * TAKE - 1)


def test_opaque_2048_partitions_re_emitted_differently(zk_store: CoordinatorStore) -> None:
    rows = data(MANY, 3 * TAKE)
    spout = MemoryOpaqueSpout(rows, ["word"], TAKE)
    steps = steps_for(zk_store, spout, "opaque")
    half = [p for i, p in enumerate(sorted(rows)) if i % 2]
    spout.set_unreadable(*half)
    txid = int(steps.begin(None)["txid"])
    staged = flat(steps.emit(steps.new_attempt(txid)))
    assert sum(map(len, staged.values())) == (MANY - len(half)) * TAKE
    spout.set_unreadable()  # the retry reads every partition: the batch is re-emitted otherwise
    report = steps.run_batch()
    assert (report.txid, report.records_in) == (txid, MANY * TAKE)
    assert counts(steps) == expected(rows, TAKE)
    spout.set_unreadable(*half)
    assert steps.run_batch().records_in == (MANY - len(half)) * TAKE
    spout.set_unreadable()
    while steps.run_batch().records_in:
        pass
    assert counts(steps) == expected(rows, 3 * TAKE)
    state = zk_store.partition_state("words")
    committed = state.committed_many(sorted(rows))
    assert {c["meta"]["next_offset"] for c in committed.values()} == {3 * TAKE}


def requests_per_batch(
    client: KazooClient, root: str, name: str, partitions: int, opaque: bool
) -> tuple[int, int]:
    """ZooKeeper requests and the largest znode written of a steady batch (the third) of a
    topology with ``partitions`` partitions and 8,192 records per batch."""
    take = max(1, 8192 // partitions)
    rows = data(partitions, 4 * take)
    store = CoordinatorStore(client, CoordinatorPaths(root, name))
    kind = MemoryOpaqueSpout if opaque else MemoryTransactionalSpout
    steps = steps_for(store, kind(rows, ["word"], take), name)
    counter = RequestCounter(client)
    try:
        for i in (1, 2):
            steps.run_batch(f"{name}-{i}")
        counter.reset()
        steps.run_batch(f"{name}-3")
        return counter.reset()
    finally:
        store.delete_all()


@pytest.mark.parametrize("opaque", [False, True], ids=["transactional", "opaque"])
def test_requests_do_not_grow_with_partitions(
    zk_config: Any, unique_name: str, opaque: bool
) -> None:
    from airflow_trident.coordination.client import connect

    found = {}
    for partitions in (4, MANY):
        client = connect(zk_config)
        try:
            found[partitions] = requests_per_batch(
                client, zk_config.root, f"{unique_name}_{partitions}", partitions, opaque
            )
        finally:
            client.stop()
            client.close()
    requests = {p: r for p, (r, _) in found.items()}
    assert requests[MANY] <= requests[4] + 2, requests


class _AskingCoordinator:
    """A coordinator that asks every partition's progress at begin (as Kafka's does, for where
    its watermarks start)."""

    def __init__(self, partitions: list[str]) -> None:
        self.partitions = partitions
        self.progress: Any = None
        self.asked: list[Any] = []

    def use_progress(self, progress: Any) -> None:
        self.progress = progress

    def get_partitions_for_batch(self) -> Any:
        self.asked = [self.progress(p, 10**9) for p in self.partitions]
        return {"partitions": self.partitions}

    def is_ready(self, txid: int) -> bool:
        return True

    def close(self) -> None:
        return None


class AskingSpout(MemoryTransactionalSpout):
    def get_partitioned_coordinator(self) -> Any:
        return _AskingCoordinator(sorted(self.data))


@pytest.mark.parametrize("partitions", [4, MANY])
def test_progress_of_every_partition_at_begin_is_two_requests(
    zk_store: CoordinatorStore, partitions: int
) -> None:
    rows = data(partitions, 3)
    steps = steps_for(zk_store, AskingSpout(rows, ["word"], 1), "asking")
    for i in (1, 2):
        steps.run_batch(f"r{i}")
    coordinator = steps.coordinator._coordinators["words"]
    counter = RequestCounter(zk_store.client)
    coordinator.initialize_transaction(3, None, None)
    assert counter.reset()[0] == 2  # the txids' listing, the newest txid's value
    inner = coordinator._inner
    assert inner.asked == [{"offset": 1, "count": 1}] * partitions
