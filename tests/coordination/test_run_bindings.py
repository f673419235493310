"""Run bindings outlive the rotated metadata: a cleared old run replays its own txid."""

from __future__ import annotations

import pytest

from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.operation import Count
from airflow_trident.runtime.steps import BatchSteps
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
    assert zk_store.attempt(1) is None  # rotated away
    # When the oldest run is cleared and begins again
    again = steps.run_batch("run1")
    # Then it is bound to txid 1 still (not a new txid), and nothing changes
    assert (again.txid, again.committed) == (1, False)
    assert zk_store.current_txid() == 6
    assert steps.query_state("n").get() == 6
