"""Differential fuzzing of user code over every path (issue 33): in process (the reference),
Spark's row path, its column path (per tuple) and the inlined path (one comprehension) give the
same tuples in the same order, or the same error naming the same record — and call the user's
code the same times, with the same values.

Hypothesis writes ``Function`` and ``Filter`` classes into a module of their own (so their
source can be read and inlined): bodies within the inlinable grammar (assignments, then one
emit or return; reads by index or ``get``; arithmetic, string, comparison and boolean
expressions; module globals, ``self`` attributes and methods; a helper raising ``ValueError``
or ``StopIteration`` on some values; a result whose truthiness raises) and just outside it (an
``if``, a loop emitting twice, a comprehension), over awkward data (``None``, NaN and
infinities, ``-0.0``, huge ints, unicode, nested lists and dicts, empty batches, batches of one
and batches cut into several Arrow batches).

The paths run without Spark through the worker's own segment (``PythonSegment``): its column
path with inlining on and off, and its row path; a few examples run on Spark ``local[2]``.
``TRIDENT_FUZZ_EXAMPLES`` sets the number of examples (default: a short profile of a few dozen;
``bash scripts/fuzz.sh`` runs 10,000, and the aggregators' and windows' properties of
tests/runtime/test_aggregator_fuzz.py).
"""

from __future__ import annotations

import hashlib
import importlib
import math
import os
import pickle
import sys
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from airflow_trident.errors import TridentError  # noqa: E402
from airflow_trident.graph import EachNode, FilterNode  # noqa: E402
from airflow_trident.runtime.local import LocalBatchProcessor  # noqa: E402
from airflow_trident.runtime.spark.columns import infer_type, rows_from_batch  # noqa: E402
from airflow_trident.runtime.spark.python_ops import PythonSegment, batch_failure  # noqa: E402
from airflow_trident.spout.memory import MemoryTransactionalSpout  # noqa: E402
from airflow_trident.topology import TridentTopology  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")  # generated code, meant as is

EXAMPLES = int(os.environ.get("TRIDENT_FUZZ_EXAMPLES", "40"))
SPARK_EXAMPLES = max(1, int(os.environ.get("TRIDENT_FUZZ_SPARK_EXAMPLES", "4")))
FIELDS = ("a", "b", "s", "l", "h", "d")
PICKLED = frozenset({"h", "d"})  # huge ints and dicts travel pickled, as the runtime does
SCHEMA = pa.schema([
    ("a", pa.int64()), ("b", pa.float64()), ("s", pa.string()), ("l", pa.list_(pa.int64())),
    ("h", pa.binary()), ("d", pa.binary()),
])  # fmt: skip
MODULES = Path(os.environ.get("TRIDENT_FUZZ_DIR", "/tmp/trident-fuzz-modules"))

# -- data ---------------------------------------------------------------------------------------

ints = st.one_of(st.none(), st.integers(-3, 7), st.sampled_from([2**62, -(2**63)]))
floats = st.one_of(
    st.none(), st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 0.0, 1.5, -2.25, 1e308])
)
texts = st.one_of(st.none(), st.text(alphabet="aZé€😀 \t\x00", max_size=4))
lists = st.one_of(st.none(), st.lists(st.integers(-2, 3), max_size=3))
huge = st.one_of(st.none(), st.integers(-(2**200), 2**200), st.just(10**400))
dicts = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(["k", "é", "n"]), st.one_of(st.integers(-1, 2), st.none(),
                    st.lists(st.integers(0, 1), max_size=2)), max_size=2),
)  # fmt: skip
records = st.tuples(ints, floats, texts, lists, huge, dicts)
batches = st.lists(records, max_size=12)

# -- code -------------------------------------------------------------------------------------

READS = [f"tuple_[{i}]" for i in range(len(FIELDS))] + [
    f'tuple_.get("{f}")' for f in FIELDS
] + ["tuple_[-1]"]  # fmt: skip
CONSTANTS = ["0", "1", "2", "-1", "2.5", '"x"', '"é"', "None", "True", "K", "self.k"]


def expressions(names: list[str]) -> st.SearchStrategy[str]:
    leaves = st.sampled_from(READS + CONSTANTS + names)

    def grow(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        unary = st.sampled_from([
            "-({})", "not ({})", "str({})", "len({})", "abs({})", "helper({})", "self.note({})",
            "repr({})", "({})[0]", "({}).upper()", "({}) * 2", "({}) ** 2", "bool({})",
            "math.isnan({})", "({}) is None",
        ])  # fmt: skip
        binary = st.sampled_from([
            "({}) + ({})", "({}) - ({})", "({}) / ({})", "({}) // ({})", "({}) % ({})",
            "({}) == ({})", "({}) < ({})", "({}) and ({})", "({}) or ({})",
            "({}).get({})", "str({}) + str({})",
        ])  # fmt: skip
        return st.one_of(
            st.builds(lambda f, e: f.format(e), unary, inner),
            st.builds(lambda f, x, y: f.format(x, y), binary, inner, inner),
            st.builds(lambda c, x, y: f"(({x}) if ({c}) else ({y}))", inner, inner, inner),
        )

    return st.recursive(leaves, grow, max_leaves=5)


@st.composite
def user_code(draw: Any) -> tuple[str, str, int, bool]:
    """(kind, body, declared width, inside the inlinable grammar)."""
    kind = draw(st.sampled_from(["function", "filter"]))
    names: list[str] = []
    lines = []
    for i in range(draw(st.integers(0, 2))):
        lines.append(f"v{i} = {draw(expressions(names))}")
        names.append(f"v{i}")
    inside = True
    shape = draw(st.sampled_from(["plain"] * 4 + ["if", "loop", "comprehension"]))
    width = 1
    if kind == "function":
        emit = draw(st.sampled_from(["one", "two", "dynamic", "list"]))
        if emit == "one":
            last = f"collector.emit(({draw(expressions(names))},))"
        elif emit == "two":
            last = f"collector.emit(({draw(expressions(names))}, {draw(expressions(names))}))"
            width = 2
        elif emit == "dynamic":  # its width known per record (and maybe not iterable)
            last = f"collector.emit({draw(expressions(names))})"
        else:
            last = f"collector.emit([{draw(expressions(names))}])"
        width = draw(st.sampled_from([width, width, 1, 2]))  # sometimes not what is emitted
    else:
        value = draw(expressions(names))
        last = f"return Truth({value})" if draw(st.booleans()) else f"return {value}"
    if shape == "if":
        inside = False
        lines.append(f"if {draw(expressions(names))}:")
        lines.append(f"    {last}")
        lines.append(f"collector.emit((None,) * {width})" if kind == "function" else "return 0")
    elif shape == "loop" and kind == "function":
        inside = False
        lines += ["for _ in range(2):", f"    {last}"]
    elif shape == "comprehension":
        inside = False
        lines += [f"w = [x for x in [{draw(expressions(names))}]]", last]
    else:
        lines.append(last)
    return kind, "\n".join(lines), width, inside


MODULE = """
import math
from airflow_trident.operation import Filter, Function

K = {k}


def helper(x):
    if x == {stop}:
        raise StopIteration
    if isinstance(x, str) and len(x) == {bad_len}:
        raise ValueError(f"bad {{x!r}}")
    return x


class Truth:
    def __init__(self, x):
        self.x = x

    def __bool__(self):
        if self.x is None:
            raise ValueError("no truth")
        return bool(self.x)


class Op({base}):
    def __init__(self):
        self.log = []
        self.k = {self_k}

    def note(self, x):
        self.log.append(repr(x))
        return x

    def {method}(self, tuple_{collector}):
{body}
"""


def module_of(kind: str, body: str, k: str, stop: str, bad_len: int, self_k: str) -> Any:
    source = MODULE.format(
        k=k, stop=stop, bad_len=bad_len, self_k=self_k,
        base="Function" if kind == "function" else "Filter",
        method="execute" if kind == "function" else "is_keep",
        collector=", collector" if kind == "function" else "",
        body=textwrap.indent(body, " " * 8),
    )  # fmt: skip
    name = "fuzz_" + hashlib.sha1(source.encode()).hexdigest()[:16]
    MODULES.mkdir(parents=True, exist_ok=True)
    path = MODULES / f"{name}.py"
    if not path.exists():
        path.write_text(source)
    if str(MODULES) not in sys.path:
        sys.path.insert(0, str(MODULES))
    with warnings.catch_warnings():  # e.g. "is" with a literal: what the code means is fine
        warnings.simplefilter("ignore", SyntaxWarning)
        return importlib.import_module(name)


# -- paths ------------------------------------------------------------------------------------

Outcome = tuple[Any, ...]
TXID = 7


def step(op: Any, kind: str, width: int) -> EachNode | FilterNode:
    if kind == "filter":
        return FilterNode("fuzzed", (), FIELDS, None, op, FIELDS)
    outs = tuple(f"o{i}" for i in range(width))
    return EachNode("fuzzed", (), (*FIELDS, *outs), None, op, FIELDS, outs)


def canonical(rows: list[tuple[Any, ...]]) -> str:
    return repr([tuple(r) for r in rows])


def in_process(module: Any, kind: str, width: int, rows: list[tuple[Any, ...]]) -> Outcome:
    op = module.Op()
    t = TridentTopology("fuzz")
    s = t.new_stream("src", MemoryTransactionalSpout({"p0": []}, FIELDS, 1))
    if kind == "filter":
        s.filter(list(FIELDS), op, name="fuzzed")
    else:
        s.each(list(FIELDS), op, [f"o{i}" for i in range(width)], name="fuzzed")
    try:
        result = LocalBatchProcessor(t).process(TXID, {"src": {"p0": rows}})
    except TridentError as exc:
        return ("error", type(exc).__name__, str(exc), op.log)
    (out,) = list(result.outputs.values())[-1]
    return ("ok", canonical(out), op.log)


def segment_of(module: Any, kind: str, width: int, inline: bool) -> PythonSegment:
    node = step(module.Op(), kind, width)
    outs = node.fields[len(FIELDS) :]
    schema = pa.schema([*SCHEMA, *(pa.field(o, pa.binary()) for o in outs)])
    return PythonSegment(TXID, (node,), (FIELDS,), FIELDS, node.fields, schema, PICKLED,
                         PICKLED | frozenset(outs), inline=inline)  # fmt: skip


def arrow(rows: list[tuple[Any, ...]], cuts: list[int]) -> Iterator[pa.RecordBatch]:
    """``rows`` as Arrow batches cut at ``cuts`` (an empty batch when there are no rows)."""
    bounds = sorted({0, len(rows), *(c for c in cuts if 0 < c < len(rows))})
    for start, end in zip(bounds, bounds[1:] or [0], strict=False):
        yield batch_of(rows[start:end])
    if not rows:
        yield batch_of([])


def batch_of(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    columns = []
    for i, field in enumerate(SCHEMA):
        values = [r[i] for r in rows]
        if field.name in PICKLED:
            values = [None if v is None else pickle.dumps(v) for v in values]
        columns.append(pa.array(values, field.type))
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def on_worker(segment: PythonSegment, batches: list[pa.RecordBatch], rows_path: bool) -> Outcome:
    """The segment as a Spark task runs it: column to column, or (``rows_path``) row by row."""
    op = segment.ops[0]
    out: list[tuple[Any, ...]] = []
    try:
        if rows_path:
            steps = segment.steps()
            with segment.prepared():
                for batch in batches:
                    out += segment.run_rows(segment._rows(batch), steps)
        else:
            for made in segment(iter(batches)):
                out += rows_from_batch(made, segment.out_fields, segment.pickled_out)
    except TridentError as exc:
        return ("error", type(exc).__name__, str(exc), _log(op))
    except Exception as exc:  # the worker's marked failure, as the driver decodes it
        error = batch_failure(exc, TXID)
        return ("error", type(error).__name__, str(error), _log(op))
    return ("ok", canonical(out), _log(op))


def _log(op: Any) -> list[str]:
    operation = op.function if isinstance(op, EachNode) else op.filter
    return list(operation.log)


# -- the property -----------------------------------------------------------------------------

globals_ = st.sampled_from(["3", "0", "-1", '"k"', "None", "2.0", "[1, 2]", "{'k': 1}"])
case = st.tuples(
    user_code(), globals_, st.sampled_from(["3", "None", '"x"', "0"]), st.integers(0, 2),
    globals_, batches, st.lists(st.integers(1, 11), max_size=3),
)  # fmt: skip


def check(example: Any) -> tuple[Outcome, PythonSegment]:
    (kind, body, width, inside), k, stop, bad_len, self_k, data, cuts = example
    module = module_of(kind, body, k, stop, bad_len, self_k)
    rows = rows_from_batch(batch_of(data), FIELDS, PICKLED)  # values as Arrow gives them back
    reference = in_process(module, kind, width, rows)
    batches = list(arrow(data, cuts))
    inlined = segment_of(module, kind, width, inline=True)
    if inside:  # the grammar above is the inliner's: it inlines
        assert inlined.inlined()[0] is not None, body
    paths = {
        "column path": on_worker(segment_of(module, kind, width, False), batches, False),
        "inlined path": on_worker(inlined, batches, False),
        "row path": on_worker(segment_of(module, kind, width, False), batches, True),
    }
    for path, outcome in paths.items():
        assert outcome == reference, f"{path} differs from in process for\n{body}\n{data!r}"
    return reference, inlined


@settings(
    max_examples=EXAMPLES, deadline=None, database=None, derandomize=EXAMPLES <= 100,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)  # fmt: skip
@given(case)
def test_every_path_gives_the_in_process_tuples_errors_and_calls(example: Any) -> None:
    check(example)


def test_the_fuzzer_reaches_errors_truthiness_and_both_sides_of_the_grammar() -> None:
    # a fixed example of each kind the property is about, so the short profile covers them
    seen: dict[str, int] = {}

    @settings(max_examples=40, deadline=None, database=None, derandomize=True)
    @given(case)
    def collect(example: Any) -> None:
        (_, _, _, inside), *_ = example
        outcome, _ = check(example)
        key = f"{'inside' if inside else 'outside'} {outcome[0]}"
        seen[key] = seen.get(key, 0) + 1
        if outcome[0] == "error":
            named = "on record" in outcome[2]
            seen["named" if named else "unnamed"] = seen.get("named" if named else "unnamed", 0) + 1

    collect()
    assert {"inside ok", "inside error", "outside ok", "named"} <= set(seen), seen


@settings(
    max_examples=SPARK_EXAMPLES, deadline=None, database=None,
    derandomize="TRIDENT_FUZZ_SEED" not in os.environ,  # scripts/fuzz.sh: --hypothesis-seed
    phases=[Phase.generate],  # no shrinking: each Spark example takes seconds
)  # fmt: skip
@given(case)
def test_spark_gives_the_in_process_tuples_and_errors(spark: Any, example: Any) -> None:
    on_spark(spark, example, declared=None)


def declared_types(module: Any, width: int, rows: list[Any], typed: bool) -> dict[str, Any]:
    """``output_types`` for the outputs: ``object`` (any value, pickled), or (``typed``) the
    Arrow type of the values the in-process run emits, where one holds them unchanged."""
    outs = [f"o{i}" for i in range(width)]
    t = TridentTopology("fuzz")
    s = t.new_stream("src", MemoryTransactionalSpout({"p0": []}, FIELDS, 1))
    s.each(list(FIELDS), module.Op(), outs, name="fuzzed")
    try:
        result = LocalBatchProcessor(t).process(TXID, {"src": {"p0": rows}})
    except TridentError:
        typed = False
    if not typed:
        return dict.fromkeys(outs, object)
    (emitted,) = list(result.outputs.values())[-1]
    found = {}
    for i, name in enumerate(outs):
        values = [r[len(FIELDS) + i] for r in emitted]
        type_ = infer_type(values)
        one_kind = len({type(v) for v in values if v is not None}) == 1
        exact = isinstance(type_, pa.DataType) and one_kind and not pa.types.is_nested(type_)
        found[name] = type_ if exact else object
    return found


@settings(
    max_examples=SPARK_EXAMPLES, deadline=None, database=None,
    derandomize="TRIDENT_FUZZ_SEED" not in os.environ,
    phases=[Phase.generate],
)  # fmt: skip
@given(case, st.booleans())
def test_spark_with_declared_types_gives_the_in_process_tuples_and_errors(
    spark: Any, example: Any, typed: bool
) -> None:
    # declared output types: the driver runs none of the user's code (docs/api.md), and the
    # tuples and errors are the in-process ones, with no sample-inferred type to refuse a value
    on_spark(spark, example, declared=typed)


def on_spark(spark: Any, example: Any, declared: bool | None) -> None:
    """Spark against in process; ``declared``: with ``output_types`` (typed or ``object``)."""
    from pyspark import cloudpickle

    from airflow_trident.runtime.spark import SparkBatchProcessor, processor

    (kind, body, width, _), k, stop, bad_len, self_k, data, _ = example
    module = module_of(kind, body, k, stop, bad_len, self_k)
    cloudpickle.register_pickle_by_value(module)  # the workers have no such file
    rows = rows_from_batch(batch_of(data), FIELDS, PICKLED)
    reference = in_process(module, kind, width, rows)
    t = TridentTopology("fuzz")
    s = t.new_stream("src", MemoryTransactionalSpout({"p0": []}, FIELDS, 1))
    op = module.Op()
    if declared is not None and kind == "function":
        op.output_types = declared_types(module, width, rows, declared)
    if kind == "filter":
        s.filter(list(FIELDS), op, name="fuzzed")
    else:
        s.each(list(FIELDS), op, [f"o{i}" for i in range(width)], name="fuzzed")
    sampled = []
    real_sample = processor.type_sample

    def spied() -> Any:
        sampled.append(True)
        return real_sample()

    processor.type_sample = spied  # type: ignore[assignment]
    try:
        remote = SparkBatchProcessor(t, sample_rows=100).process(spark, TXID, {"src": {"p0": rows}})
        got: Outcome = ("ok", canonical(remote.output_rows(remote.stages[-1])))
    except TridentError as exc:
        got = ("error", type(exc).__name__, str(exc))
    finally:
        processor.type_sample = real_sample
    if declared is not None or kind == "filter":
        assert not sampled, f"the driver sampled declared code\n{body}"
    elif got[0] == "error" and "inferred from a sample" in got[2]:
        return  # a value the inferred Arrow type refuses: docs/api.md, output_types
    if reference[0] == "ok" or got[0] == "ok" or len(rows) <= 1:
        assert got == reference[:-1], f"Spark differs from in process for\n{body}\n{data!r}"
    else:  # Spark may cut the batch in two tasks: the first failing one names its record
        assert got[:2] == reference[:2]
        assert got[2].split(" on record")[0] == reference[2].split(" on record")[0]
