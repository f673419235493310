"""A per-tuple ``execute`` that emits once per record runs as one comprehension
(``operation/inline.py``): the values the function emits when called per tuple, in the same
order, or no inlining at all — and Spark's Python workers run it, with the local runtime's
tuples and errors."""

from __future__ import annotations

import functools
import importlib
import json
import logging
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_trident.errors import BatchFailedError
from airflow_trident.graph import EachNode, FilterNode
from airflow_trident.operation import Filter, Function
from airflow_trident.operation.inline import (
    InlinedExecute,
    InlinedKeep,
    execute_source,
    inline_execute,
    inline_is_keep,
    method_source,
)
from airflow_trident.runtime.local import LocalBatchProcessor
from airflow_trident.runtime.spark import SparkBatchProcessor
from airflow_trident.runtime.spark.python_ops import PythonSegment
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentCollector, TridentTuple
from tests.harness import with_project_path
from tests.runtime.test_column_function import arrow_batches_of
from tests.runtime.test_spark_ops import last_rows, run_both, stream

FIELDS = ("user", "score", "text")
RECORDS = [("ann", 3, "The Cow"), ("bob", -4, ""), ("cid", 0, "a  B"), ("dan", 7, "MOON")]
SCALE = 10


def where() -> str:
    """``inlined`` when called from the comprehension, else the caller's name (``execute``)."""
    name = sys._getframe(1).f_code.co_name
    return "inlined" if name in ("<listcomp>", "execute_inlined") else name


def itself(func: Callable[..., Any]) -> Callable[..., Any]:
    return func


def wrapped(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def run(*args: Any) -> Any:
        return func(*args)

    return run


# --- functions whose execute inlines ---------------------------------------------------------


class Lower(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((tuple_[2].lower(),))


class ByName(Function):
    """Reads by name and by a negative index, through names assigned first."""

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        user, text = tuple_.get("user"), tuple_[-1]
        size = len(text) * SCALE + self.bonus
        collector.emit([f"{user}:{text}", size, math.copysign(1, tuple_.get("score"))])

    bonus = 1


class Dynamic(Function):
    """Emits a sequence made by a method (its width is counted per record)."""

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit(self.pair(tuple_[1]))

    def pair(self, n: int) -> list[int]:
        return [n, n * n]


class Constant(Function):
    """Reads no field."""

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        "A docstring is allowed."
        collector.emit((SCALE,))


class Decorated(Function):
    @itself
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        a, b = tuple_[0], tuple_[1]
        b = b + 1
        collector.emit((a, b))


class Logged(Function):
    """Records every call in order (side effects keep the per-tuple order)."""

    def __init__(self) -> None:
        self.log: list[Any] = []

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((self.log.append(tuple_[0]), len(self.log), where()))


INLINED = [
    (Lower(), 1),
    (ByName(), 3),
    (Dynamic(), 2),
    (Constant(), 1),
    (Decorated(), 2),
    (Logged(), 3),
]


def per_tuple(function: Function, records: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    collector = TridentCollector()
    for record in records:
        function.execute(TridentTuple(record, FIELDS), collector)
    return collector.rows


def inlined_rows(function: Function, width: int) -> list[tuple[Any, ...]]:
    run = inline_execute(function, execute_source(function), FIELDS)
    assert isinstance(run, InlinedExecute)
    columns = [[r[FIELDS.index(f)] for r in RECORDS] for f in run.fields]
    return list(zip(*run(columns, width, len(RECORDS)), strict=True))


@pytest.mark.parametrize(("function", "width"), INLINED, ids=lambda f: type(f).__name__)
def test_an_inlined_execute_emits_what_the_per_tuple_calls_emit(
    function: Function, width: int
) -> None:
    # Given a function whose execute emits once per record, from its tuple's fields
    # When it runs per tuple, then as one comprehension over the columns
    expected = per_tuple(function, RECORDS)
    if isinstance(function, Logged):
        function.log.clear()
        expected = [(*row[:2], "inlined") for row in expected]  # who called where()
    got = inlined_rows(function, width)
    # Then the emitted values are the same, record for record (side effects in order)
    assert got == expected
    if isinstance(function, Logged):
        assert function.log == [r[0] for r in RECORDS]


def test_an_inlined_emit_of_the_wrong_width_is_refused() -> None:
    run = inline_execute(ByName(), execute_source(ByName()), FIELDS)
    assert run is not None
    assert (run.fields, run.width) == (FIELDS, 3)
    with pytest.raises(ValueError, match="2"):
        run([list(column) for column in zip(*RECORDS, strict=True)], 2)
    dynamic = inline_execute(Dynamic(), execute_source(Dynamic()), FIELDS)
    assert dynamic is not None
    assert dynamic.width is None
    with pytest.raises(ValueError, match="3"):
        dynamic([[1, 2]], 3)


# --- functions that do not inline ------------------------------------------------------------


class Twice(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((tuple_[0],))
        collector.emit((tuple_[0],))


class Conditional(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        if tuple_[1] > 0:
            collector.emit((tuple_[0],))


class Whole(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((len(tuple_),))


class Values(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit(tuple_.values)


class Sliced(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit(tuple_[0:1])


class Unknown(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((tuple_.get("nope"),))


class OutOfRange(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((tuple_[3],))


class PassesCollector(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((id(collector),))


class Lambda(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit(((lambda: tuple_[0])(),))


class Comprehension(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit(([c for c in tuple_[2]],))


class Walrus(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit(((n := tuple_[1]), n))


class ReadBeforeAssigned(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        SCALE = SCALE + 1  # noqa: F823 (an UnboundLocalError when called)
        collector.emit((SCALE,))


class Super(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((super().__class__.__name__,))


class Wrapped(Function):
    @wrapped
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((tuple_[0],))


class Default(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector, n: int = 1) -> None:
        collector.emit((n,))


class Augmented(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        n = tuple_[1]
        n += 1
        collector.emit((n,))


class PerInstance(Function):
    def __init__(self) -> None:
        self.execute = lambda t, c: c.emit((1,))  # type: ignore[method-assign]

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((tuple_[0],))


def closure_function() -> Function:
    suffix = "!"

    class Closure(Function):
        def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
            collector.emit((tuple_[0] + suffix,))

    return Closure()


NOT_INLINED = [
    Twice(), Conditional(), Whole(), Values(), Sliced(), Unknown(), OutOfRange(),
    PassesCollector(), Lambda(), Comprehension(), Walrus(), ReadBeforeAssigned(), Super(),
    Wrapped(), Default(), Augmented(), PerInstance(), closure_function(),
]  # fmt: skip


@pytest.mark.parametrize("function", NOT_INLINED, ids=lambda f: type(f).__name__)
def test_any_other_execute_is_not_inlined(function: Function) -> None:
    # Given an execute that emits other than once, reads the tuple or the collector as a
    # whole, opens a scope, reads a name before assigning it, or is not the class's plain
    # function of three parameters
    # Then it is called per tuple
    assert inline_execute(function, execute_source(function), FIELDS) is None


def test_only_the_running_code_is_inlined(tmp_path: Path, monkeypatch: Any) -> None:
    # Given a function imported from a file, which is then edited (a deploy during a run)
    module = tmp_path / "edited_function.py"
    module.write_text(textwrap.dedent("""
        from airflow_trident.operation import Function

        class Shout(Function):
            def execute(self, tuple_, collector):
                collector.emit((tuple_[0].upper(),))
    """))  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    shout = importlib.import_module("edited_function").Shout()
    assert inline_execute(shout, execute_source(shout), FIELDS) is not None
    module.write_text(module.read_text().replace("upper", "lower"))
    # When its source is read again
    source = execute_source(shout)
    assert source is not None
    assert "lower" in source
    # Then the source is not the running code's, and it is not inlined
    assert inline_execute(shout, source, FIELDS) is None
    # And a source read where the class was defined inlines without the file (a worker)
    namespace: dict[str, Any] = {"Function": Function}
    code = "class Exclaim(Function):\n    def execute(self, t, c):\n        c.emit((t[0] + '!',))\n"
    exec(compile(code, "<dag file not on this worker>", "exec"), namespace)
    exclaim = namespace["Exclaim"]()
    assert execute_source(exclaim) is None
    shipped = "def execute(self, t, c):\n    c.emit((t[0] + '!',))\n"
    run = inline_execute(exclaim, shipped, FIELDS)
    assert run is not None
    assert run([["a"]], 1) == [["a!"]]


@pytest.mark.parametrize(
    ("running", "edited"),
    [("n * 2", "n * 2.0"), ("n + 1", "n + True"), ("n * 0.0", "n * -0.0"), ("n in (1, 2)",
     "n in (1.0, 2)"), ("n in {1, 2}", "n in {1, 2.0}"), ("n + 0.0", "n + 0j")],
)  # fmt: skip
def test_constants_equal_in_value_but_not_in_type_are_not_the_running_code(
    tmp_path: Path, monkeypatch: Any, running: str, edited: str
) -> None:
    # Given a function imported from a file, whose constant is then edited to one that
    # compares equal (2 == 2.0 == True) but computes another value
    name = f"edited_constant_{abs(hash((running, edited)))}"
    module = tmp_path / f"{name}.py"
    module.write_text(textwrap.dedent(f"""
        from airflow_trident.operation import Function

        class Scale(Function):
            def execute(self, tuple_, collector):
                n = tuple_.get("score")
                collector.emit((str({running}),))
    """))  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    scale = importlib.import_module(name).Scale()
    assert inline_execute(scale, execute_source(scale), FIELDS) is not None
    module.write_text(module.read_text().replace(running, edited))
    source = execute_source(scale)
    assert source is not None
    assert edited in source
    # When the edited source is checked against the running code; Then it is not inlined
    assert inline_execute(scale, source, FIELDS) is None


def test_an_unforeseen_failure_of_inlining_only_means_per_tuple_calls(monkeypatch: Any) -> None:
    # Given inspect or the compiler failing in a way not foreseen
    import airflow_trident.operation.inline as inline

    source = execute_source(Lower())

    def broken(*args: Any) -> Any:
        raise IndexError("inspect's own failure")

    monkeypatch.setattr(inline.inspect, "getsource", broken)
    # Then there is no source, and nothing is inlined: the function is called per tuple
    assert execute_source(Lower()) is None
    monkeypatch.setattr(inline.ast, "fix_missing_locations", broken)
    assert inline_execute(Lower(), source, FIELDS) is None


# --- filters ---------------------------------------------------------------------------------


class Worded(Filter):
    """Keeps records with a word and a positive score (truthy values, not only bools)."""

    def is_keep(self, tuple_: TridentTuple) -> bool:
        words = tuple_.get("text").split()
        return words and tuple_[1] > 0  # type: ignore[return-value]


class Branching(Filter):
    def is_keep(self, tuple_: TridentTuple) -> bool:
        if tuple_[1] > 0:  # noqa: SIM103 (a branch: not inlined)
            return True
        return False


class WholeTuple(Filter):
    def is_keep(self, tuple_: TridentTuple) -> bool:
        return bool(tuple_.values)


def test_a_filter_of_assignments_and_one_return_is_inlined() -> None:
    # Given a filter whose is_keep is an assignment and one return
    worded = Worded()
    keep = inline_is_keep(worded, method_source(worded, "is_keep"), FIELDS)
    assert isinstance(keep, InlinedKeep)
    # Then the comprehension keeps the records is_keep keeps (returning something true)
    columns = [[r[FIELDS.index(f)] for r in RECORDS] for f in keep.fields]
    kept = [i for i, r in enumerate(RECORDS) if worded.is_keep(TridentTuple(r, FIELDS))]
    assert keep(columns) == kept == [0, 3]
    # And a branching body, or one reading the tuple whole, is called per tuple
    for other in (Branching(), WholeTuple()):
        assert inline_is_keep(other, method_source(other, "is_keep"), FIELDS) is None
    # And an execute is not an is_keep (nor the other way round)
    assert inline_is_keep(Lower(), method_source(Lower(), "execute"), FIELDS) is None


# --- Spark's Python workers -----------------------------------------------------------------

SOURCES = {"plays": {"p0": RECORDS[:2], "p1": [], "p2": RECORDS[2:]}}


class Caller(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((where(),))


class Divide(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((SCALE // tuple_.get("score"),))


@pytest.mark.parametrize("batch_rows", [1, 10_000])
def test_spark_workers_run_the_inlined_execute(
    spark: Any, batch_rows: int, caplog: pytest.LogCaptureFixture
) -> None:
    # Given inlinable functions, fused into one Python step with a per-tuple one
    caplog.set_level(logging.INFO, logger="airflow_trident.runtime.spark.processor")
    t, s = stream()
    s.each(FIELDS, Lower(), ["lower"]).each(FIELDS, ByName(), ["a", "b", "c"]).each(
        ["user", "score"], Dynamic(), ["n", "n2"]
    ).each(["user"], Twice(), ["twice"]).filter(FIELDS, Worded()).each(
        ["user"], Caller(), ["caller"]
    ).project(["user", "lower", "a", "b", "c", "n", "n2", "twice", "caller"])
    # When the batch runs locally and on Spark
    with arrow_batches_of(spark, batch_rows):
        local, remote = run_both(spark, t, SOURCES)
        expected, got = last_rows(local, remote)
    # Then Spark's tuples are the local ones, except who called: the workers' comprehension
    assert sum(got.values()) == 2 * 2  # two records emit twice and pass the filter
    assert got == type(got)(
        {key.replace("'execute'", "'inlined'"): n for key, n in expected.items()}
    )
    assert "'execute'" in next(iter(expected))
    # And the process step's log names the path each step runs on
    paths = [r.getMessage() for r in caplog.records if "Python step(s)" in r.getMessage()]
    assert paths == [
        "txid 1: Python step(s) on Spark's workers, column to column: 'Lower' inlined, "
        "'ByName' inlined, 'Dynamic' inlined, 'Twice' per tuple, 'Worded' inlined, 'Caller' "
        "inlined (docs/api.md)"
    ]


@pytest.mark.parametrize("switch", ["topology", "processor"])
def test_inlining_turned_off_calls_each_tuple_with_the_same_values(
    spark: Any, switch: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given inlinable functions, and inlining turned off for the topology, or by the
    # processor (what [trident] inline = false tells the Spark job)
    caplog.set_level(logging.INFO, logger="airflow_trident.runtime.spark.processor")
    t, s = stream()
    if switch == "topology":
        t = TridentTopology("t", inline=False)
        s = t.new_stream("plays", MemoryTransactionalSpout({"p0": []}, FIELDS, 3))
    s.each(FIELDS, Lower(), ["lower"]).filter(FIELDS, Worded()).each(
        ["user"], Caller(), ["caller"]
    ).project(["user", "lower", "caller"])
    # When the batch runs locally and on Spark
    local = LocalBatchProcessor(t).process(1, SOURCES)
    kwargs = {"inline": False} if switch == "processor" else {}
    remote = SparkBatchProcessor(t, **kwargs).process(spark, 1, SOURCES)
    expected, got = last_rows(local, remote)
    # Then every tuple is the local one, even who called: execute, per tuple
    assert got == expected
    assert "'execute'" in next(iter(got))
    # And the process step's log says so
    paths = [r.getMessage() for r in caplog.records if "Python step(s)" in r.getMessage()]
    assert paths == [
        "txid 1: Python step(s) on Spark's workers, column to column: 'Lower' per tuple, "
        "'Worded' per tuple, 'Caller' per tuple (inlining off) (docs/api.md)"
    ]


def test_the_driver_ships_the_source_and_a_failing_record_is_named(spark: Any) -> None:
    # Given a segment made on the driver with an inlinable function
    divide = EachNode("divide", (), ("score", "q"), None, Divide(), ("score",), ("q",))
    schema = pa.schema([("score", pa.int64()), ("q", pa.int64())])
    segment = PythonSegment(3, (divide,), (("score",),), ("score",), ("score", "q"), schema)
    # Then it carries the source, and the worker inlines it (a filter's too)
    assert segment.inline_sources == (execute_source(divide.function),)
    assert isinstance(segment.inlined()[0], InlinedExecute)
    worded = FilterNode("worded", (), FIELDS, None, Worded(), FIELDS)
    both = PythonSegment(3, (worded, divide), (FIELDS, FIELDS), FIELDS, (*FIELDS, "q"), schema)
    assert [type(f) for f in both.inlined()] == [InlinedKeep, InlinedExecute]
    (out,) = segment(iter([pa.record_batch({"score": [3, -4]})]))
    assert out.column(1).to_pylist() == [3, -3]
    # When a record raises on Spark's workers (0 in the batch, after the driver's sample)
    sources = {"plays": {"p0": [RECORDS[0], RECORDS[2]]}}
    t, s = stream()
    s.each(["score"], Divide(), ["q"], name="divide").project(["user", "q"])
    with pytest.raises(BatchFailedError) as local_error:
        LocalBatchProcessor(t).process(4, sources)
    remote = SparkBatchProcessor(t, sample_rows=1)
    with pytest.raises(BatchFailedError) as spark_error:
        remote.process(spark, 4, sources).output_rows("stage_1")
    # Then the error names the step, the txid and the record, as the local runtime's does
    assert "ZeroDivisionError" in str(local_error.value)
    assert str(spark_error.value) == str(local_error.value).replace("'a  B'", "<pruned>")


NOTEBOOK = '''
import linecache, sys
from airflow_trident.operation import Function

CELL = """
class Tag(Function):
    def execute(self, tuple_, collector):
        user = tuple_.get("user")
        collector.emit((user.upper() + "#" + str(tuple_[1] * SCALE), caller()))
"""
linecache.cache["<notebook cell 7>"] = (len(CELL), None, CELL.splitlines(True), "<notebook cell 7>")
namespace = {"Function": Function, "SCALE": 10,
             "caller": lambda: "inlined" if sys._getframe(1).f_code.co_name in (
                 "<listcomp>", "execute_inlined") else sys._getframe(1).f_code.co_name}
exec(compile(CELL, "<notebook cell 7>", "exec"), namespace)
Tag = namespace["Tag"]
'''

CHILD = """
import json, sys
from airflow_trident.runtime.local import LocalBatchProcessor
from airflow_trident.runtime.spark import SparkBatchProcessor
from airflow_trident.runtime.spark.session import remote_session
from tests.runtime.test_spark_ops import stream
exec(sys.argv[2])
sources = {s: {p: [tuple(r) for r in rows] for p, rows in parts.items()}
           for s, parts in json.loads(sys.argv[3]).items()}
t, s = stream()
s.each(["user", "score"], Tag(), ["tag", "caller"]).project(["user", "tag", "caller"])
local = LocalBatchProcessor(t).process(1, sources)
with remote_session(sys.argv[1]) as spark:
    remote = SparkBatchProcessor(t).process(spark, 1, sources)
    rows = sorted(map(list, remote.output_rows(remote.stages[-1])))
print(json.dumps({"local": sorted(list(r) for p in local.outputs[remote.stages[-1]] for r in p),
                  "spark": rows}))
"""


def test_spark_connect_workers_inline_a_function_whose_source_only_the_client_has(
    connect_url: str,
) -> None:
    # Given a function defined in a notebook cell: its source is in the client's linecache
    # only, and Spark Connect's workers get the class by value
    # When the batch runs in process and through a Spark Connect server (a child process: a
    # remote session cannot share this process with the shared classic one)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_CONNECT")}
    done = subprocess.run(  # the session-wide Connect server (tests/conftest.py)
        [sys.executable, "-c", CHILD, connect_url, NOTEBOOK, json.dumps(SOURCES)],
        env=with_project_path(env), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # Then the workers ran the comprehension, and every tuple is the in-process one
    assert {row[2] for row in result["spark"]} == {"inlined"}
    assert {row[2] for row in result["local"]} == {"execute"}
    assert [r[:2] for r in result["spark"]] == [r[:2] for r in result["local"]]
    assert ["ann", "ANN#30"] in [r[:2] for r in result["spark"]]
