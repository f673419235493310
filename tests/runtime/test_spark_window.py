"""Windows on the Spark runtime: the processing phase runs the window in Spark's Python workers
(one task per partition, the store in PostgreSQL), the worker commits; a retried txid stages
the same window results, and the committed states equal the reference."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_trident.batch.on_spark import process_on_spark
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.operation import Sum
from airflow_trident.operation.window import (
    SlidingDurationWindow,
    TumblingCountWindow,
    WindowConfig,
)
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.sql import sql_state
from airflow_trident.state.window import sql_window_store
from airflow_trident.topology import TridentTopology
from tests.runtime import window_topologies as wt

pytestmark = pytest.mark.integration

# a count window of two whole batches (3 tuples per partition each): Spark may deliver a
# batch's tuples in another order, so the window's contents must not depend on it
CONFIGS: dict[str, WindowConfig] = {
    "tumbling_count": TumblingCountWindow.of(6),
    "sliding_duration": SlidingDurationWindow.of(
        timedelta(seconds=12), timedelta(seconds=4), timestamp_field="ts"
    ),
}


def staged_window(steps: BatchSteps, manifest: dict[str, Any]) -> list[list[tuple[Any, ...]]]:
    return [sorted(p) for p in steps.staging.read_states(manifest)["win"].partitions]


@pytest.mark.parametrize(
    "kind",
    # both window kinds stay in the test command in process (tests/runtime/test_window.py)
    ["tumbling_count", pytest.param("sliding_duration", marks=pytest.mark.long)],
)
def test_windows_on_spark_with_retried_txids_equal_the_reference(
    kind: str, spark: Any, pg_url: str, unique_name: str, tmp_path: Path
) -> None:
    # Given a window over two partitions in the run's PostgreSQL database, processed on Spark
    config = CONFIGS[kind]
    rows = wt.data(2, 12, seed=7)
    topology, _ = wt.windowed(unique_name, config, rows, 3, table=unique_name)
    steps = BatchSteps(
        topology,
        MemoryCoordinatorStore(topology.name),
        StagingArea(str(tmp_path / "staging"), topology.name),
        states=StateBinding(pg_url),
    )
    fired = 0
    # When 5 batches run (4 hold data), txids 2 and 4 processed twice (a retried process task)
    for _ in range(5):
        txid = int(steps.begin(None)["txid"])
        manifest = process_on_spark(steps, spark, txid, 0.0)
        first = staged_window(steps, manifest)
        if txid in (2, 4):
            again = process_on_spark(steps, spark, txid, 0.0)
            # Then the retry staged exactly the window results of the first attempt
            assert staged_window(steps, again) == first
        fired += sum(len(p) for p in first)
        assert steps.commit(txid)["applied"] is True
        steps.success(txid)
    # Then the committed states hold every window of the reference, once
    totals, windows = wt.reference(config, rows)
    assert fired == sum(windows.values())
    keys = [(k,) for k in sorted(totals)]
    got_totals = steps.query_state("totals").multi_get(keys)
    got_windows = steps.query_state("windows").multi_get(keys)
    assert dict(zip(sorted(totals), got_totals, strict=True)) == dict(totals)
    assert dict(zip(sorted(totals), got_windows, strict=True)) == dict(windows)


def test_a_processing_time_window_fires_on_spark_in_a_batch_without_tuples(
    spark: Any, pg_url: str, unique_name: str, tmp_path: Path
) -> None:
    # Given a 10 s processing-time window whose clock (a file the workers read) the test sets
    clock = tmp_path / "now"
    t = TridentTopology(unique_name)
    spout = MemoryTransactionalSpout({"p0": [(1,), (2,), (3,), (4,)]}, ["v"], 2)
    t.new_stream("nums", spout).tumbling_window(
        timedelta(seconds=10), sql_window_store(None, table=unique_name), ["v"], Sum(),
        ["total"], clock=wt.FileClock(str(clock)), name="win",
    ).persistent_aggregate(
        sql_state(None, f"{unique_name}_sum", "transactional", value_type="bigint"),
        ["total"], Sum(), ["sum"], name="sum",
    )  # fmt: skip
    steps = BatchSteps(
        t,
        MemoryCoordinatorStore(t.name),
        StagingArea(str(tmp_path / "staging"), t.name),
        states=StateBinding(pg_url),
    )
    # When batches run at 1 s and 4 s (all four tuples), then at 12 s with no tuple left
    staged = []
    for at in ("1", "4", "12"):
        clock.write_text(at)
        txid = int(steps.begin(None)["txid"])
        staged.append(staged_window(steps, process_on_spark(steps, spark, txid, 0.0)))
        steps.commit(txid)
        steps.success(txid)
    # Then [0, 10) fired in the batch without tuples (its results typed from no sample)
    assert staged == [[[]], [[]], [[(10,)]]]
    assert steps.query_state("sum").get() == 10


def test_windows_in_a_sqlite_store_on_spark_process_at_the_first_attempt(
    spark: Any, unique_name: str, tmp_path: Path
) -> None:
    # Given a window over two partitions, its store and states in the run's SQLite database,
    # processed on Spark local[2] (two Python workers writing the store at once)
    config = CONFIGS["tumbling_count"]
    rows = wt.data(2, 12, seed=7)
    topology, _ = wt.windowed(unique_name, config, rows, 3, table=unique_name)
    steps = BatchSteps(
        topology,
        MemoryCoordinatorStore(topology.name),
        StagingArea(str(tmp_path / "staging"), topology.name),
        states=StateBinding(f"sqlite:///{tmp_path}/state.db"),
    )
    # When 5 batches run: every processing succeeds at its first attempt (issue 32, item 6:
    # each failed with "database is locked", the two workers' transactions deadlocking on
    # SQLite's lock upgrade; the retry succeeded)
    for _ in range(5):
        txid = int(steps.begin(None)["txid"])
        process_on_spark(steps, spark, txid, 0.0)
        assert steps.commit(txid)["applied"] is True
        steps.success(txid)
    # Then the committed states hold every window of the reference, once
    totals, windows = wt.reference(config, rows)
    keys = [(k,) for k in sorted(totals)]
    assert dict(zip(sorted(totals), steps.query_state("totals").multi_get(keys), strict=True)) == (
        dict(totals)
    )
    assert dict(zip(sorted(totals), steps.query_state("windows").multi_get(keys), strict=True)) == (
        dict(windows)
    )
