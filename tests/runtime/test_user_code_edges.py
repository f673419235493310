"""User code at the edges, identical on both runtimes (issue 19, symptoms 6 and 7).

* No user step runs on a made-up window: the Spark runtime's driver-side type sample used to
  pass the sample rows as one window to the window's aggregator and every step after it, so a
  ``Filter`` that checks a window's size failed every attempt of txid 1 on Spark while the
  in-process runtime committed it.
* An ``Aggregator`` that emits more or fewer values than its declared output fields fails the
  batch naming the step, the txid and what it emitted, as a ``Function`` does (it was silently
  cut to the declared width, or gave a bare ``IndexError``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.errors import BatchFailedError, FailedException
from airflow_trident.operation import Aggregator, Count, Filter, Sum
from airflow_trident.operation.window import TumblingCountWindow
from airflow_trident.runtime.local import LocalBatchProcessor
from airflow_trident.runtime.spark import SparkBatchProcessor
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.sql import sql_state
from airflow_trident.state.window import sql_window_store
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentCollector, TridentTuple

WINDOW = 6  # tuples per window; batches bring 3 per partition, so txid 1 fires no window
ROWS = {"p0": [(i, i % 4) for i in range(12)]}


class WholeWindow(Filter):
    """Fails the batch on a window that does not hold exactly ``WINDOW`` tuples."""

    def is_keep(self, tuple_: TridentTuple) -> bool:
        if tuple_[0] != WINDOW:
            raise FailedException(f"a window of {tuple_[0]} tuples, not {WINDOW}")
        return True


def windowed(name: str) -> TridentTopology:
    t = TridentTopology(name)
    (
        t.new_stream("nums", MemoryTransactionalSpout(ROWS, ["seq", "v"], 3))
        .window(
            TumblingCountWindow.of(WINDOW),
            sql_window_store(None, table=name),
            ["v"],
            Count(),
            ["size"],
            name="win",
        )
        .filter(["size"], WholeWindow(), name="whole")
        .persistent_aggregate(
            sql_state(None, f"{name}_sum", "transactional", value_type="bigint"),
            ["size"],
            Sum(),
            ["tuples"],
            name="tuples",
        )
    )
    return t


@pytest.fixture(params=["sqlite", "postgresql"])
def state_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        url: str = request.getfixturevalue("pg_url")
        return url
    return f"sqlite:///{tmp_path}/state.db"


def run_four(steps: BatchSteps, process: Any) -> int:
    """Txids 1-4 (12 tuples, two windows), each committed; the committed sum of sizes."""
    for _ in range(4):
        txid = int(steps.begin(None)["txid"])
        process(steps, txid)
        assert steps.commit(txid)["applied"] is True
        steps.success(txid)
    return int(steps.query_state("tuples").get())


def steps_for(t: TridentTopology, url: str, tmp_path: Path) -> BatchSteps:
    staging = StagingArea(str(tmp_path / "staging"), t.name)
    return BatchSteps(t, MemoryCoordinatorStore(t.name), staging, states=StateBinding(url))


@pytest.mark.integration
def test_steps_after_a_window_see_only_real_windows_in_process(
    state_url: str, unique_name: str, tmp_path: Path
) -> None:
    steps = steps_for(windowed(unique_name), state_url, tmp_path)
    assert run_four(steps, lambda s, txid: s.process_local(txid)) == 12


@pytest.mark.integration
def test_steps_after_a_window_see_only_real_windows_on_spark(
    spark: Any, pg_url: str, unique_name: str, tmp_path: Path
) -> None:
    from airflow_trident.batch.on_spark import process_on_spark

    steps = steps_for(windowed(unique_name), pg_url, tmp_path)
    assert run_four(steps, lambda s, txid: process_on_spark(s, spark, txid, 0.0)) == 12


class Emits(Aggregator[int]):
    """Counts its tuples; emits ``values`` values per group (1 is what is declared)."""

    def __init__(self, values: int) -> None:
        self.values = values

    def init(self, batch_id: int, collector: TridentCollector) -> int:
        return 0

    def aggregate(self, state: int, tuple_: TridentTuple, collector: TridentCollector) -> int:
        return state + 1

    def complete(self, state: int, collector: TridentCollector) -> None:
        collector.emit(tuple([state] * self.values))


def aggregating(values: int, scope: str) -> TridentTopology:
    t = TridentTopology("agg_width")
    stream = t.new_stream("nums", MemoryTransactionalSpout(ROWS, ["seq", "v"], 3))
    grouped = stream.group_by(["v"])
    if scope == "partition":
        grouped.partition_aggregate(["seq"], Emits(values), ["n"], name="agg")
    else:
        grouped.aggregate(["seq"], Emits(values), ["n"], name="agg")
    return t


SOURCES = {"nums": {"p0": ROWS["p0"][:6]}}


def width_message(values: int) -> str:
    return f"step 'agg' failed in batch txid 5: ValueError: aggregator Emits emitted {values} "


@pytest.mark.parametrize("scope", ["partition", "batch"])
@pytest.mark.parametrize("values", [2, 0])
def test_an_aggregator_emitting_another_width_fails_the_batch_in_process(
    values: int, scope: str
) -> None:
    with pytest.raises(BatchFailedError) as failed:
        LocalBatchProcessor(aggregating(values, scope)).process(5, SOURCES)
    assert str(failed.value).startswith(width_message(values))
    assert "declared ['n']" in str(failed.value)


@pytest.mark.integration
@pytest.mark.parametrize("scope", ["partition", "batch"])
@pytest.mark.parametrize("values", [2, 0])
def test_an_aggregator_emitting_another_width_fails_the_batch_on_spark(
    spark: Any, values: int, scope: str
) -> None:
    def run() -> Any:
        result = SparkBatchProcessor(aggregating(values, scope)).process(spark, 5, SOURCES)
        return result.output_rows(result.stages[-1])

    with pytest.raises(BatchFailedError) as failed:
        run()
    assert str(failed.value).startswith(width_message(values))
    assert "declared ['n']" in str(failed.value)
