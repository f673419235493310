"""The commit phase on Spark (``commit_mode="spark"``): real Spark tasks apply the staged
partitions to PostgreSQL state; the driver checks the order and advances ZooKeeper's committed
txid. The topology is loaded by reference on the executors, as in production."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.on_spark import commit_on_spark, process_on_spark
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import (
    BatchIncompleteError,
    CommitOrderError,
    StateStoreUnavailableError,
)
from airflow_trident.runtime.reference import load_topology
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.state.binding import StateBinding
from tests.runtime import commit_topologies as ct
from tests.runtime.zk_steps import zk_batch_steps

pytestmark = pytest.mark.integration

REFERENCE = "tests.runtime.commit_topologies:words"


@pytest.fixture
def uncoalesced(spark: Any) -> Iterator[None]:
    """Keep every shuffle partition (a small test batch would be coalesced into one, so one
    commit task): large batches have many."""
    key = "spark.sql.adaptive.coalescePartitions.enabled"
    before = spark.conf.get(key)
    spark.conf.set(key, "false")
    yield
    spark.conf.set(key, before)


@pytest.fixture
def steps(
    pg_url: str, zk_config: ZkConfig, tmp_path: Path, uncoalesced: None
) -> Iterator[BatchSteps]:
    os.environ["TRIDENT_STATE_URL"] = pg_url
    engine = sa.create_engine(pg_url)
    # emptied, not dropped: Spark's reused Python workers remember the table exists
    for table in (ct.TABLE, "trident_commit_ledger"):
        if sa.inspect(engine).has_table(table):
            with engine.begin() as conn:
                conn.execute(sa.text(f'DELETE FROM "{table}"'))
    engine.dispose()
    ct.FAIL_MARKER.unlink(missing_ok=True)
    ct.Seen.rows.clear()
    client = connect(zk_config)
    store = CoordinatorStore(client, CoordinatorPaths(zk_config.root, ct.NAME))
    store.delete_all()
    topology = load_topology(REFERENCE)
    yield BatchSteps(
        topology,
        store,
        StagingArea(str(tmp_path / "staging"), topology.name),
        ledger=CommitLedger(pg_url),
        states=StateBinding(pg_url),
    )
    store.delete_all()
    client.stop()
    client.close()
    ct.FAIL_MARKER.unlink(missing_ok=True)


def stored(steps: BatchSteps) -> dict[str, tuple[int, int]]:
    """word -> (count, txid) as the opaque state stores them."""
    engine = sa.create_engine(os.environ["TRIDENT_STATE_URL"])
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f'SELECT word, val, txid FROM "{ct.TABLE}"')).all()
    engine.dispose()
    return {r[0]: (int(r[1]), int(r[2])) for r in rows}


def counts(steps: BatchSteps) -> dict[str, int]:
    return {w: c for w, (c, _) in stored(steps).items()}


def process(steps: BatchSteps, spark: Any, run_id: str) -> int:
    txid = int(steps.begin(run_id)["txid"])
    manifest = process_on_spark(steps, spark, txid, 0.0)
    assert sum(len(s["files"]) for s in manifest["states"].values()) > 1  # several tasks
    return txid


def test_three_batches_committed_on_spark_count_every_word_once(
    steps: BatchSteps, spark: Any
) -> None:
    for i in (1, 2, 3):
        txid = process(steps, spark, f"r{i}")
        summary = commit_on_spark(steps, spark, REFERENCE, txid, 0.0)
        assert summary["applied"] is True
        assert steps.store.commits.committed_txid() == txid
        assert counts(steps) == ct.expected_counts(i)
        # the task's report, written next to the staged batch
        assert steps.staging.read_commit_summary(txid)["keys_written"] == summary["keys_written"]
    # the new values came back from the executors to the commit phase: every key of the last
    # batch with its new count
    last = {w: c for w, c in ct.Seen.rows[-summary["keys_written"]["counts"] :]}
    assert last == {w: c for w, (c, tx) in stored(steps).items() if tx == 3}
    assert steps.ledger is not None
    assert [r["txid"] for r in steps.ledger.rows(ct.NAME)] == [1, 2, 3]


def test_committed_txid_committed_again_on_spark_changes_nothing(
    steps: BatchSteps, spark: Any
) -> None:
    txid = process(steps, spark, "r1")
    commit_on_spark(steps, spark, REFERENCE, txid, 0.0)
    before = stored(steps)
    again = commit_on_spark(steps, spark, REFERENCE, txid, 0.0)
    assert again["applied"] is False
    assert stored(steps) == before


def test_a_failed_partition_leaves_txid_uncommitted_and_the_retry_counts_once(
    steps: BatchSteps, spark: Any
) -> None:
    txid = process(steps, spark, "r1")
    ct.clear_committed_marks()
    ct.FAIL_MARKER.touch()  # partition 1 fails once the others committed
    # the executor's own error crosses Spark's boundary, with its type
    with pytest.raises(StateStoreUnavailableError, match="partition 1 is unreachable"):
        commit_on_spark(steps, spark, REFERENCE, txid, 0.0)
    assert not ct.FAIL_MARKER.exists()  # the failure really happened in a Spark task
    assert steps.store.commits.committed_txid() == 0
    partial = stored(steps)
    assert partial, "the other partitions committed before the job failed"
    assert len(partial) < len(ct.expected_counts(1))
    # the retry applies the missing partition; the applied ones skip by their stored txid
    assert commit_on_spark(steps, spark, REFERENCE, txid, 0.0)["applied"] is True
    assert counts(steps) == ct.expected_counts(1)
    assert steps.store.commits.committed_txid() == 1


def test_spark_commit_refuses_a_truncated_staged_file(steps: BatchSteps, spark: Any) -> None:
    txid = process(steps, spark, "r1")
    attempt = steps.store.attempts.attempt(txid)
    assert attempt is not None
    manifest = steps.staging.read_manifest(attempt)
    victim = next(f for f in manifest["states"]["counts"]["files"] if f["rows"] > 1)
    table = pq.read_table(victim["path"])
    pq.write_table(table.slice(0, table.num_rows - 1), victim["path"])
    with pytest.raises(BatchIncompleteError, match="the manifest lists"):
        commit_on_spark(steps, spark, REFERENCE, txid, 0.0)
    assert steps.store.commits.committed_txid() == 0


def test_spark_commit_out_of_order_writes_nothing(steps: BatchSteps, spark: Any) -> None:
    process(steps, spark, "r1")
    second = process(steps, spark, "r2")
    with pytest.raises(CommitOrderError, match="txid 1 must commit first"):
        commit_on_spark(steps, spark, REFERENCE, second, 0.0)
    assert stored(steps) == {}


OPAQUE = "tests.runtime.commit_topologies:opaque_words"


@pytest.fixture
def opaque_steps(
    pg_url: str, zk_config: ZkConfig, tmp_path: Path, uncoalesced: None
) -> Iterator[BatchSteps]:
    os.environ["TRIDENT_STATE_URL"] = pg_url
    with zk_batch_steps(OPAQUE, ct.OPAQUE_TABLE, pg_url=pg_url, zk_config=zk_config,
                        tmp_path=tmp_path) as steps:  # fmt: skip
        yield steps
    os.environ.pop("TRIDENT_UNREADABLE_PARTITIONS", None)


def test_a_stale_opaque_batch_is_reprocessed_on_spark_before_its_spark_commit(
    opaque_steps: BatchSteps, spark: Any
) -> None:
    steps = opaque_steps
    # txids 1 and 2 processed (pipelined) while partition p1 is unreadable: 2 builds on 1
    os.environ["TRIDENT_UNREADABLE_PARTITIONS"] = "p1"
    first, second = (int(steps.begin(r)["txid"]) for r in ("r1", "r2"))
    process_on_spark(steps, spark, first, 0.0)
    process_on_spark(steps, spark, second, 0.0)
    # p1 is back: txid 1 is re-processed (it now reads p1) and committed
    del os.environ["TRIDENT_UNREADABLE_PARTITIONS"]
    process_on_spark(steps, spark, first, 0.0)
    commit_on_spark(steps, spark, OPAQUE, first, 0.0)
    attempt_before = steps.store.attempts.attempt(second)
    assert attempt_before is not None
    # txid 2 started p1 where txid 1's *old* batch ended: stale; the Spark commit job
    # re-processes it on Spark (a new attempt) and commits the right batch
    summary = commit_on_spark(steps, spark, OPAQUE, second, 0.0)
    assert summary["applied"] is True
    assert summary["attempt_id"] > attempt_before.attempt_id
    engine = sa.create_engine(os.environ["TRIDENT_STATE_URL"])
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f'SELECT word, val FROM "{ct.OPAQUE_TABLE}"')).all()
    engine.dispose()
    assert {r[0]: int(r[1]) for r in rows} == ct.expected_counts(2)


def test_spark_commit_reverts_keys_an_earlier_attempt_wrote_and_the_replay_does_not(
    opaque_steps: BatchSteps, spark: Any
) -> None:
    """Hole 1 on the Spark commit path: attempt 1 of txid 1 reads every partition, writes the
    opaque state and dies before the compare-and-set; the replay runs with p1 unreadable and
    is committed by a Spark job; p1's tuples come in later txids: every key counted once."""
    steps = opaque_steps
    txid = int(steps.begin("r1")["txid"])
    manifest = process_on_spark(steps, spark, txid, 0.0)
    plan = steps.plan(txid)
    steps.apply_staged(plan, manifest)  # attempt 1 wrote state ... and died
    assert steps.store.commits.committed_txid() == 0
    os.environ["TRIDENT_UNREADABLE_PARTITIONS"] = "p1"
    process_on_spark(steps, spark, txid, 0.0)  # the replay reads less
    assert commit_on_spark(steps, spark, OPAQUE, txid, 0.0)["applied"] is True
    del os.environ["TRIDENT_UNREADABLE_PARTITIONS"]
    for i in range(2, 7):  # until every partition is read to its end
        t = int(steps.begin(f"r{i}")["txid"])
        process_on_spark(steps, spark, t, 0.0)
        assert commit_on_spark(steps, spark, OPAQUE, t, 0.0)["applied"] is True
    engine = sa.create_engine(os.environ["TRIDENT_STATE_URL"])
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f'SELECT word, val FROM "{ct.OPAQUE_TABLE}"')).all()
    engine.dispose()
    got = {r[0]: int(r[1]) for r in rows}
    want = ct.expected_counts(4)  # all of the data
    assert {w: (got.get(w), n) for w, n in want.items() if got.get(w) != n} == {}
    assert set(got) == set(want)
