"""Replays of committed txids under a live topology, and a commit that died after its
compare-and-set: found by the real-scheduler fault run (testing.scheduler_faults)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.operation import Count, Split
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology

pytestmark = pytest.mark.integration

DATA = {"p0": [(f"w{i % 7} w{i % 3}",) for i in range(20)]}


def make_steps(store: CoordinatorStore, tmp_path: Path) -> BatchSteps:
    url = f"sqlite:///{tmp_path}/state.db"
    t = TridentTopology(store.paths.topology)
    t.new_stream("lines", MemoryTransactionalSpout(DATA, ["line"], 2)).each(
        ["line"], Split(), ["word"]
    ).group_by(["word"]).persistent_aggregate(
        sql_state(url, "counts", "transactional", key_fields=("word",), value_type="bigint"),
        Count(), ["count"], name="counts",
    )  # fmt: skip
    return BatchSteps(
        t, store, StagingArea(str(tmp_path / "staging"), t.name), keep_txids=2,
        ledger=CommitLedger(url),
    )  # fmt: skip


def run(steps: BatchSteps, run_id: str) -> int:
    txid = int(steps.begin(run_id)["txid"])
    steps.process_local(txid)
    steps.commit(txid)
    steps.success(txid)
    return txid


def test_commit_of_a_committed_txid_whose_attempt_was_rotated_away_is_a_no_op(
    zk_store: CoordinatorStore, tmp_path: Path
) -> None:
    steps = make_steps(zk_store, tmp_path)
    for i in range(1, 6):
        run(steps, f"r{i}")
    # Given a cleared old run re-begun, and a live batch's success rotating its attempt away
    steps.begin("r1")
    steps.success(5)
    assert zk_store.attempts.attempt(1) is None
    # When its commit runs, Then it is a no-op (not "txid 1 was never begun")
    assert steps.commit(1)["applied"] is False


def test_a_commit_that_died_after_the_compare_and_set_gets_its_ledger_row_on_retry(
    zk_store: CoordinatorStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = make_steps(zk_store, tmp_path)
    run(steps, "r1")
    txid = int(steps.begin("r2")["txid"])
    steps.process_local(txid)
    assert steps.ledger is not None
    ledger = steps.ledger

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("worker killed after the compare-and-set")

    with monkeypatch.context() as mp:
        mp.setattr(ledger, "record", crash)
        with pytest.raises(RuntimeError, match="killed"):
            steps.commit(txid)
    assert zk_store.commits.committed_txid() == 2
    assert steps.commit(txid)["applied"] is False  # the retry
    assert [r["txid"] for r in ledger.rows(zk_store.paths.topology)] == [1, 2]
