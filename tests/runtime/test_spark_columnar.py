"""Spark's Python steps of ``each`` and filters go column to column
(``runtime/spark/columnar.py``): the local runtime's tuples, record for record, whatever each
record emits and however Spark cuts the Arrow batches, and the local runtime's errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_trident.errors import BatchFailedError
from airflow_trident.graph import EachNode, FilterNode
from airflow_trident.operation import Count, Filter, Function
from airflow_trident.operation.builtin import Split
from airflow_trident.runtime.local import LocalBatchProcessor
from airflow_trident.runtime.spark import SparkBatchProcessor
from airflow_trident.runtime.spark.columnar import run_columns
from airflow_trident.runtime.spark.python_ops import PythonSegment
from airflow_trident.state.memory import memory_state
from airflow_trident.tuple import TridentCollector, TridentTuple
from tests.runtime.test_column_function import Shout, arrow_batches_of
from tests.runtime.test_spark_ops import last_rows, multiset, run_both, stream

SOURCES = {
    "plays": {
        "p0": [("ann", 3, "the cow"), ("bob", 4, " jumped\tover "), ("ann", 5, None)],
        "p1": [],
        "p2": [("cid", 0, "x"), ("bob", 2, ""), ("dan", 7, "a  b"), ("eve", 1, "moon")],
    }
}


class Repeat(Function):
    """``score % 4`` tuples (i, {user}): none for some records, several for others (a set:
    pickled)."""

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        for i in range(tuple_.get("score") % 4):
            collector.emit([i, {tuple_.get("user")}])  # a list: the collector copies it


class Seen(Function):
    """Keeps every tuple it gets (a tuple must stay as it was when the next arrives)."""

    def __init__(self) -> None:
        self.seen: list[TridentTuple] = []

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        self.seen.append(tuple_)
        collector.emit((len(tuple_.fields),))


class Odd(Filter):
    def is_keep(self, tuple_: TridentTuple) -> bool:
        return bool(tuple_[0] % 2)


class Wide(Function):
    """Emits two values for one declared field on ``dan``."""

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((1, 2) if tuple_[0] == "dan" else (1,))


def topology() -> Any:
    t, s = stream()
    words = (
        s.each(["text"], Split(), ["word"])
        .each(["user", "score"], Repeat(), ["i", "users"])
        .filter(["i"], Odd())
        .each(["user", "word"], Shout(), ["loud", "n"])
        .each(["loud"], Seen(), ["one"])
    )
    words.group_by(["loud"]).persistent_aggregate(memory_state("c"), Count(), ["count"], name="c")
    words.project(["user", "word", "i", "users", "loud", "n", "one"])
    return t


@pytest.mark.parametrize("batch_rows", [1, 2, 10_000])
def test_spark_gives_the_local_tuples_whatever_each_record_emits(
    spark: Any, batch_rows: int
) -> None:
    # Given per-tuple functions that emit none, one or several tuples per record (one a
    # pickled set), a filter and a column function, fused into one Python step
    t = topology()
    # When the batch runs locally and on Spark, in Arrow batches of 1, 2 and many rows
    with arrow_batches_of(spark, batch_rows):
        local, remote = run_both(spark, t, SOURCES, outputs=["stage_1"])
        expected, got = last_rows(local, remote, "stage_1")
        projected = last_rows(local, remote, "stage_4")
        counts = multiset(r for part in remote.collect("c").partitions for r in part)
    # Then the tuples are the local ones, record for record (every field kept, or projected)
    assert got == expected
    assert projected[1] == projected[0]
    assert sum(got.values()) == 4  # i == 1 only for ann's and dan's (3 and 7 % 4) words
    assert multiset([("dan", "b", 1, {"dan"}, "dan:B", 3, 1)]) <= projected[1]
    assert counts == multiset(r for part in local.staged["c"].partitions for r in part)


def test_the_worker_takes_the_column_path_for_per_tuple_functions(tmp_path: Path) -> None:
    # Given a Python step of a splitting function, a repeating one, a filter and a counter
    split = EachNode("split", (), ("s", "w"), None, Split(), ("s",), ("w",))
    repeat = EachNode("repeat", (), ("s", "i", "u"), None, Repeat(), ("s", "score"), ("i", "u"))
    ops = (split, FilterNode("odd", (), ("s", "w"), None, Odd(), ("n",)))
    schema = pa.schema([("s", pa.string()), ("n", pa.int64()), ("w", pa.string())])
    batch = pa.record_batch({"s": ["the cow", "", "a b c"], "n": [1, 2, 3]})
    # When the filter runs first, then the split (a record without words emits none)
    out = run_columns(batch, (ops[1], ops[0]), schema)
    # Then the records and their pass-through columns follow what each step kept or repeated
    assert out is not None
    assert out.to_pydict() == {
        "s": ["the cow", "the cow", "a b c", "a b c", "a b c"],
        "n": [1, 1, 3, 3, 3],
        "w": ["the", "cow", "a", "b", "c"],
    }
    # And a segment of them is columnar, not a whole-partition one, nor one with other steps
    segment = PythonSegment(1, (ops[1], ops[0]), (("s", "n"),) * 2, ("s", "n"), ("s", "n", "w"),
                            schema)  # fmt: skip
    assert segment.columnar
    assert list(segment(iter([batch]))) == [out]
    assert not PythonSegment(1, ops, ((),) * 2, (), (), schema, whole=True).columnar
    # And a step that reads a field the batch lacks is left to the row path
    assert run_columns(batch, (repeat,), schema) is None


def test_each_tuple_stays_as_it_was_emitted_to() -> None:
    # Given a function that keeps the tuples it gets
    seen = Seen()
    op = EachNode("seen", (), ("w", "one"), None, seen, ("w",), ("one",))
    schema = pa.schema([("w", pa.string()), ("one", pa.int64())])
    out = run_columns(pa.record_batch({"w": ["a", "b", "c"]}), (op,), schema)
    # Then each kept tuple is its own record, with its fields
    assert out is not None
    assert out.column(1).to_pylist() == [1, 1, 1]
    assert seen.seen == [("a",), ("b",), ("c",)]
    assert [t.get("w") for t in seen.seen] == ["a", "b", "c"]


def test_a_wrong_width_is_named_as_locally(spark: Any) -> None:
    # Given a function that emits two values for one field on one record
    t, s = stream()
    s.each(["user"], Wide(), ["one"], name="wide").project(["user", "one"])
    with pytest.raises(BatchFailedError) as local_error:
        LocalBatchProcessor(t).process(5, SOURCES)
    # When Spark runs it
    remote = SparkBatchProcessor(t, sample_rows=1).process(spark, 5, SOURCES)
    with pytest.raises(BatchFailedError) as spark_error:
        remote.output_rows(remote.stages[-1])
    # Then both name the step, the txid and the record, and what was declared
    assert str(spark_error.value) == str(local_error.value).replace(
        "7, 'a  b'", "<pruned>, <pruned>"
    )
    for part in ("'wide'", "txid 5", "('dan', <pruned>, <pruned>)", "declared ['one']"):
        assert part in str(spark_error.value)


class Reused(Function):
    """Emits one list it changes after every emit (a buffer reused across records)."""

    def __init__(self) -> None:
        self.buffer: list[Any] = [None]

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        self.buffer[0] = tuple_[0]
        collector.emit(self.buffer)
        self.buffer[0] = "changed after the emit"


def test_a_list_changed_after_its_emit_gives_the_emitted_values() -> None:
    # Given a function that emits a list, then changes it (a buffer reused across records)
    reused = EachNode("reused", (), ("w", "x"), None, Reused(), ("w",), ("x",))
    schema = pa.schema([("w", pa.string()), ("x", pa.string())])
    # When it runs column to column
    out = run_columns(pa.record_batch({"w": ["a", "b", "c"]}), (reused,), schema)
    # Then each record has the values of its emit, as the local runtime copies them
    assert out is not None
    assert out.column(1).to_pylist() == ["a", "b", "c"]
