"""In-memory spouts and the partitioned executors with in-memory partition state."""

from __future__ import annotations

import pytest

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.errors import BatchNotReadyError, ConfigurationError
from airflow_trident.spout.base import ListCollector
from airflow_trident.spout.batch import BatchSpoutExecutor
from airflow_trident.spout.memory import FixedBatchSpout, MemoryTransactionalSpout
from airflow_trident.spout.partitioned import PartitionedTransactionalSpoutExecutor
from airflow_trident.spout.tx_state import MemoryPartitionState
from airflow_trident.state.base import StateType


def emit(executor: object, txid: int, attempt: int, meta: object) -> list[tuple[object, ...]]:
    collector = ListCollector()
    executor.get_emitter().emit_batch(TransactionAttempt(txid, attempt), meta, collector)  # type: ignore[attr-defined]
    return collector.tuples


def test_fixed_batch_spout_without_cycle_runs_dry() -> None:
    spout = BatchSpoutExecutor(FixedBatchSpout(["w"], 2, ("a",), ("b",), ("c",)))
    assert spout.kind is StateType.NON_TRANSACTIONAL
    assert [emit(spout, t, 0, None) for t in (1, 2, 3)] == [[("a",), ("b",)], [("c",)], []]


def test_fixed_batch_spout_cycles_and_replays_a_batch_id_identically() -> None:
    spout = BatchSpoutExecutor(FixedBatchSpout(["w"], 2, ("a",), ("b",), ("c",), cycle=True))
    assert emit(spout, 2, 0, None) == [("c",), ("a",)]
    assert emit(spout, 2, 1, None) == emit(spout, 2, 0, None)


def test_fixed_batch_spout_rejects_tuples_of_wrong_arity() -> None:
    with pytest.raises(ConfigurationError, match="does not match fields"):
        FixedBatchSpout(["w"], 2, ("a", "b"))


def test_transactional_spout_fixes_partition_ranges_per_txid() -> None:
    data = {"p0": [(i,) for i in range(5)], "p1": [(i,) for i in range(10, 13)]}
    state = MemoryPartitionState()
    spout = PartitionedTransactionalSpoutExecutor(
        MemoryTransactionalSpout(data, ["n"], take_per_batch=2), state
    )
    coordinator = spout.get_coordinator()
    meta = coordinator.initialize_transaction(1, None, None)
    first = emit(spout, 1, 0, meta)
    second = emit(spout, 2, 0, coordinator.initialize_transaction(2, meta, None))
    # A replay of txid 1 (even after txid 2 was emitted) emits exactly the same tuples
    assert emit(spout, 1, 1, coordinator.initialize_transaction(1, None, meta)) == first
    assert first == [(0,), (1,), (10,), (11,)]
    assert second == [(2,), (3,), (12,)]
    assert state.get("p1", 2) == {"offset": 2, "count": 1}


def test_transactional_spout_refuses_to_emit_ahead_of_the_previous_txid() -> None:
    # Given txid 1 emitted, When txid 3 is emitted before txid 2 (pipelined process steps)
    state = MemoryPartitionState()
    spout = PartitionedTransactionalSpoutExecutor(
        MemoryTransactionalSpout({"p0": [(i,) for i in range(9)]}, ["n"], take_per_batch=2), state
    )
    meta = spout.get_coordinator().initialize_transaction(1, None, None)
    emit(spout, 1, 0, meta)
    # Then it is refused (it would re-read txid 2's tuples), and works once txid 2 is emitted
    with pytest.raises(BatchNotReadyError, match=r"txid 3: partition 'p0' .* txid 2"):
        emit(spout, 3, 0, meta)
    assert emit(spout, 2, 0, meta) == [(2,), (3,)]
    assert emit(spout, 3, 0, meta) == [(4,), (5,)]


def test_transactional_spout_replays_an_empty_partition_batch_as_empty() -> None:
    state = MemoryPartitionState()
    spout = PartitionedTransactionalSpoutExecutor(_Sparse(), state)
    meta = spout.get_coordinator().initialize_transaction(1, None, None)
    assert emit(spout, 1, 0, meta) == []
    assert emit(spout, 2, 0, meta) == [(0,)]
    assert emit(spout, 1, 1, meta) == []  # the replay of the empty batch stays empty


class _Sparse(MemoryTransactionalSpout):
    """Returns no metadata (emits nothing) on txid 1, like a source with nothing new."""

    def __init__(self) -> None:
        super().__init__({"p0": [(0,), (1,)]}, ["n"], take_per_batch=1)

    def emit_partition_batch_new(self, attempt, collector, partition, last_partition_meta):  # type: ignore[no-untyped-def]
        if attempt.txid == 1:
            return None
        return super().emit_partition_batch_new(attempt, collector, partition, last_partition_meta)
