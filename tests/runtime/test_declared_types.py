"""Declared output types keep user code off Spark's driver (issue 54, item 6; docs/api.md,
"Output types on Spark"): a step whose computed fields are all declared (``output_types``) is
not run on the driver's type sample; the sample is the fallback for undeclared ones. And module
globals: a global the driver changes between batches is seen in process, not on Spark.

Spark's Python workers are processes of their own: ``DRIVER_CALLS`` counts the calls made in
this one (the driver's), which is what the sample would add to.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow as pa
import pytest

from airflow_trident.errors import BatchFailedError, ConfigurationError
from airflow_trident.graph import EachNode
from airflow_trident.operation import (
    CombinerAggregator,
    Consumer,
    Filter,
    Function,
    ReducerAggregator,
)
from airflow_trident.runtime.local import LocalBatchProcessor
from airflow_trident.runtime.spark import SparkBatchProcessor
from airflow_trident.runtime.spark.frames import undeclared
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentCollector, TridentTuple
from tests.runtime import driver_globals
from tests.runtime.test_spark_ops import multiset, stream

DRIVER_CALLS: list[str] = []  # calls in this process; the workers' calls are in theirs
SOURCES = {"plays": {"p0": [("ann", 3, "a b"), ("bob", 5, "c")], "p1": [("ann", 4, "d")]}}


class Doubled(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        DRIVER_CALLS.append("doubled")
        collector.emit((tuple_[0] * 2,))


class DeclaredDoubled(Doubled):
    output_types: ClassVar[dict[str, Any]] = {"double": pa.int64()}


class Letters(Function):
    """A set: a value Arrow has no type for."""

    output_types: ClassVar[dict[str, Any]] = {"letters": object}

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        DRIVER_CALLS.append("letters")
        collector.emit((set(tuple_[0]),))


class Odd(Filter):
    def is_keep(self, tuple_: TridentTuple) -> bool:
        DRIVER_CALLS.append("odd")
        return bool(tuple_[0] % 2)


class Seen(Consumer):
    def accept(self, tuple_: TridentTuple) -> None:
        DRIVER_CALLS.append("seen")


class Total(ReducerAggregator[int]):
    output_types: ClassVar[dict[str, Any]] = {"total": pa.int64()}

    def init(self) -> int:
        return 0

    def reduce(self, curr: int, tuple_: TridentTuple) -> int:
        DRIVER_CALLS.append("total")
        return curr + tuple_[0]


class Most(CombinerAggregator[int]):
    output_types: ClassVar[dict[str, Any]] = {"most": pa.int64()}

    def init(self, tuple_: TridentTuple) -> int:
        DRIVER_CALLS.append("most")
        return int(tuple_[0])

    def combine(self, val1: int, val2: int) -> int:
        return max(val1, val2)

    def zero(self) -> int:
        return -1


def on_spark(spark: Any, t: TridentTopology, txid: int = 1) -> tuple[Any, Any]:
    """The last stage's tuples in process and on Spark; ``DRIVER_CALLS`` holds Spark's only."""
    local = LocalBatchProcessor(t).process(txid, SOURCES)
    DRIVER_CALLS.clear()
    remote = SparkBatchProcessor(t).process(spark, txid, SOURCES)
    stage = remote.stages[-1]
    got = multiset(remote.output_rows(stage))
    return multiset(r for part in local.outputs[stage] for r in part), got


def test_declared_types_keep_a_step_off_the_drivers_sample(spark: Any) -> None:
    # Given the same function undeclared and with its output type declared
    for function, sampled in ((Doubled(), True), (DeclaredDoubled(), False)):
        t, s = stream()
        s.each(["score"], function, ["double"]).project(["user", "double"])
        # When Spark runs a batch
        expected, got = on_spark(spark, t)
        # Then both give the in-process tuples; only the undeclared one ran on the driver
        assert got == expected
        assert bool(DRIVER_CALLS) is sampled, (type(function).__name__, DRIVER_CALLS)


def test_steps_computing_no_field_and_declared_aggregators_skip_the_sample(spark: Any) -> None:
    # Given a filter, a peek, a declared function of any value (object: pickled), and declared
    # aggregators (a whole one per group, a combiner in two halves)
    t, s = stream()
    kept = s.filter(["score"], Odd()).peek(Seen()).each(["text"], Letters(), ["letters"])
    kept.project(["user", "letters"])
    grouped = s.group_by(["user"])
    grouped.aggregate(["score"], Total(), ["total"])
    t2, s2 = stream("t2")
    s2.group_by(["user"]).aggregate(["score"], Most(), ["most"])
    # When Spark runs a batch of each
    for topology in (t, t2):
        expected, got = on_spark(spark, topology)
        # Then the in-process tuples, and no user code ran on the driver
        assert got == expected
        assert DRIVER_CALLS == [], DRIVER_CALLS


def test_an_undeclared_step_samples_the_declared_steps_before_it(spark: Any) -> None:
    # Given a declared step, then one that is not (the fallback: the sample needs rows)
    t, s = stream()
    s.each(["score"], DeclaredDoubled(), ["double"]).each(["double"], Doubled(), ["quad"])
    # When Spark runs a batch
    expected, got = on_spark(spark, t)
    # Then the sample ran both on the driver (the second's input comes through the first)
    assert got == expected
    assert DRIVER_CALLS.count("doubled") >= 2, DRIVER_CALLS


def test_what_needs_a_sample_is_what_is_computed_and_not_declared() -> None:
    plain = EachNode("plain", (), ("score", "double"), None, Doubled(), ("score",), ("double",))
    pinned = EachNode("pinned", (), ("score", "double"), None, DeclaredDoubled(), ("score",),
                      ("double",))  # fmt: skip
    assert undeclared([plain], ["score", "double"]) == ["double"]
    assert undeclared([plain], ["score"]) == []  # not kept: no type to learn
    assert undeclared([pinned], ["score", "double"]) == []


class Misdeclared(Function):
    output_types: ClassVar[dict[str, Any]] = {"double": "int"}

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((tuple_[0],))


def test_a_declaration_neither_an_arrow_type_nor_object_is_refused(spark: Any) -> None:
    t, s = stream()
    s.each(["score"], Misdeclared(), ["double"])
    with pytest.raises(ConfigurationError, match=r"output_types\['double'\] is 'int'.*object"):
        SparkBatchProcessor(t).process(spark, 1, SOURCES)


def test_a_global_the_driver_changes_between_batches_is_not_seen_on_spark(spark: Any) -> None:
    # Given a function reading a module global (declared: the driver runs none of it)
    t, s = stream()
    s.each(["score"], driver_globals.Rated(), ["rated"]).project(["rated"])

    def batch(txid: int) -> tuple[list[int], list[int]]:
        local = LocalBatchProcessor(t).process(txid, SOURCES)
        remote = SparkBatchProcessor(t).process(spark, txid, SOURCES)
        stage = remote.stages[-1]
        here = sorted(r[0] for part in local.outputs[stage] for r in part)
        return here, sorted(r[0] for r in remote.output_rows(stage))

    assert batch(1) == ([3, 4, 5], [3, 4, 5])
    # When the driver changes the global before the next batch
    driver_globals.RATE = 10
    try:
        here, there = batch(2)
    finally:
        driver_globals.RATE = 1
    # Then the in-process run sees the change, Spark's workers (which import the module
    # themselves) do not: docs/api.md says so
    assert here == [30, 40, 50]
    assert there == [3, 4, 5]


def test_a_module_pickled_by_value_ships_its_globals_with_each_batch(spark: Any) -> None:
    # Given the same function, its module pickled by value (as ``__main__`` and notebooks are)
    from pyspark import cloudpickle

    t, s = stream()
    s.each(["score"], driver_globals.Rated(), ["rated"]).project(["rated"])
    cloudpickle.register_pickle_by_value(driver_globals)
    try:
        # When the driver changes the global between two batches
        first = SparkBatchProcessor(t).process(spark, 1, SOURCES)
        assert sorted(r[0] for r in first.output_rows(first.stages[-1])) == [3, 4, 5]
        driver_globals.RATE = 10
        second = SparkBatchProcessor(t).process(spark, 2, SOURCES)
        there = sorted(r[0] for r in second.output_rows(second.stages[-1]))
    finally:
        driver_globals.RATE = 1
        cloudpickle.unregister_pickle_by_value(driver_globals)
    # Then the workers see the globals as they were when the batch's plan was built
    assert there == [30, 40, 50]


class Halved(Function):
    output_types: ClassVar[dict[str, Any]] = {"half": pa.int64()}

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((tuple_[0] / 2,))


def test_a_value_the_declared_type_would_change_fails_the_batch(spark: Any) -> None:
    # Given a function declaring int64 and emitting floats (Arrow would truncate 1.5 to 1)
    t, s = stream()
    s.each(["score"], Halved(), ["half"]).project(["half"])
    remote = SparkBatchProcessor(t).process(spark, 1, SOURCES)
    # Then the batch fails on Spark, naming the field and output_types, rather than differ
    # (3 / 2 or 5 / 2: which partition's task fails first is Spark's order)
    with pytest.raises(BatchFailedError, match=r"float [12]\.5 in an int64 column.*output_types"):
        remote.output_rows(remote.stages[-1])
