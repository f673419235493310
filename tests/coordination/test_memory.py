"""The in-memory coordinator store keeps the ZooKeeper store's rules."""

from __future__ import annotations

import pytest

from airflow_trident.coordination.coordinator import TransactionalCoordinator
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.errors import ConfigurationError, MetadataError
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.spout.partitioned import PartitionedTransactionalSpoutExecutor

DATA = {"p0": [("a",), ("b",), ("c",)]}


def coordinator(store: MemoryCoordinatorStore) -> TransactionalCoordinator:
    spout = PartitionedTransactionalSpoutExecutor(
        MemoryTransactionalSpout(DATA, ["word"], take_per_batch=1), store.partition_state("words")
    )
    return TransactionalCoordinator(store, {"words": spout})


def test_binding_a_txid_never_allocated_is_refused_and_binds_nothing() -> None:
    # Given txids 1..2 allocated
    store = MemoryCoordinatorStore("wc")
    store.bind_run("a")
    store.bind_run("b")
    # When a run asks to replay txid 5 Then it is refused, naming both txids
    with pytest.raises(ConfigurationError, match=r"txid 5 .* last allocated txid is 2"):
        store.bind_run("replay-of-5", 5)
    assert store.txid_for_run("replay-of-5") is None
    assert store.current_txid() == 2
    # and a replay of an allocated txid, or a conflicting re-bind, behave as before
    assert store.bind_run("replay-of-1", 1) == 1
    with pytest.raises(MetadataError, match=r"bound to txid 1, not 2"):
        store.bind_run("replay-of-1", 2)


@pytest.mark.parametrize("run_id", [None, "replay-of-7"])
def test_begin_of_a_txid_never_allocated_writes_no_metadata_or_attempt(run_id: str | None) -> None:
    # Given a topology whose txids 1..2 were begun
    store = MemoryCoordinatorStore("wc")
    batches = coordinator(store)
    batches.begin(run_id="r1")
    batches.begin(run_id="r2")
    # When txid 7 is begun Then it is refused and nothing is stored for it
    with pytest.raises(ConfigurationError, match=r"txid 7 .* last allocated txid is 2"):
        batches.begin(run_id=run_id, txid=7)
    assert store.attempt(7) is None
    assert not store.has_meta("words", 7)
    assert store.current_txid() == 2


def test_a_new_run_is_bound_to_exactly_the_next_txid_or_refused() -> None:
    # Given txid 1 allocated
    store = MemoryCoordinatorStore("wc")
    store.bind_run("scheduled__1")
    # When new runs bind txids 2 and 3 (the first twice) Then each holds its txid
    assert store.bind_new_run("n2", 2) == 2
    assert store.bind_new_run("n3", 3) == 3
    assert store.bind_new_run("n2", 2) == 2
    # And a gap or a taken txid is refused, allocating nothing
    with pytest.raises(ConfigurationError, match=r"txid 6 .* the next txid is 4"):
        store.bind_new_run("n6", 6)
    with pytest.raises(ConfigurationError, match=r"txid 3 .* the next txid is 4"):
        store.bind_new_run("other", 3)
    assert store.current_txid() == 3
    assert store.txid_for_run("n6") is None
