"""The status collector against real ZooKeeper and PostgreSQL, after real batches: committed
ones (with their ledger rows) and one txid left in each phase of the lifecycle."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.status import StatusCollector
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.operation import Count, Split
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology

pytestmark = pytest.mark.integration

SENTENCES = 40  # per partition; batches take 5 of each
DATA = {p: [(f"w{i % 7} w{i % 3} {p}",) for i in range(SENTENCES)] for p in ("p0", "p1")}


def make_steps(store: CoordinatorStore, staging: StagingArea, pg_url: str) -> BatchSteps:
    t = TridentTopology(store.paths.topology)
    t.new_stream("lines", MemoryTransactionalSpout(DATA, ["line"], 5)).each(
        ["line"], Split(), ["word"]
    ).group_by(["word"]).persistent_aggregate(
        sql_state(pg_url, store.paths.topology, "transactional", key_fields=("word",),
                  value_type="bigint"),
        Count(), ["count"], name="counts",
    )  # fmt: skip
    return BatchSteps(t, store, staging, keep_txids=16, ledger=CommitLedger(pg_url))


@pytest.fixture
def steps(zk_store: CoordinatorStore, tmp_path: Path, pg_url: str) -> Iterator[BatchSteps]:
    """Three committed batches (as the DAG's tasks run them), then txid 4 processed with a
    commit that died after it started, 5 processed, 6 with an attempt started, 7 begun."""
    staging = StagingArea(str(tmp_path / "staging"), zk_store.paths.topology)
    steps = make_steps(zk_store, staging, pg_url)
    for i in (1, 2, 3):
        txid = int(steps.begin(f"run_{i}")["txid"])
        steps.process_local(txid)
        steps.commit(txid)
        steps.success(txid)
    for i in (4, 5, 6, 7):
        steps.begin(f"run_{i}")
    steps.process_local(4)
    zk_store.attempts.mark_commit_started(4)  # what a commit does first; then its worker died
    steps.process_local(5)
    steps.begins.new_attempt(6)
    yield steps
    with sa.create_engine(pg_url).begin() as conn:
        conn.execute(sa.text(f'DROP TABLE IF EXISTS "{zk_store.paths.topology}"'))


def test_status_reports_txids_phases_commits_and_lag_as_the_ledger_and_zookeeper_hold_them(
    steps: BatchSteps, zk_store: CoordinatorStore, pg_url: str
) -> None:
    # Given three commits and four batches in flight
    ledger = CommitLedger(pg_url)
    collector = StatusCollector(zk_store, ledger=ledger, topology=steps.topology,
                                staging=steps.staging)  # fmt: skip
    # When the status is collected
    status = collector.collect(dag_id="some_dag")
    # Then the txids are ZooKeeper's
    assert (status.committed_txid, status.allocated_txid) == (3, 7)
    # And each batch in flight has the phase it reached, its attempt and its run
    phases = [(b.txid, b.phase, b.attempt_id, b.run_id) for b in status.in_flight]
    assert phases == [
        (4, "committing", 1, "run_4"),
        (5, "processed", 1, "run_5"),
        (6, "processing", 1, "run_6"),
        (7, "begun", None, "run_7"),  # begun, no processing attempt yet
    ]
    assert all(b.since is not None and b.since <= status.collected_at for b in status.in_flight)
    # And the last commits are the ledger's rows, with both durations measured
    rows = ledger.rows(zk_store.paths.topology)
    assert [(c.txid, c.attempt_id, c.records_in, dict(c.keys_written or {})) for c in
            status.commits] == [
        (r["txid"], r["attempt_id"], r["records_in"], json.loads(r["keys_written"])) for r in rows
    ]  # fmt: skip
    assert [c.records_in for c in status.commits] == [10, 10, 10]
    for commit in status.commits:
        assert commit.process_seconds is not None
        assert commit.commit_seconds is not None
        assert commit.process_started_at <= commit.commit_started_at <= commit.committed_at
    # And the lag is what the spout has not emitted after txid 5 (the newest emitted batch)
    assert [(g.spout, g.partition, g.as_of_txid, g.pending) for g in status.lag] == [
        ("lines", "p0", 5, SENTENCES - 25),
        ("lines", "p1", 5, SENTENCES - 25),
    ]


def test_status_text_and_json_say_the_same(steps: BatchSteps, zk_store: CoordinatorStore,
                                           pg_url: str) -> None:  # fmt: skip
    # Given the collected status
    status = StatusCollector(zk_store, ledger=CommitLedger(pg_url), topology=steps.topology,
                             staging=steps.staging, last=2).collect()  # fmt: skip
    # When it is rendered
    text, data = status.format_text(), json.loads(status.to_json())
    # Then both name the txids, the phases and the last commits (newest first in the text)
    assert text.splitlines()[0].endswith("committed txid 3, allocated txid 7, 4 batches in flight")
    assert "  txid 4  attempt 1  committing  since " in text
    assert text.index("  txid 3  attempt 1  records in 10") < text.index("  txid 2  attempt 1")
    assert "  txid 1  attempt" not in text  # last=2
    assert [b["txid"] for b in data["commits"]] == [2, 3]
    assert [b["phase"] for b in data["in_flight"]] == [
        "committing", "processed", "processing", "begun"]  # fmt: skip
    assert data["lag"][0] == {"spout": "lines", "partition": "p0", "as_of_txid": 5,
                              "pending": SENTENCES - 25, "unit": "tuples",
                              "detail": None}  # fmt: skip


def test_without_ledger_topology_or_staging_the_status_says_what_it_cannot_tell(
    steps: BatchSteps, zk_store: CoordinatorStore
) -> None:
    # Given only ZooKeeper
    status = StatusCollector(zk_store).collect()
    # Then the txids are there, processed batches look like processing ones, and notes say why
    assert (status.committed_txid, status.allocated_txid, status.commits, status.lag) == (
        3, 7, (), ())  # fmt: skip
    assert [b.phase for b in status.in_flight] == ["committing", "processing", "processing",
                                                   "begun"]  # fmt: skip
    assert any("no state database" in note for note in status.notes)
    assert any("no staging root" in note for note in status.notes)


def test_lag_of_an_opaque_spout_counts_from_its_newest_emitted_batch(
    zk_store: CoordinatorStore, tmp_path: Path
) -> None:
    # Given an opaque spout (6 tuples per partition, 2 per batch): 1 batch committed, 1 processed
    from airflow_trident.spout.memory import MemoryOpaqueSpout
    from airflow_trident.state.memory import memory_state

    data = {p: [(f"x {p}",)] * 6 for p in ("a", "b")}
    t = TridentTopology(zk_store.paths.topology)
    t.new_stream("lines", MemoryOpaqueSpout(data, ["line"], 2)).each(
        ["line"], Split(), ["word"]
    ).group_by(["word"]).persistent_aggregate(
        memory_state(f"{zk_store.paths.topology}_c", "opaque"), Count(), ["count"], name="c"
    )  # fmt: skip
    steps = BatchSteps(t, zk_store, StagingArea(str(tmp_path / "s"), t.name))
    for txid in (1, 2):
        steps.begin(f"r{txid}")
        steps.process_local(txid)
    steps.commit(1)
    # When the status is collected
    status = StatusCollector(zk_store, topology=t).collect()
    # Then each partition's lag is what follows txid 2's batch: 6 - 2 * 2
    assert [(g.partition, g.as_of_txid, g.pending) for g in status.lag] == [
        ("a", 2, 2), ("b", 2, 2)]  # fmt: skip


def test_runs_bound_before_the_txid_index_existed_are_found_by_their_bindings(
    steps: BatchSteps, zk_store: CoordinatorStore
) -> None:
    # Given txid 5's binding without its entry in the txid -> runs index (an older binding)
    zk_store.client.delete(zk_store.paths.txid_runs(5), recursive=True)
    assert zk_store.runs.runs_of_txid(5) == []
    # When the status is collected, Then its run is still named, from the bindings
    status = StatusCollector(zk_store).collect()
    assert {b.txid: b.run_id for b in status.in_flight}[5] == "run_5"
