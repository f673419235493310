"""An exception raised by a spout's emitter reaches the caller naming the spout, txid, attempt
and partition, as a batch failure; the spout's own exception stays its cause."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_trident.coordination.coordinator import TransactionalCoordinator
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.errors import (
    BatchFailedError,
    BatchNotReadyError,
    SpoutEmitError,
    SpoutUnavailableError,
    TridentError,
)
from airflow_trident.spout.batch import BatchSpoutExecutor
from airflow_trident.spout.memory import FixedBatchSpout, MemoryTransactionalSpout
from airflow_trident.spout.partitioned import PartitionedTransactionalSpoutExecutor

DATA = {"p0": [("a",), ("b",)], "p1": [("c",), ("d",)]}


class BrokerDown(MemoryTransactionalSpout):
    """Partition p1's broker cannot be reached."""

    def emit_partition_batch_new(
        self, attempt: Any, collector: Any, partition: str, last_partition_meta: Any
    ) -> Any:
        if partition == "p1":
            raise ConnectionError("broker-2:9092 refused the connection")
        return super().emit_partition_batch_new(attempt, collector, partition, last_partition_meta)


class Corrupt(FixedBatchSpout):
    def emit_batch(self, batch_id: int, collector: Any) -> None:
        raise KeyError("offset")


class NotReady(FixedBatchSpout):
    def emit_batch(self, batch_id: int, collector: Any) -> None:
        raise BatchNotReadyError("txid 1 is not ready; retry")


def test_a_connection_error_in_an_emitter_names_spout_txid_attempt_and_partition() -> None:
    # Given a partitioned spout whose partition p1 cannot be read
    store = MemoryCoordinatorStore("emits")
    spout = PartitionedTransactionalSpoutExecutor(
        BrokerDown(DATA, ["word"], 1), store.partition_state("words")
    )
    coordinator = TransactionalCoordinator(store, {"words": spout})
    plan = coordinator.begin(run_id="r1")
    # When the batch is emitted
    with pytest.raises(SpoutUnavailableError) as failed:
        coordinator.emit_partitions(plan, "words")
    # Then the error is a batch failure naming where, and still a ConnectionError
    error = failed.value
    assert isinstance(error, BatchFailedError | TridentError)
    assert isinstance(error, ConnectionError)
    assert str(error).startswith(
        f"spout 'words' failed to emit batch txid 1 (attempt {plan.attempt.attempt_id}), "
        "partition 'p1': ConnectionError: broker-2:9092 refused the connection; "
    )
    assert "will be replayed" in str(error)
    # And the spout's own exception is its cause
    assert isinstance(error.__cause__, ConnectionError)
    assert str(error.__cause__) == "broker-2:9092 refused the connection"


def test_any_other_emitter_error_is_a_spout_emit_error_with_its_cause() -> None:
    # Given a batch spout (no partitions) whose emit raises KeyError
    store = MemoryCoordinatorStore("emits")
    coordinator = TransactionalCoordinator(
        store, {"lines": BatchSpoutExecutor(Corrupt(["line"], 1))}
    )
    plan = coordinator.begin()
    # When the batch is emitted Then the error names spout and txid, without a partition
    with pytest.raises(SpoutEmitError) as failed:
        coordinator.emit(plan, "lines")
    assert not isinstance(failed.value, ConnectionError)
    assert str(failed.value).startswith(
        f"spout 'lines' failed to emit batch txid 1 (attempt {plan.attempt.attempt_id}): "
        "KeyError: 'offset'; "
    )
    assert isinstance(failed.value.__cause__, KeyError)


def test_trident_errors_of_an_emitter_pass_unchanged() -> None:
    # Given a spout saying its batch is not ready yet (already a TridentError with a hint)
    store = MemoryCoordinatorStore("emits")
    coordinator = TransactionalCoordinator(
        store, {"lines": BatchSpoutExecutor(NotReady(["line"], 1))}
    )
    plan = coordinator.begin()
    # When the batch is emitted Then the same error arrives
    with pytest.raises(BatchNotReadyError, match=r"^txid 1 is not ready; retry$"):
        coordinator.emit(plan, "lines")
