"""Run bindings outlive the rotated metadata: a cleared old run replays its own txid."""

from __future__ import annotations

import pytest

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.operation import Count
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology

pytestmark = pytest.mark.integration


def test_a_cleared_run_older_than_keep_txids_replays_its_own_txid(
    zk_store: CoordinatorStore,
) -> None:
    # Given six committed runs, ZooKeeper keeping the metadata of the last two txids only
    t = TridentTopology(zk_store.paths.topology)
    spout = MemoryTransactionalSpout({"p0": [(str(i),) for i in range(20)]}, ["x"], 1)
    t.new_stream("xs", spout).persistent_aggregate(
        memory_state(f"{t.name}_n", "transactional"), Count(), ["n"], name="n"
    )
    steps = BatchSteps(t, zk_store, keep_txids=2)
    for i in range(1, 7):
        assert steps.run_batch(f"run{i}").txid == i
    assert zk_store.attempts.attempt(1) is None  # rotated away
    # When the oldest run is cleared and begins again
    again = steps.run_batch("run1")
    # Then it is bound to txid 1 still (not a new txid), and nothing changes
    assert (again.txid, again.committed) == (1, False)
    assert zk_store.runs.current_txid() == 6
    assert steps.query_state("n").get() == 6


@pytest.fixture(params=["zookeeper", "memory"])
def any_store(request: pytest.FixtureRequest) -> object:
    if request.param == "memory":
        from airflow_trident.coordination.memory import MemoryCoordinatorStore

        return MemoryCoordinatorStore("runs_index")
    return request.getfixturevalue("zk_store")


def test_runs_of_txid_lists_the_first_run_and_every_replay_in_binding_order(
    any_store: CoordinatorStore,
) -> None:
    # Given runs bound to new txids, a replay of txid 1 and a backfill run binding txid 3
    store = any_store
    assert store.runs.bind_run("scheduled__a/1") == 1
    assert store.runs.bind_run("scheduled__b") == 2
    assert store.runs.bind_run("manual__replay", 1) == 1
    assert store.runs.bind_new_run("trident_new__txid_3", 3) == 3
    store.runs.bind_run("scheduled__a/1")  # a retried begin binds nothing new
    # When the runs of each txid are listed
    # Then each txid names its runs, the first binding first, nothing twice
    assert store.runs.runs_of_txid(1) == ["scheduled__a/1", "manual__replay"]
    assert store.runs.runs_of_txid(2) == ["scheduled__b"]
    assert store.runs.runs_of_txid(3) == ["trident_new__txid_3"]
    assert store.runs.runs_of_txid(4) == []


def test_runs_of_txid_is_pruned_with_the_run_bindings(zk_store: CoordinatorStore) -> None:
    # Given three bound runs
    for i in range(1, 4):
        zk_store.runs.bind_run(f"run{i}")
    # When bindings below txid 3 are cleaned up
    zk_store.cleanup_before(3, runs_before=3)
    # Then the index of txids 1 and 2 is gone with them, txid 3's stays
    assert (zk_store.runs.runs_of_txid(1), zk_store.runs.runs_of_txid(2)) == ([], [])
    assert zk_store.runs.runs_of_txid(3) == ["run3"]
    assert zk_store.runs.txid_for_run("run1") is None


def test_a_binding_without_its_index_node_gets_it_on_the_next_begin(
    zk_store: CoordinatorStore,
) -> None:
    # Given a run whose index node is missing (a begin killed between the two writes of a
    # replay binding, or a binding made before the index existed)
    zk_store.runs.bind_run("first")
    zk_store.runs.bind_run("replay", 1)
    zk_store.client.delete(zk_store.paths.txid_run(1, "replay"))
    assert zk_store.runs.runs_of_txid(1) == ["first"]
    # When the run's begin runs again
    assert zk_store.runs.bind_run("replay") == 1
    # Then the index lists it again
    assert zk_store.runs.runs_of_txid(1) == ["first", "replay"]


def test_bindings_are_pruned_through_the_index_even_when_unreadable(
    zk_store: CoordinatorStore,
) -> None:
    # Given two bound runs, the first binding's value unreadable (no scan of every binding)
    zk_store.runs.bind_run("old")
    zk_store.runs.bind_run("kept")
    zk_store.client.set(zk_store.paths.run("old"), b"not json")
    # When bindings below txid 2 are cleaned up
    zk_store.cleanup_before(2, runs_before=2)
    # Then the binding listed by txid 1's index is gone with its index, txid 2's stays
    assert zk_store.client.exists(zk_store.paths.run("old")) is None
    assert zk_store.runs.runs_of_txid(1) == []
    assert zk_store.runs.txid_for_run("kept") == 2


def _znodes(store: CoordinatorStore, path: str) -> int:
    children = store.client.get_children(path)
    return 1 + sum(_znodes(store, f"{path}/{child}") for child in children)


def test_znodes_stop_growing_once_txids_pass_the_keep_bounds(zk_store: CoordinatorStore) -> None:
    # Given a topology keeping metadata for 4 txids and run bindings for 8
    t = TridentTopology(zk_store.paths.topology)
    spout = MemoryTransactionalSpout({"p0": [(str(i),) for i in range(200)]}, ["x"], 1)
    t.new_stream("xs", spout).persistent_aggregate(
        memory_state(f"{t.name}_n", "transactional"), Count(), ["n"], name="n"
    )
    steps = BatchSteps(t, zk_store, keep_txids=4)
    steps.ctx.coordinator.keep_runs = 8
    # When 10 batches run, then 50 more
    for i in range(1, 11):
        steps.run_batch(f"scheduled__{i}")
    after_10 = _znodes(zk_store, zk_store.paths.base)
    for i in range(11, 61):
        steps.run_batch(f"scheduled__{i}")
    after_60 = _znodes(zk_store, zk_store.paths.base)
    # Then the topology's znodes grew by at most 10 %
    assert after_60 <= 1.1 * after_10, (after_10, after_60)
    # And the newest runs still replay their own txids
    assert zk_store.runs.txid_for_run("scheduled__53") == 53
    assert zk_store.runs.txid_for_run("scheduled__52") is None


def test_a_stale_index_entry_does_not_prune_its_run_s_newer_binding(
    zk_store: CoordinatorStore,
) -> None:
    # Given txid 1's index still listing run "r" after an interrupted cleanup deleted r's
    # binding, and "r" bound again since, to txid 2
    zk_store.runs.bind_run("r")
    zk_store.client.delete(zk_store.paths.run("r"))
    assert zk_store.runs.bind_run("r") == 2
    # When bindings below txid 2 are cleaned up
    zk_store.cleanup_before(2, runs_before=2)
    # Then r keeps its binding to txid 2, and txid 1's index is gone
    assert zk_store.runs.txid_for_run("r") == 2
    assert zk_store.runs.runs_of_txid(1) == []
