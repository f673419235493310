"""``ColumnFunction``: the same tuples as a per-tuple ``Function`` on both runtimes, a column
batch at a time, and the same errors."""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_trident.errors import BatchFailedError, FailedException
from airflow_trident.graph import EachNode
from airflow_trident.operation import ColumnFunction, Count, Function
from airflow_trident.runtime.local import LocalBatchProcessor
from airflow_trident.runtime.spark import SparkBatchProcessor
from airflow_trident.runtime.spark.python_ops import PythonSegment
from airflow_trident.state.memory import memory_state
from airflow_trident.tuple import TridentCollector, TridentTuple, tuple_type
from tests.runtime.test_spark_ops import PLAYS, last_rows, multiset, run_both, stream

Row = tuple[Any, ...]


class Shout(ColumnFunction):
    """Two output fields from two input fields; ``None`` passes through."""

    def execute_columns(self, columns: Sequence[list[Any]]) -> Sequence[Sequence[Any]]:
        users, texts = columns
        loud = [
            None if t is None else f"{u}:{t.upper()}" for u, t in zip(users, texts, strict=True)
        ]
        return loud, [len(u) for u in users]


class ShoutTuple(Function):
    """The same, a tuple at a time."""

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        user, text = tuple_
        collector.emit((None if text is None else f"{user}:{text.upper()}", len(user)))


class Tags(ColumnFunction):
    """Values Arrow cannot type (sets): they travel pickled."""

    def execute_columns(self, columns: Sequence[list[Any]]) -> Sequence[Sequence[Any]]:
        return ([{s, s + 1} for s in columns[0]],)


class Noted(ColumnFunction):
    """Writes each call's batch size to a file (Spark's workers are other processes)."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def execute_columns(self, columns: Sequence[list[Any]]) -> Sequence[Sequence[Any]]:
        with self.log.open("a") as f:
            f.write(f"{len(columns[0])}\n")
        return ([s * 10 for s in columns[0]],)


class Boom(ColumnFunction):
    def execute_columns(self, columns: Sequence[list[Any]]) -> Sequence[Sequence[Any]]:
        if "dan" in columns[0]:
            raise ZeroDivisionError("no dan")
        return ([1] * len(columns[0]),)


class Short(ColumnFunction):
    """Drops a value when given more than one tuple (a batch-level error, no record's)."""

    def execute_columns(self, columns: Sequence[list[Any]]) -> Sequence[Sequence[Any]]:
        n = len(columns[0])
        return ([1] * (n - 1 if n > 1 else n),)


class Refuse(ColumnFunction):
    def execute_columns(self, columns: Sequence[list[Any]]) -> Sequence[Sequence[Any]]:
        if 7 in columns[0]:
            raise FailedException("stop at seven")
        return (list(columns[0]),)


@contextlib.contextmanager
def arrow_batches_of(spark: Any, rows: int) -> Iterator[None]:
    """Spark's Python workers get Arrow batches of at most ``rows`` rows."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, str(rows))
    try:
        yield
    finally:
        spark.conf.set(key, before)


def test_a_column_function_gives_what_the_per_tuple_function_gives() -> None:
    # Given the same function per tuple and per column, run in process
    def outputs(function: Function) -> list[list[Row]]:
        t, s = stream()
        s.each(["user", "text"], function, ["loud", "n"]).each(["score"], Tags(), ["tags"])
        return LocalBatchProcessor(t).process(1, {"plays": PLAYS}).outputs["stage_1"]

    # Then every partition holds the same tuples in the same order (an empty one too)
    by_column, by_tuple = outputs(Shout()), outputs(ShoutTuple())
    assert by_column == by_tuple
    assert by_column[0][0] == ("ann", 3, "the cow", "ann:THE COW", 3, {3, 4})
    assert [len(p) for p in by_column] == [3, 0, 3]
    # And execute (one tuple) runs the same code
    c = TridentCollector()
    Shout().execute(TridentTuple(("bob", "hi"), ("user", "text")), c)
    assert c.rows == [("bob:HI", 3)]


@pytest.mark.parametrize("batch_rows", [1, 2, 10_000])
def test_spark_gives_the_local_tuples_whatever_the_arrow_batches(
    spark: Any, batch_rows: int
) -> None:
    # Given column functions (one with pickled output) then a per-tuple function, a count
    t, s = stream()
    words = s.each(["user", "text"], Shout(), ["loud", "n"]).each(["score"], Tags(), ["tags"])
    words.group_by(["loud"]).persistent_aggregate(memory_state("c"), Count(), ["count"], name="c")
    # When the batch runs locally and on Spark, in Arrow batches of 1, 2 and many rows
    with arrow_batches_of(spark, batch_rows):
        local, remote = run_both(spark, t)
        staged = multiset(r for part in remote.collect("c").partitions for r in part)
    # Then the counts are the local ones
    assert staged == multiset(r for part in local.staged["c"].partitions for r in part)
    assert staged & multiset([("ann:THE COW", 1), (None, 1)]) == multiset(
        [("ann:THE COW", 1), (None, 1)]
    )


def test_spark_calls_it_on_whole_arrow_batches(spark: Any, tmp_path: Path) -> None:
    # Given a column function that notes each batch it gets
    def topology(log: Path) -> Any:
        t, s = stream()
        s.each(["score"], Noted(log), ["tens"]).project(["user", "tens"])
        return t

    rows = {f"p{i}": [(f"u{j}", j, "x") for j in range(50)] for i in range(2)}
    local = LocalBatchProcessor(topology(tmp_path / "local.txt")).process(1, {"plays": rows})
    # When Spark runs it in Arrow batches of 20 rows
    log = tmp_path / "spark.txt"
    with arrow_batches_of(spark, 20):
        remote = SparkBatchProcessor(topology(log), sample_rows=1).process(
            spark, 1, {"plays": rows}
        )
        expected, got = last_rows(local, remote)
    # Then the tuples are the local ones
    assert got == expected
    assert got[repr(("u7", 70))] == 2
    # And the workers called it on whole batches, never re-ran a tuple alone (no fallback)
    sizes = [int(n) for n in log.read_text().split()]
    worker = [n for n in sizes if n != 1]  # the driver's type sample: a tuple per partition
    assert max(worker) == 20
    assert sum(worker) == 100
    assert sizes.count(1) <= len(rows)


def test_a_failing_record_is_named_as_locally(spark: Any) -> None:
    # Given a column function that raises when a batch holds one record
    t, s = stream()
    s.each(["user"], Boom(), ["one"], name="boom").group_by(["one"]).persistent_aggregate(
        memory_state("b"), Count(), ["n"], name="b"
    )
    with pytest.raises(BatchFailedError) as local_error:
        LocalBatchProcessor(t).process(7, {"plays": PLAYS})
    # When Spark computes the batch
    remote = SparkBatchProcessor(t, sample_rows=1).process(spark, 7, {"plays": PLAYS})
    with pytest.raises(BatchFailedError) as spark_error:
        remote.collect("b")
    # Then both name the step, the txid and the record (Spark's unread fields are pruned)
    pruned = str(local_error.value).replace("7, 'a  b'", "<pruned>, <pruned>")
    assert str(spark_error.value) == pruned
    for part in ("'boom'", "txid 7", "('dan', <pruned>, <pruned>)", "ZeroDivisionError: no dan"):
        assert part in str(spark_error.value)


def test_a_failed_exception_and_a_wrong_shape_fail_the_batch_on_both(spark: Any) -> None:
    # Given a column function that refuses a record on purpose
    t, s = stream()
    s.each(["score"], Refuse(), ["same"], name="refuse").project(["user", "same"])
    with pytest.raises(BatchFailedError) as local_error:
        LocalBatchProcessor(t).process(2, {"plays": PLAYS})
    remote = SparkBatchProcessor(t, sample_rows=1).process(spark, 2, {"plays": PLAYS})
    with pytest.raises(BatchFailedError) as spark_error:
        remote.output_rows(remote.stages[-1])
    # Then both name the record and the reason
    expected = "step 'refuse' failed in batch txid 2 on record ('dan', 7, "
    assert str(local_error.value).startswith(expected)
    assert str(spark_error.value).startswith(expected)
    assert "FailedException: stop at seven" in str(spark_error.value)
    # And a function that returns too few values fails the batch, naming no record
    t, s = stream()
    s.each(["score"], Short(), ["one"], name="short").project(["user", "one"])
    with pytest.raises(BatchFailedError, match="execute_columns returned") as short:
        LocalBatchProcessor(t).process(3, {"plays": PLAYS})
    assert "on record" not in str(short.value)
    remote = SparkBatchProcessor(t, sample_rows=1).process(spark, 3, {"plays": PLAYS})
    with pytest.raises(BatchFailedError, match="step 'short' failed in batch txid 3"):
        remote.output_rows(remote.stages[-1])


def test_trident_tuples_are_tuples_with_field_names() -> None:
    t = TridentTuple(["ann", 3], ("user", "n"))
    assert t == ("ann", 3)
    assert hash(t) == hash(("ann", 3))
    assert t.get("n") == 3
    assert t.fields == ("user", "n")
    assert t.values == ("ann", 3)
    assert type(tuple_type(["user", "n"])(("bob", 4))) is type(t)
    assert pickle.loads(pickle.dumps(t)).fields == ("user", "n")
    assert repr(t) == "TridentTuple({'user': 'ann', 'n': 3})"
    with pytest.raises(KeyError, match="available: \\['user', 'n'\\]"):
        t.get("city")


def test_the_worker_goes_column_to_column_and_falls_back_to_rows_on_failure() -> None:
    # Given the Python step of a column function, as Spark's workers run it
    op = EachNode("boom", ("s",), ("user", "one"), None, Boom(), ("user",), ("one",))
    schema = pa.schema([("user", pa.string()), ("one", pa.int64())])
    segment = PythonSegment(4, (op,), (("user",),), ("user",), ("user", "one"), schema)
    clean = pa.record_batch({"user": ["ann", "bob"]})
    # Then a clean batch goes column to column, the user column passing through as is
    assert segment.columnar
    fast = segment._columns(clean)
    assert fast is not None
    assert fast.to_pydict() == {"user": ["ann", "bob"], "one": [1, 1]}
    assert fast.column(0) is clean.column(0) or fast.column(0).equals(clean.column(0))
    assert list(segment(iter([clean]))) == [fast]
    # And a failing batch fails there with the local runtime's error, naming the record (each
    # record run alone, as the local runtime does), not left to the row path to run again
    failing = pa.record_batch({"user": ["ann", "dan"]})
    with pytest.raises(BatchFailedError, match="on record \\('dan',\\): ZeroDivisionError: no dan"):
        segment._columns(failing)
    with pytest.raises(Exception, match="on record \\('dan',\\): ZeroDivisionError: no dan"):
        list(segment(iter([failing])))
