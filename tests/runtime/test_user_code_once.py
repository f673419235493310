"""User code runs once per record on every path, and its failure is the local runtime's
(issue 33).

* A ``StopIteration`` a user's filter or function raises fails the batch naming the record, as
  in process: the column path's ``map`` took it for the end of the input and committed the
  records before it (and, past the driver's sample, every record after it).
* User code that raised is never run again: the column path's failure sent the batch down the
  row path, which called every record again (a function raising once then committed on the
  first attempt, side effects doubled), and the row path re-ran the failing record through the
  local runtime to word its error.
* The driver's type sample runs on a copy of the operations: a count kept on ``self`` from
  ``__init__`` started on the workers at the sample's count.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.errors import BatchFailedError, failure_text
from airflow_trident.graph import EachNode, FilterNode
from airflow_trident.operation import Count, Filter, Function, Sum
from airflow_trident.operation.window import TumblingCountWindow
from airflow_trident.runtime.local import LocalBatchProcessor
from airflow_trident.runtime.spark import SparkBatchProcessor
from airflow_trident.runtime.spark.columnar import run_columns
from airflow_trident.runtime.spark.python_ops import PythonSegment
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.state.window import sql_window_store
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentCollector, TridentTuple
from tests.runtime.test_spark_ops import stream
from tests.runtime.test_user_code_edges import steps_for

FIELDS = ("user", "score", "text")
MANY = [("u", i, "t") for i in range(2000)]


def stops(n: int) -> bool:
    if n == 1500:
        raise StopIteration
    return True


class StopsPerTuple(Filter):
    """``StopIteration`` on record 1,500 (a body with an ``if``: called per tuple)."""

    def is_keep(self, tuple_: TridentTuple) -> bool:
        if tuple_[0] == 1500:
            raise StopIteration
        return True


class StopsInlined(Filter):
    """The same from a body that inlines."""

    def is_keep(self, tuple_: TridentTuple) -> bool:
        return stops(tuple_[0])


class StopsEmitting(Function):
    """The same from a function whose ``execute`` inlines."""

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((stops(tuple_[0]),))


class StopsEmittingPerTuple(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        if tuple_[0] == 1500:
            raise StopIteration
        collector.emit((True,))


STOPPING: list[Callable[[], Filter | Function]] = [
    StopsPerTuple, StopsInlined, StopsEmitting, StopsEmittingPerTuple
]  # fmt: skip


def step_of(operation: Filter | Function) -> Any:
    if isinstance(operation, Filter):
        return FilterNode("stops", (), FIELDS, None, operation, ("score",))
    return EachNode("stops", (), (*FIELDS, "ok"), None, operation, ("score",), ("ok",))


def local_error(operation: Filter | Function, rows: list[tuple[Any, ...]], txid: int = 1) -> str:
    t, s = stream()
    if isinstance(operation, Filter):
        s.filter(["score"], operation, name="stops").project(list(FIELDS))
    else:
        s.each(["score"], operation, ["ok"], name="stops").project([*FIELDS, "ok"])
    with pytest.raises(BatchFailedError) as error:
        LocalBatchProcessor(t).process(txid, {"plays": {"p0": rows}})
    return str(error.value)


def batch_of(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    return pa.record_batch({f: [r[i] for r in rows] for i, f in enumerate(FIELDS)})


def schema_of(operation: Filter | Function) -> pa.Schema:
    extra = [] if isinstance(operation, Filter) else [("ok", pa.bool_())]
    return pa.schema([("user", pa.string()), ("score", pa.int64()), ("text", pa.string()),
                      *extra])  # fmt: skip


@pytest.mark.parametrize("make", STOPPING, ids=lambda m: m.__name__)
def test_a_stop_iteration_fails_the_column_path_naming_the_record(make: Any) -> None:
    # Given a filter or function raising StopIteration on record 1,500 of 2,000
    operation = make()
    expected = local_error(make(), MANY)
    segment = PythonSegment(1, (step_of(operation),), (FIELDS,), FIELDS,
                            step_of(operation).fields, schema_of(operation))  # fmt: skip
    assert segment.columnar
    # When the worker's segment runs the batch (column to column, inlined where it inlines)
    with pytest.raises(Exception, match="StopIteration") as error:
        list(segment(iter([batch_of(MANY)])))
    # Then it fails with the local runtime's error, naming the record
    assert str(error.value) == failure_text(BatchFailedError(expected))
    assert "on record ('u', 1500, 't'): StopIteration" in expected
    # And run_columns itself raises it
    with pytest.raises(BatchFailedError) as direct:
        run_columns(batch_of(MANY), segment.ops, segment.out_schema, inlined=segment.inlined(),
                    txid=1, in_fields=segment.in_fields)  # fmt: skip
    assert str(direct.value) == expected


@pytest.mark.parametrize("make", [StopsPerTuple, StopsInlined], ids=lambda m: m.__name__)
def test_a_stop_iteration_fails_the_batch_on_spark(spark: Any, make: Any) -> None:
    # Given a filter raising StopIteration on record 1,500 of 2,000, past the driver's sample
    expected = local_error(make(), MANY)
    t, s = stream()
    s.filter(["score"], make(), name="stops").project(list(FIELDS))
    # When Spark runs the batch
    remote = SparkBatchProcessor(t, sample_rows=10).process(spark, 1, {"plays": {"p0": MANY}})
    with pytest.raises(BatchFailedError) as error:
        remote.output_rows(remote.stages[-1])
    # Then the batch fails with the local runtime's error
    assert str(error.value) == expected


# --- user code that raised is not run again ----------------------------------------------------


def logged(path: str, value: Any) -> None:
    with open(path, "a") as log:
        log.write(f"{os.getpid()} {value}\n")


class RaisesOnce(Function):
    """Raises on score 150 the first time it sees it; writes down every call (pid, score)."""

    def __init__(self, log: str) -> None:
        self.log = log
        self.raised = False

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        logged(self.log, tuple_[0])
        if tuple_[0] == 150 and not self.raised:
            self.raised = True
            raise ValueError("once")
        collector.emit((tuple_[0] * 2,))


class RaisesOnceInlined(RaisesOnce):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((self.twice(tuple_[0]),))

    def twice(self, n: int) -> int:
        logged(self.log, n)
        if n == 150 and not self.raised:
            self.raised = True
            raise ValueError("once")
        return n * 2


class KeepsOnce(Filter):
    def __init__(self, log: str) -> None:
        self.log = log
        self.raised = False

    def is_keep(self, tuple_: TridentTuple) -> bool:
        logged(self.log, tuple_[0])
        if tuple_[0] == 150 and not self.raised:
            self.raised = True
            raise ValueError("once")
        return True


class KeepsOnceInlined(KeepsOnce):
    def is_keep(self, tuple_: TridentTuple) -> bool:
        return self.check(tuple_[0])

    def check(self, n: int) -> bool:
        logged(self.log, n)
        if n == 150 and not self.raised:
            self.raised = True
            raise ValueError("once")
        return True


ONCE = [RaisesOnce, RaisesOnceInlined, KeepsOnce, KeepsOnceInlined]
ROWS = [("u", i, "t") for i in range(300)]


def calls(log: Path, here: bool) -> list[int]:
    """The scores of the calls written down in this process (``here``) or in others."""
    me = str(os.getpid())
    lines = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    return [int(score) for pid, score in lines if (pid == me) == here]


@pytest.mark.parametrize("make", ONCE, ids=lambda m: m.__name__)
def test_the_column_path_does_not_run_a_failed_batch_again(make: Any, tmp_path: Path) -> None:
    # Given a function or filter raising once, on record 150 of 300
    expected = local_error(make(str(tmp_path / "local.log")), ROWS)
    operation = make(str(tmp_path / "columns.log"))
    schema = schema_of(operation)
    if isinstance(operation, Function):
        schema = schema.set(3, pa.field("ok", pa.int64()))
    segment = PythonSegment(1, (step_of(operation),), (FIELDS,), FIELDS,
                            step_of(operation).fields, schema)  # fmt: skip
    # When the worker's segment runs the batch (the column path first)
    with pytest.raises(Exception, match="once") as error:  # the worker's marked failure
        list(segment(iter([batch_of(ROWS)])))
    # Then it fails with the local runtime's error, and each record was called once
    assert str(error.value) == failure_text(BatchFailedError(expected))
    assert calls(tmp_path / "columns.log", here=True) == list(range(151))


@pytest.mark.parametrize("make", ONCE, ids=lambda m: m.__name__)
def test_a_function_raising_once_fails_the_first_attempt_on_spark(
    spark: Any, make: Any, tmp_path: Path
) -> None:
    # Given a function or filter raising once, on record 150 of 300, past the driver's sample
    local_log, spark_log = tmp_path / "local.log", tmp_path / "spark.log"
    expected = local_error(make(str(local_log)), ROWS)
    t, s = stream()
    if issubclass(make, Filter):
        s.filter(["score"], make(str(spark_log)), name="stops").project(list(FIELDS))
    else:
        s.each(["score"], make(str(spark_log)), ["ok"], name="stops").project([*FIELDS, "ok"])
    # When Spark runs the batch
    remote = SparkBatchProcessor(t, sample_rows=1).process(spark, 1, {"plays": {"p0": ROWS}})
    with pytest.raises(BatchFailedError) as error:
        remote.output_rows(remote.stages[-1])
    # Then it fails as in process, and the workers called no record twice, none after 150
    # (Spark may cut the partition in two tasks: the one before 150 may be cancelled)
    assert str(error.value) == expected
    assert calls(local_log, here=True) == list(range(151))
    on_spark = calls(spark_log, here=False)
    assert sorted(on_spark) == sorted(set(on_spark))
    assert max(on_spark) == 150


# --- after a window -------------------------------------------------------------------------

WINDOW_ROWS = {"p0": [(i, i % 4) for i in range(12)]}


class SizeOnce(Filter):
    """Raises the first time it sees a window (a marker file: once across processes)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def is_keep(self, tuple_: TridentTuple) -> bool:
        if not os.path.exists(self.marker):
            Path(self.marker).touch()
            raise ValueError("the first window")
        return True


def windowed_once(name: str, marker: str) -> TridentTopology:
    t = TridentTopology(name)
    (
        t.new_stream("nums", MemoryTransactionalSpout(WINDOW_ROWS, ["seq", "v"], 3))
        .window(
            TumblingCountWindow.of(6),
            sql_window_store(None, table=name),
            ["v"],
            Count(),
            ["size"],
            name="win",
        )
        .filter(["size"], SizeOnce(marker), name="once")
        .persistent_aggregate(
            sql_state(None, f"{name}_sum", "transactional", value_type="bigint"),
            ["size"],
            Sum(),
            ["tuples"],
            name="tuples",
        )
    )
    return t


def failed_attempts(steps: BatchSteps, process: Callable[[BatchSteps, int], Any]) -> list[int]:
    """Txids 1-4, each retried until it processes; the txids whose first attempt failed."""
    failed = []
    for _ in range(4):
        txid = int(steps.begin(None)["txid"])
        try:
            process(steps, txid)
        except BatchFailedError as exc:
            assert "the first window" in str(exc)  # noqa: PT017
            failed.append(txid)
            process(steps, txid)
        assert steps.commit(txid)["applied"] is True
        steps.success(txid)
    assert int(steps.query_state("tuples").get()) == 12
    return failed


@pytest.mark.integration
def test_a_filter_after_a_window_raising_once_fails_the_attempt_on_spark(
    spark: Any, pg_url: str, unique_name: str, tmp_path: Path
) -> None:
    from airflow_trident.batch.on_spark import process_on_spark

    # Given a filter after a window that raises on the first window it sees
    local = steps_for(windowed_once(unique_name, str(tmp_path / "l")), pg_url, tmp_path / "a")
    expected = failed_attempts(local, lambda s, txid: s.process_local(txid))
    assert expected == [2]
    remote_name = f"{unique_name}_s"
    remote = steps_for(windowed_once(remote_name, str(tmp_path / "s")), pg_url, tmp_path / "b")
    # When Spark runs the same batches; Then the first attempt of the same txid fails
    assert failed_attempts(remote, lambda s, txid: process_on_spark(s, spark, txid, 0.0)) == [2]


# --- the driver's type sample ---------------------------------------------------------------


class Counted(Function):
    """Emits how many calls this instance has had (a count kept on ``self``)."""

    def __init__(self) -> None:
        self.calls = 0

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        self.calls += 1
        collector.emit((self.calls,))


def test_the_drivers_sample_leaves_the_shipped_operations_as_they_were(spark: Any) -> None:
    # Given a function counting its calls on self, and one record, or one partition of 6

    def counts(rows: int, runtime: str) -> list[int]:
        t, s = stream()
        s.each(["score"], Counted(), ["n"], name="counted").project(["score", "n"])
        sources = {"plays": {"p0": [("u", i, "t") for i in range(rows)]}}
        if runtime == "local":
            local = LocalBatchProcessor(t).process(1, sources)
            return sorted(r[-1] for part in local.outputs["stage_1"] for r in part)
        # (the driver samples every record first)
        remote = SparkBatchProcessor(t).process(spark, 1, sources)
        return sorted(r[-1] for r in remote.output_rows(remote.stages[-1]))

    # When Spark runs the batch; Then the workers' counts start where the in-process ones do
    assert counts(1, "spark") == counts(1, "local") == [1]
    six = counts(6, "spark")
    assert counts(6, "local") == [1, 2, 3, 4, 5, 6]
    assert (six[0], len(six)) == (1, 6), six  # Spark may cut the partition in two tasks
    assert all(six.count(n) <= six.count(n - 1) for n in six if n > 1), six


class WideFirst(Function):
    """Emits two values for one declared field on its first record (per tuple: an ``if``)."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        self.calls.append(tuple_[0])
        if tuple_[0] == 0:
            collector.emit((1, 2))
        else:
            collector.emit((1,))


def test_an_emit_of_the_wrong_width_stops_the_column_path_at_its_record() -> None:
    # Given a function emitting two values for one field on record 0 (found by the fuzzer)
    expected = local_error(WideFirst(), ROWS)
    function = WideFirst()
    node = EachNode("stops", (), (*FIELDS, "ok"), None, function, ("score",), ("ok",))
    schema = pa.schema([*schema_of(StopsPerTuple()), ("ok", pa.int64())])
    # When the column path runs the batch
    with pytest.raises(BatchFailedError) as error:
        run_columns(batch_of(ROWS), (node,), schema, txid=1, in_fields=(FIELDS,))
    # Then it fails as in process, after that record's call only
    assert str(error.value) == expected
    assert "emitted 2 values (1, 2), declared ['ok']" in expected
    assert function.calls == [0]


class Tells(Function):
    """Writes one line per prepare to ``path`` (an effect outside itself), unless the driver's
    type sample prepares it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def prepare(self, context: Any) -> None:
        with open(self.path, "a") as out:
            out.write("sample\n" if context.type_sample else "batch\n")

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((tuple_[0],))


def test_an_operation_knows_the_drivers_type_sample(spark: Any, tmp_path: Path) -> None:
    # Given a function writing down how it was prepared, and a FailOnce after it
    from airflow_trident.testing.faults import FailOnce

    said = tmp_path / "said.txt"
    marker = tmp_path / "failed_once"
    t, s = stream()
    s.each(["score"], Tells(str(said)), ["n"]).each(["n"], FailOnce(str(marker)), ["m"]).project(
        ["score", "m"]
    )
    sources = {"plays": {"p0": [("u", i, "t") for i in range(4)]}}

    # When Spark runs the batch twice (the first attempt and its retry)
    def attempt() -> list[Any]:
        remote = SparkBatchProcessor(t).process(spark, 1, sources)
        return remote.output_rows(remote.stages[-1])

    with pytest.raises(BatchFailedError, match="injected failure"):
        attempt()
    assert len(attempt()) == 4
    # Then the driver's sample prepared it as a sample, the workers as the batch, and the fault
    # meant for the first attempt failed the first attempt, not the sample
    lines = said.read_text().splitlines()
    assert lines[0] == "sample", lines
    assert "batch" in lines, lines
    assert marker.exists()
