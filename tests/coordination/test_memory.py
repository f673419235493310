"""The in-memory coordinator store keeps the ZooKeeper store's rules."""

from __future__ import annotations

import pytest

from airflow_trident.coordination.coordinator import TransactionalCoordinator
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.coordination.protocol import FLAT_NAMES, CoordinatorStoreProtocol
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
    store.runs.bind_run("a")
    store.runs.bind_run("b")
    # When a run asks to replay txid 5 Then it is refused, naming both txids
    with pytest.raises(ConfigurationError, match=r"txid 5 .* last allocated txid is 2"):
        store.runs.bind_run("replay-of-5", 5)
    assert store.runs.txid_for_run("replay-of-5") is None
    assert store.runs.current_txid() == 2
    # and a replay of an allocated txid, or a conflicting re-bind, behave as before
    assert store.runs.bind_run("replay-of-1", 1) == 1
    with pytest.raises(MetadataError, match=r"bound to txid 1, not 2"):
        store.runs.bind_run("replay-of-1", 2)


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
    assert store.attempts.attempt(7) is None
    assert not store.metas.has_meta("words", 7)
    assert store.runs.current_txid() == 2


def test_a_new_run_is_bound_to_exactly_the_next_txid_or_refused() -> None:
    # Given txid 1 allocated
    store = MemoryCoordinatorStore("wc")
    store.runs.bind_run("scheduled__1")
    # When new runs bind txids 2 and 3 (the first twice) Then each holds its txid
    assert store.runs.bind_new_run("n2", 2) == 2
    assert store.runs.bind_new_run("n3", 3) == 3
    assert store.runs.bind_new_run("n2", 2) == 2
    # And a gap or a taken txid is refused, allocating nothing
    with pytest.raises(ConfigurationError, match=r"txid 6 .* the next txid is 4"):
        store.runs.bind_new_run("n6", 6)
    with pytest.raises(ConfigurationError, match=r"txid 3 .* the next txid is 4"):
        store.runs.bind_new_run("other", 3)
    assert store.runs.current_txid() == 3
    assert store.runs.txid_for_run("n6") is None


@pytest.mark.parametrize("name", sorted(n for n, part in FLAT_NAMES.items() if part != "nodes"))
def test_a_flat_name_of_before_warns_and_is_the_parts_method(name: str) -> None:
    # Given a store with its parts
    store = MemoryCoordinatorStore("wc")
    part = FLAT_NAMES[name]
    # When the old flat name is used Then it warns with the new spelling and is the part's method
    with pytest.warns(
        DeprecationWarning, match=rf"goes away in 0\.2\.0: call store\.{part}\.{name}"
    ):
        assert getattr(store, name) == getattr(getattr(store, part), name)


def test_the_store_hands_out_its_parts_and_refuses_other_names() -> None:
    # Given a memory store
    store = MemoryCoordinatorStore("wc")
    # Then it is a store of the protocol, and names it never had are errors, without a warning
    assert isinstance(store, CoordinatorStoreProtocol)
    store.runs.bind_run("r1")
    assert store.commits.committed_txid() == 0
    for name in ("read_json", "no_such_name"):
        with pytest.raises(AttributeError, match=name):
            getattr(store, name)
