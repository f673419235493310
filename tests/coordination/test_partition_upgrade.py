"""A topology whose partition metadata the release before 0.2 wrote (one znode per partition and
txid, :mod:`tests.coordination.legacy_writer`) goes on where it stood with today's layout: its
txids, a pending batch re-emitted with the same ranges, a replay of an old txid, and an opaque
spout's committed history (issue 55)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from kazoo.client import KazooClient

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.spout_state import ZkPartitionState
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.operation import Count
from airflow_trident.spout.memory import MemoryOpaqueSpout, MemoryTransactionalSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology
from tests.coordination.legacy_writer import LegacyStore

pytestmark = pytest.mark.integration

PARTITIONS = 6
TAKE = 2
ROWS = {
    f"part.{i}": [(f"w{(i * 3 + j) % 5}",) for j in range(5 * TAKE + 1)] for i in range(PARTITIONS)
}


def steps_for(store: CoordinatorStore, spout: Any, kind: str, keep: int = 16) -> BatchSteps:
    t = TridentTopology(store.paths.topology)
    t.new_stream("words", spout).group_by(["word"]).persistent_aggregate(
        memory_state(f"{store.paths.topology}_n", kind), Count(), ["n"], name="counts"
    )
    return BatchSteps(t, store, keep_txids=keep)


def counts(steps: BatchSteps) -> dict[str, int]:
    words = [f"w{i}" for i in range(5)]
    values = steps.query_state("counts").multi_get([(w,) for w in words])
    return {w: v for w, v in zip(words, values, strict=True) if v}


def expected(upto: dict[str, int]) -> dict[str, int]:
    return dict(Counter(w for p, ts in ROWS.items() for (w,) in ts[: upto[p]]))


def flat(emitted: dict[str, dict[str, list[Any]]]) -> dict[str, list[Any]]:
    return {p: list(ts) for parts in emitted.values() for p, ts in parts.items()}


def stores(client: KazooClient, paths: CoordinatorPaths) -> tuple[LegacyStore, CoordinatorStore]:
    return LegacyStore(client, paths), CoordinatorStore(client, paths)


def test_transactional_goes_on_after_upgrade(zk_client: KazooClient, zk_store: Any) -> None:
    legacy, store = stores(zk_client, zk_store.paths)
    spout = MemoryTransactionalSpout(ROWS, ["word"], TAKE)
    old = steps_for(legacy, spout, "transactional")
    emitted_1 = flat(old.emit(old.new_attempt(int(old.begin("r1")["txid"]))))
    for i in (1, 2, 3):
        assert old.run_batch(f"r{i}").txid == i
    # txid 4 begun and emitted by the old release, not committed
    pending = flat(old.emit(old.new_attempt(int(old.begin("r4")["txid"]))))
    assert zk_client.exists(f"{legacy.paths.user('words')}/part%2E0/{'4'.zfill(20)}")
    assert zk_client.exists(store.paths.spout_state("words")) is None

    new = steps_for(store, spout, "transactional")
    assert counts(new) == expected(dict.fromkeys(ROWS, 3 * TAKE))
    # the pending txid re-emits exactly the ranges the old release fixed
    assert flat(new.emit(new.new_attempt(4))) == pending
    assert new.run_batch("r4").txid == 4
    assert counts(new) == expected(dict.fromkeys(ROWS, 4 * TAKE))
    # a replay of an old txid re-emits its ranges, and changes nothing
    assert flat(new.emit(new.new_attempt(1))) == emitted_1
    assert new.replay(2).committed is False
    for i in (5, 6):
        assert new.run_batch(f"r{i}").txid == i
    assert counts(new) == expected({p: len(ts) for p, ts in ROWS.items()})
    layout = ZkPartitionState(store, "words")
    assert layout.get_many(4, ["part.0"]) == {"part.0": {"offset": 3 * TAKE, "count": TAKE}}
    assert layout.latest_before("part.5", 7) == (6, {"offset": 5 * TAKE, "count": 1})


def test_opaque_history_after_upgrade(zk_client: KazooClient, zk_store: Any) -> None:
    legacy, store = stores(zk_client, zk_store.paths)
    spout = MemoryOpaqueSpout(ROWS, ["word"], TAKE)
    old = steps_for(legacy, spout, "opaque")
    assert old.run_batch("r1").records_in == PARTITIONS * TAKE
    spout.set_unreadable("part.1", "part.4")  # two partitions lag behind in txid 2
    assert old.run_batch("r2").records_in == (PARTITIONS - 2) * TAKE
    # txid 3 staged by the old release with part.2 unreadable; not committed
    spout.set_unreadable("part.2")
    staged = flat(old.emit(old.new_attempt(int(old.begin("r3")["txid"]))))
    assert staged["part.2"] == []
    committed_before = {p: legacy.partition_state("words").get_committed(p) for p in ROWS}

    spout.set_unreadable()
    new = steps_for(store, spout, "opaque")
    state = new.store.partition_state("words")
    assert state.committed_many(sorted(ROWS)) == committed_before
    ends = {p: 2 * TAKE for p in ROWS} | {"part.1": TAKE, "part.4": TAKE}
    assert counts(new) == expected(ends)
    # txid 3 re-emitted, differently: part.2 is readable now
    report = new.run_batch("r3")
    assert (report.txid, report.records_in) == (3, PARTITIONS * TAKE)
    ends = {p: e + TAKE for p, e in ends.items()}
    assert counts(new) == expected(ends)
    while new.run_batch().records_in:
        pass
    assert counts(new) == expected({p: len(ts) for p, ts in ROWS.items()})
    committed = state.committed_many(sorted(ROWS))
    assert {p: c["meta"]["next_offset"] for p, c in committed.items()} == {
        p: len(ts) for p, ts in ROWS.items()
    }


def test_old_nodes_go_once_rotation_passes_them(zk_client: KazooClient, zk_store: Any) -> None:
    legacy, store = stores(zk_client, zk_store.paths)
    spout = MemoryTransactionalSpout(ROWS, ["word"], 1)
    old = steps_for(legacy, spout, "transactional", keep=2)
    for i in (1, 2, 3):
        old.run_batch(f"r{i}")
    new = steps_for(store, spout, "transactional", keep=2)
    new.run_batch("r4")
    assert zk_client.exists(legacy.paths.user("words")) is not None  # txid 3 still kept
    for i in (5, 6):
        new.run_batch(f"r{i}")
    assert zk_client.exists(legacy.paths.user("words")) is None
    assert counts(new) == expected(dict.fromkeys(ROWS, 6))
    txids = zk_client.get_children(f"{store.paths.spout_state('words')}/txids")
    assert sorted(int(t) for t in txids) == [5, 6]
    # a partition's newest metadata among rotated txids stays (in base)
    state = ZkPartitionState(store, "words")
    assert state.latest_before("part.0", 5) == (4, {"offset": 3, "count": 1})
