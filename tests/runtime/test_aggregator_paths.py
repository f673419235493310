"""Aggregations give the same values in process and on Spark (issue 33, item 4): what the
differential fuzzing of aggregators (tests/runtime/test_aggregator_fuzz.py) found, each fixed.

* A built-in ``Max``/``Min`` over NaN: in process, Python's ``max``/``min`` kept whichever came
  first (``Max`` of 1.0 and NaN was 1.0, of NaN and 1.0 NaN), where Spark SQL (and PostgreSQL)
  order NaN above every number: ``Max`` NaN, ``Min`` 1.0 in any order.
* Group keys that are NaN or -0.0: in process each NaN was a group of its own (NaN is not equal
  to itself) and ``-0.0`` and ``0.0`` one group keyed by whichever came first, where Spark SQL
  groups every NaN together and keys ``-0.0`` as ``0.0``.
* A built-in ``Sum`` of an int64 field on Spark SQL failed the batch with Spark's arithmetic
  overflow when a partial sum left int64, though the in-process sum was exact (and fit).
* A tuple an aggregator (or any Python step) made came back from Spark as a list: Arrow's
  type for it was a list.
* The Spark driver's type sample runs the aggregations on the first tuples of each partition,
  a made-up batch: user code raising on it (a combine of other partials, a filter checking a
  batch's total) failed the batch on Spark, every attempt, where in process it committed (or
  failed in another step).
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
import pytest

from airflow_trident.errors import BatchFailedError, FailedException
from airflow_trident.operation import Count, Filter, Max, Min, ReducerAggregator, Sum
from airflow_trident.operation.combine import CombineOp
from airflow_trident.runtime.local import LocalBatchProcessor
from airflow_trident.runtime.spark.columns import PICKLED, infer_type
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentTuple

Row = tuple[Any, ...]
NAN = math.nan


def extremes(name: str, rows: dict[str, list[Row]]) -> TridentTopology:
    t = TridentTopology(name)
    spout = MemoryTransactionalSpout({p: [] for p in rows}, ["k", "x"], 1)
    (
        t.new_stream("src", spout)
        .chained_agg()
        .aggregate(["x"], Max(), ["high"])
        .aggregate(["x"], Min(), ["low"])
        .chain_end(name="agg")
    )
    return t


def grouped(name: str, rows: dict[str, list[Row]]) -> TridentTopology:
    t = TridentTopology(name)
    spout = MemoryTransactionalSpout({p: [] for p in rows}, ["k", "x"], 1)
    s = t.new_stream("src", spout)
    s.group_by(["x"]).aggregate([], Count(), ["n"], name="agg")
    s.group_by(["x"]).persistent_aggregate(memory_state(f"{name}_n"), Count(), ["n"], name="n")
    return t


def summed(name: str, rows: dict[str, list[Row]]) -> TridentTopology:
    t = TridentTopology(name)
    spout = MemoryTransactionalSpout({p: [] for p in rows}, ["k", "x"], 1)
    t.new_stream("src", spout).group_by(["k"]).aggregate(["x"], Sum(), ["total"], name="agg")
    return t


def local(t: TridentTopology, rows: dict[str, list[Row]]) -> list[Row]:
    processor = LocalBatchProcessor(t)
    result = processor.process(1, {"src": rows})
    return [r for part in result.outputs[processor.plan.phase("process")[-1].id] for r in part]


def on_spark(spark: Any, t: TridentTopology, rows: dict[str, list[Row]]) -> list[Row]:
    from airflow_trident.runtime.spark import SparkBatchProcessor

    with SparkBatchProcessor(t).process(spark, 1, {"src": rows}) as remote:
        return remote.output_rows(remote.stages[-1])


def shown(rows: list[Row]) -> list[str]:
    return sorted(map(repr, rows))


@pytest.mark.parametrize("values", [[1.0, NAN, -2.0], [NAN, 1.0, -2.0], [-2.0, 1.0, NAN]])
def test_max_and_min_order_nan_above_every_number_in_process(values: list[float]) -> None:
    # Given a batch of numbers and NaN, in any order
    rows = {"p0": [("a", v) for v in values]}
    # Then Max is NaN and Min the smallest number, as Spark SQL and PostgreSQL order them
    assert shown(local(extremes("nan_order", rows), rows)) == ["(nan, -2.0)"]
    assert CombineOp.MAX.combine(1.0, NAN) is NAN
    assert CombineOp.MIN.combine(NAN, 1.0) == 1.0


def test_nan_and_signed_zero_group_keys_group_as_on_spark_sql_in_process() -> None:
    # Given group keys NaN (twice, two objects), -0.0 and 0.0, over two partitions
    rows = {"p0": [("a", float("nan")), ("b", -0.0)], "p1": [("c", float("nan")), ("d", 0.0)]}
    t = grouped("nan_keys", rows)
    processor = LocalBatchProcessor(t)
    result = processor.process(1, {"src": rows})
    # Then NaN is one group and the zeros another, keyed 0.0 (a state's keys too)
    assert shown(local(grouped("nan_keys", rows), rows)) == ["(0.0, 2)", "(nan, 2)"]
    (staged_state,) = result.staged.values()
    staged = staged_state.partitions
    assert shown([r for part in staged for r in part]) == ["(0.0, 2)", "(nan, 2)"]


@pytest.mark.integration
def test_aggregations_over_nan_and_signed_zero_give_the_in_process_values_on_spark(
    spark: Any,
) -> None:
    # Given NaN among numbers, and NaN / -0.0 / 0.0 as group keys, over two partitions
    numbers = {"p0": [("a", 1.0), ("a", NAN)], "p1": [("a", -2.0), ("a", NAN)]}
    keys = {"p0": [("a", NAN), ("b", -0.0)], "p1": [("c", NAN), ("d", 0.0)]}
    # Then Spark SQL's Max, Min and group by give the in-process values
    for build, rows in [(extremes, numbers), (grouped, keys)]:
        want = shown(local(build("nan_spark", rows), rows))
        assert shown(on_spark(spark, build("nan_spark", rows), rows)) == want


@pytest.mark.integration
def test_an_int64_sum_whose_partial_sums_leave_int64_is_exact_on_spark(spark: Any) -> None:
    # Given int64 values whose running sum leaves int64 before it comes back
    big = 2**62
    rows = {"p0": [("a", big), ("a", big), ("b", 1)], "p1": [("a", -big)]}
    # Then Spark SQL's Sum is the exact in-process sum
    want = shown(local(summed("sum64", rows), rows))
    assert want == ["('a', 4611686018427387904)", "('b', 1)"]
    assert shown(on_spark(spark, summed("sum64", rows), rows)) == want
    # And a sum that does not fit int64 fails the batch naming the step (Spark SQL's columns are
    # int64; in process it is the Python int)
    beyond = {"p0": [("a", big), ("a", big)]}
    with pytest.raises(BatchFailedError, match=r"Sum of 'x' into 'total'.*int64"):
        on_spark(spark, summed("sum64", beyond), beyond)


class Pairs(ReducerAggregator[tuple[Any, ...]]):
    """The values as a tuple, sorted (a tuple is not a list)."""

    def init(self) -> tuple[Any, ...]:
        return ()

    def reduce(self, curr: tuple[Any, ...], tuple_: TridentTuple) -> tuple[Any, ...]:
        return tuple(sorted((*curr, tuple_[0])))


def test_a_tuple_is_no_arrow_list() -> None:
    # Then a column of tuples travels pickled: Arrow's list would come back as a Python list
    assert infer_type([(1, 2), None]) is PICKLED
    assert infer_type([[(1, 2)]]) is PICKLED
    assert infer_type([[1, 2]]) == pa.list_(pa.int64())


@pytest.mark.integration
def test_an_aggregators_tuples_stay_tuples_on_spark(spark: Any) -> None:
    # Given a reducer of tuples, grouped, over two partitions
    rows = {"p0": [("a", 2), ("b", 1)], "p1": [("a", 1)]}

    def build(name: str) -> TridentTopology:
        t = TridentTopology(name)
        spout = MemoryTransactionalSpout({p: [] for p in rows}, ["k", "x"], 1)
        t.new_stream("src", spout).group_by(["k"]).aggregate(["x"], Pairs(), ["xs"], name="agg")
        return t

    # Then Spark gives the in-process tuples, not lists
    want = shown(local(build("tuples"), rows))
    assert want == ["('a', (1, 2))", "('b', (1,))"]
    assert shown(on_spark(spark, build("tuples"), rows)) == want


class WholeBatch(Filter):
    """Fails the batch on a count below the batch's (``FailedException``): a check of a total
    that only the whole batch gives."""

    def is_keep(self, tuple_: TridentTuple) -> bool:
        if tuple_[0] != 4:
            raise FailedException(f"a batch of {tuple_[0]} tuples, not 4")
        return True


@pytest.mark.integration
def test_no_step_fails_a_batch_on_the_drivers_sample_of_an_aggregation(spark: Any) -> None:
    # Given a filter checking a whole batch's count, the driver's type sample one tuple of each
    # of two partitions (a made-up batch of 2)
    rows = {"p0": [("a", 1), ("b", 2)], "p1": [("c", 3), ("d", 4)]}

    def build(name: str) -> TridentTopology:
        t = TridentTopology(name)
        spout = MemoryTransactionalSpout({p: [] for p in rows}, ["k", "x"], 1)
        counted = t.new_stream("src", spout).aggregate([], Count(), ["n"], name="agg")
        counted.filter(["n"], WholeBatch(), name="whole")
        return t

    from airflow_trident.runtime.spark import SparkBatchProcessor

    # Then Spark commits the batch's count as in process (the sample's count of 2 failed it)
    assert shown(local(build("whole_batch"), rows)) == ["(4,)"]
    with SparkBatchProcessor(build("whole_batch"), sample_rows=1).process(
        spark, 1, {"src": rows}
    ) as remote:
        assert shown(remote.output_rows(remote.stages[-1])) == ["(4,)"]
