"""The batch steps across processes' boundaries: ZooKeeper, staging files, SQLite state."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import BatchIncompleteError, BatchNotReadyError, CommitOrderError
from airflow_trident.operation import Count, Split
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.memory import MemoryOpaqueSpout, MemoryTransactionalSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology

pytestmark = pytest.mark.integration

DATA = {
    "p0": [("a b a",), ("c",), ("b b",)],
    "p1": [("d a",), ("e",), ("a a a",)],
}
TOTAL = Counter(w for rows in DATA.values() for (s,) in rows for w in s.split())


@pytest.fixture
def steps(zk_store: CoordinatorStore, tmp_path: Path) -> BatchSteps:
    topology = TridentTopology(zk_store.paths.topology)
    factory = sql_state(
        f"sqlite:///{tmp_path}/state.db",
        "counts",
        "transactional",
        key_fields=("word",),
        value_type="bigint",
    )
    (
        topology.new_stream("lines", MemoryTransactionalSpout(DATA, ["line"], 1))
        .each(["line"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(factory, Count(), ["count"], name="counts")
    )
    return BatchSteps(
        topology,
        zk_store,
        StagingArea(str(tmp_path / "staging"), topology.name),
        ledger=CommitLedger(f"sqlite:///{tmp_path}/state.db"),
    )


def counts(steps: BatchSteps) -> dict[str, int]:
    state = steps.ctx.committer.topology.nodes[steps.topology.states["counts"]].factory.make_state()  # type: ignore[attr-defined]
    values = state.multi_get([(w,) for w in TOTAL])
    return {w: v for w, v in zip(TOTAL, values, strict=True) if v is not None}


def run(steps: BatchSteps, run_id: str) -> int:
    txid = int(steps.begin(run_id)["txid"])
    steps.process_local(txid)
    steps.commit(txid)
    steps.success(txid)
    return txid


def test_three_runs_count_every_word_once(steps: BatchSteps) -> None:
    assert [run(steps, f"r{i}") for i in (1, 2, 3)] == [1, 2, 3]
    assert counts(steps) == TOTAL
    # and the ledger lists each commit once, with its records and keys written
    assert steps.ledger is not None
    rows = steps.ledger.rows(steps.topology.name)
    assert [(r["txid"], r["records_in"]) for r in rows] == [(1, 2), (2, 2), (3, 2)]
    assert json.loads(rows[0]["keys_written"]) == {"counts": 3}


def test_retried_process_uses_the_new_attempt_and_keeps_counts(steps: BatchSteps) -> None:
    # Given txid 1 processed, then its process task retried (begin re-run -> new attempt)
    txid = int(steps.begin("r1")["txid"])
    steps.process_local(txid)
    again = steps.begin("r1")
    # (it names the processing attempt it wants: ZooKeeper's counter went 0 at the begin, 1 at
    # the process, 2 at this begin; the process step starts 3)
    assert (again["txid"], again["attempt_id"]) == (1, 3)
    # Then the commit wants the new attempt's staging
    with pytest.raises(BatchIncompleteError, match="no staged results for txid 1 attempt 2"):
        steps.commit(txid)
    steps.process_local(txid)
    first = steps.commit(txid)
    # And a second commit (a cleared commit task) changes nothing
    assert steps.commit(txid) == {
        "txid": 1, "applied": False, "reason": "already committed", "committed_txid": 1,
    }  # fmt: skip
    assert first["applied"]
    assert first["committed_txid"] == 1
    assert first["records_in"] == 2
    run(steps, "r2")
    run(steps, "r3")
    assert counts(steps) == TOTAL


def test_commit_refuses_a_staged_file_with_missing_rows(steps: BatchSteps) -> None:
    txid = int(steps.begin("r1")["txid"])
    manifest = steps.process_local(txid)
    path = manifest["states"]["counts"]["files"][0]["path"]
    table = pq.read_table(path)
    pq.write_table(table.slice(0, table.num_rows - 1), path)
    with pytest.raises(BatchIncompleteError, match=r"holds \d+ rows, the manifest lists \d+"):
        steps.commit(txid)
    assert counts(steps) == {}
    assert steps.store.commits.committed_txid() == 0


def test_commit_out_of_order_waits_for_previous(steps: BatchSteps) -> None:
    first = int(steps.begin("r1")["txid"])
    second = int(steps.begin("r2")["txid"])
    steps.process_local(first)
    steps.process_local(second)
    with pytest.raises(CommitOrderError, match="txid 1 must commit first"):
        steps.commit(second)
    steps.commit(first)
    steps.commit(second)
    assert steps.store.commits.committed_txid() == 2


def test_success_rotates_staging(steps: BatchSteps) -> None:
    steps.keep_txids = 2
    for i in range(1, 6):
        run(steps, f"r{i}")
    staged = sorted(p.name for p in Path(steps.staging.root, steps.topology.name).iterdir())
    assert staged == ["4", "5"]


def test_stale_opaque_batch_is_reprocessed_before_commit(
    zk_store: CoordinatorStore, tmp_path: Path
) -> None:
    # Given an opaque spout, and txids 1 and 2 processed in a pipeline
    spout = MemoryOpaqueSpout(DATA, ["line"], take_per_batch=1)
    topology = TridentTopology(zk_store.paths.topology)
    factory = sql_state(
        f"sqlite:///{tmp_path}/o.db", "counts", "opaque", key_fields=("word",), value_type="bigint"
    )
    (
        topology.new_stream("lines", spout)
        .each(["line"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(factory, Count(), ["count"], name="counts")
    )
    steps = BatchSteps(topology, zk_store, StagingArea(str(tmp_path / "staging"), topology.name))
    for run_id in ("r1", "r2"):
        steps.process_local(int(steps.begin(run_id)["txid"]))
    # When txid 1 is re-emitted without p1 (unreadable) and commits
    spout.set_unreadable("p1")
    steps.begin("r1")
    steps.process_local(1)
    steps.commit(1)
    spout.set_unreadable()
    # Then txid 2 (built on txid 1's first emit) is re-processed by its commit, not skipped
    summary = steps.commit(2)
    assert summary["applied"]
    for i in range(3, 7):
        run(steps, f"r{i}")
    assert counts(steps) == TOTAL


def test_pipelined_process_of_txid_2_waits_for_txid_1_to_emit(steps: BatchSteps) -> None:
    # Given two runs begun, When txid 2's process step runs first
    steps.begin("r1")
    steps.begin("r2")
    # Then it refuses to emit (it would re-read txid 1's tuples) ...
    with pytest.raises(
        BatchNotReadyError, match=r"txid 2: spout 'lines' cannot emit before txid 1"
    ):
        steps.process_local(2)
    # ... and once txid 1 emitted, both commit exactly
    steps.process_local(1)
    steps.process_local(2)
    steps.commit(1)
    steps.commit(2)
    run(steps, "r3")
    assert counts(steps) == TOTAL


def test_auto_commit_mode_chooses_spark_by_staged_rows(steps: BatchSteps) -> None:
    from airflow_trident.batch.routes import CommitRoute

    txid = int(steps.begin("r1")["txid"])
    steps.process_local(txid)  # 2 lines -> 3 distinct words staged
    rows = steps.staged_rows(txid)
    small = CommitRoute(mode="auto", spark_commit_min_rows=4)
    large = CommitRoute(mode="auto", spark_commit_min_rows=3)
    assert (small.on_spark_for(staged_rows=rows), large.on_spark_for(staged_rows=rows)) == (
        False,
        True,
    )


def test_commit_waits_inline_only_when_the_previous_txid_is_processed(steps: BatchSteps) -> None:
    import logging

    from airflow_trident.batch.order import StallWatch, wait_for_commit_order

    first, second = (int(steps.begin(r)["txid"]) for r in ("r1", "r2"))
    assert steps.is_staged(second - 1) is False  # txid 1 not processed: defer
    steps.process_local(first)
    assert steps.is_staged(second - 1) is True  # its commit is next: wait here
    steps.commit(first)
    deadline = 0.0  # already past: returns at once with what is committed
    watch = StallWatch("d", second, "commit")
    log = logging.getLogger(__name__)
    assert wait_for_commit_order(steps, second, watch, deadline=deadline, poll_s=0.2, log=log) == (
        first
    )


def test_commit_summary_shows_each_partitions_range(steps: BatchSteps) -> None:
    ranges = []
    for run_id in ("r1", "r2"):
        txid = int(steps.begin(run_id)["txid"])
        steps.process_local(txid)
        ranges.append(steps.commit(txid)["partitions"]["lines"])
    # one line per partition per batch (take_per_batch=1), the second batch after the first
    assert ranges == [
        {"p0": {"offset": 0, "count": 1}, "p1": {"offset": 0, "count": 1}},
        {"p0": {"offset": 1, "count": 1}, "p1": {"offset": 1, "count": 1}},
    ]
