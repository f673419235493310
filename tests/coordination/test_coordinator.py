"""The coordinator's batch steps on a real ZooKeeper with in-memory state."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.coordinator import BatchPlan, TransactionalCoordinator
from airflow_trident.coordination.spout_state import ZkPartitionState
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import CommitOrderError, ConfigurationError
from airflow_trident.spout.memory import MemoryOpaqueSpout, MemoryTransactionalSpout
from airflow_trident.spout.opaque import OpaquePartitionedSpoutExecutor, StaleBatchError
from airflow_trident.spout.partitioned import PartitionedTransactionalSpoutExecutor
from airflow_trident.state.bracket import apply_in_commit
from airflow_trident.state.combine import CombineOp
from airflow_trident.state.map.backing import MemoryBackingMap
from airflow_trident.state.map.base import RuleMap
from airflow_trident.state.map.opaque import OpaqueMap
from airflow_trident.state.map.transactional import TransactionalMap

pytestmark = pytest.mark.integration

DATA = {
    "p0": [("a",), ("b",), ("a",), ("c",), ("a",)],
    "p1": [("b",), ("b",), ("d",), ("a",), ("e",)],
}
TOTAL = Counter(w for rows in DATA.values() for (w,) in rows)


def transactional(store: CoordinatorStore) -> TransactionalCoordinator:
    spout = PartitionedTransactionalSpoutExecutor(
        MemoryTransactionalSpout(DATA, ["word"], take_per_batch=2),
        ZkPartitionState(store, "words"),
    )
    return TransactionalCoordinator(store, {"words": spout})


def opaque(store: CoordinatorStore, memory: MemoryOpaqueSpout) -> TransactionalCoordinator:
    spout = OpaquePartitionedSpoutExecutor(memory, ZkPartitionState(store, "words"))
    return TransactionalCoordinator(store, {"words": spout})


def commit_counts(
    coordinator: TransactionalCoordinator, plan: BatchPlan, state: RuleMap, tuples: Any
) -> Any:
    partial = Counter(w for (w,) in tuples)
    keys = [(w,) for w in partial]
    return coordinator.commit_applied_by(
        plan,
        lambda: apply_in_commit(
            plan.txid,
            state,
            lambda: state.multi_combine(keys, list(partial.values()), CombineOp.SUM),
        ),
    )


def read(state: RuleMap) -> dict[str, int]:
    values = state.multi_get([(w,) for w in TOTAL])
    return {w: v for w, v in zip(TOTAL, values, strict=True) if v is not None}


def test_replay_after_state_commit_does_not_double(zk_store: CoordinatorStore) -> None:
    coordinator = transactional(zk_store)
    state = TransactionalMap(MemoryBackingMap())
    for i in range(1, 4):
        plan = coordinator.begin(run_id=f"r{i}")
        tuples = coordinator.emit(plan, "words")
        if i == 2:  # crash after the state commit, before ZooKeeper's
            state.begin_commit(plan.txid)
            partial = Counter(w for (w,) in tuples)
            state.multi_combine([(w,) for w in partial], list(partial.values()), CombineOp.SUM)
            state.commit(plan.txid)
            replay = coordinator.begin(run_id="r2")
            assert replay.txid == plan.txid
            assert replay.attempt.attempt_id == plan.attempt.attempt_id + 1
            assert coordinator.emit(replay, "words") == tuples  # re-emitted exactly
            plan = replay
        commit_counts(coordinator, plan, state, tuples)
    for i in range(4, 6):
        plan = coordinator.begin(run_id=f"r{i}")
        commit_counts(coordinator, plan, state, coordinator.emit(plan, "words"))
    assert read(state) == TOTAL


def test_restart_resumes_txids_and_attempts(
    zk_config: ZkConfig, zk_store: CoordinatorStore
) -> None:
    first = transactional(zk_store)
    plan1 = first.begin(run_id="r1")
    tuples1 = first.emit(plan1, "words")
    first.begin(run_id="r2")
    # When the coordinator process restarts
    client = connect(zk_config)
    try:
        second = transactional(CoordinatorStore(client, zk_store.paths))
        again = second.begin(run_id="r1")
        new = second.begin(run_id="r3")
        # Then the run keeps its txid, its attempt rises, and new runs continue the sequence
        assert (again.txid, again.attempt.attempt_id, new.txid) == (1, 1, 3)
        assert second.emit(again, "words") == tuples1
    finally:
        client.stop()


def test_out_of_order_commit_fails_and_writes_nothing(zk_store: CoordinatorStore) -> None:
    coordinator = transactional(zk_store)
    backing = MemoryBackingMap()
    state = TransactionalMap(backing)
    coordinator.begin(run_id="r1")
    plan2 = coordinator.begin(run_id="r2")
    with pytest.raises(CommitOrderError, match=r"txid 2 .* txid 1 must commit first"):
        commit_counts(coordinator, plan2, state, coordinator.emit(plan2, "words"))
    assert backing.items() == []
    assert zk_store.commits.committed_txid() == 0


def test_committed_run_replayed_changes_nothing(zk_store: CoordinatorStore) -> None:
    coordinator = transactional(zk_store)
    state = TransactionalMap(MemoryBackingMap())
    plan = coordinator.begin(run_id="r1")
    commit_counts(coordinator, plan, state, coordinator.emit(plan, "words"))
    before = read(state)
    replay = coordinator.begin(run_id="r1")
    result = commit_counts(coordinator, replay, state, coordinator.emit(replay, "words"))
    assert not result.applied
    assert read(state) == before


def drain(coordinator: TransactionalCoordinator, state: RuleMap, start: int) -> None:
    for i in range(start, start + 6):
        plan = coordinator.begin(run_id=f"drain{i}")
        commit_counts(coordinator, plan, state, coordinator.emit(plan, "words"))


def test_opaque_batch_survives_an_unreadable_partition(zk_store: CoordinatorStore) -> None:
    # Given an opaque spout over two partitions and opaque state
    memory = MemoryOpaqueSpout(DATA, ["word"], take_per_batch=2)
    coordinator = opaque(zk_store, memory)
    state = OpaqueMap(MemoryBackingMap())
    plan = coordinator.begin(run_id="r1")
    commit_counts(coordinator, plan, state, coordinator.emit(plan, "words"))
    # When txid 2 is processed, fails before commit, and p1 becomes unreadable for its replay
    plan2 = coordinator.begin(run_id="r2")
    first_try = coordinator.emit(plan2, "words")
    memory.set_unreadable("p1")
    replay = coordinator.begin(run_id="r2")
    second_try = coordinator.emit(replay, "words")
    assert len(second_try) < len(first_try)
    commit_counts(coordinator, replay, state, second_try)
    # Then p1's tuples arrive in later batches, and every word is counted exactly once
    memory.set_unreadable()
    drain(coordinator, state, 3)
    assert read(state) == TOTAL


def test_opaque_later_batch_built_on_a_changed_replay_is_stale(
    zk_store: CoordinatorStore,
) -> None:
    memory = MemoryOpaqueSpout(DATA, ["word"], take_per_batch=1)
    coordinator = opaque(zk_store, memory)
    state = OpaqueMap(MemoryBackingMap())
    # Given txids 1 and 2 processed in a pipeline (2 builds on 1's uncommitted end)
    plan1 = coordinator.begin(run_id="r1")
    coordinator.emit(plan1, "words")
    plan2 = coordinator.begin(run_id="r2")
    tuples2 = coordinator.emit(plan2, "words")
    # When txid 1 is re-emitted without p1 and commits
    memory.set_unreadable("p1")
    replay1 = coordinator.begin(run_id="r1")
    commit_counts(coordinator, replay1, state, coordinator.emit(replay1, "words"))
    memory.set_unreadable()
    # Then txid 2 may not commit as processed, and commits once re-processed
    with pytest.raises(StaleBatchError, match="txid 2 is stale: partition 'p1'"):
        commit_counts(coordinator, plan2, state, tuples2)
    replay2 = coordinator.begin(run_id="r2")
    commit_counts(coordinator, replay2, state, coordinator.emit(replay2, "words"))
    drain(coordinator, state, 3)
    assert read(state) == TOTAL


def _znodes(client: Any, path: str) -> set[str]:
    """Every znode at and below ``path``."""
    if client.exists(path) is None:
        return set()
    found = {path}
    for child in client.get_children(path):
        found |= _znodes(client, f"{path}/{child}")
    return found


@pytest.mark.parametrize("run_id", [None, "replay-of-7"])
def test_begin_of_a_txid_never_allocated_is_refused_and_writes_nothing(
    zk_store: CoordinatorStore, run_id: str | None
) -> None:
    # Given a topology whose txids 1..2 were begun
    coordinator = transactional(zk_store)
    coordinator.begin(run_id="r1")
    coordinator.begin(run_id="r2")
    before = _znodes(zk_store.client, zk_store.paths.base)
    # When txid 7 (never allocated) is begun, with or without a run
    with pytest.raises(ConfigurationError, match=r"txid 7 .* last allocated txid is 2"):
        coordinator.begin(run_id=run_id, txid=7)
    # Then no metadata, attempt or binding was written, and no txid was allocated
    assert _znodes(zk_store.client, zk_store.paths.base) == before
    assert zk_store.attempts.attempt(7) is None
    assert zk_store.runs.current_txid() == 2
