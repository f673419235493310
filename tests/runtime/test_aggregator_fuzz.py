"""Differential fuzzing of aggregators and windows over every path (issue 33, item 4): in
process (the reference), Spark's row path (the worker's ``PythonSegment`` over Arrow batches,
stage after stage), Spark SQL (the built-in ``Count``/``Sum``/``Min``/``Max``) and whole
batches on Spark ``local[2]`` give the same tuples and staged state values, or the same error.

Hypothesis writes ``CombinerAggregator``, ``ReducerAggregator`` and ``Aggregator`` classes into
a module of their own (as tests/runtime/test_user_code_fuzz.py does for functions): shapes a
user writes (a count, a sum, a min/max skipping ``None``, a set of values, a sorted
collection; an ``Aggregator`` keeping a list or a dict, emitting in ``complete``, per tuple, or
not at all) and shapes outside them (expressions drawn at random over the values: ``None +
1``, a non-commutative ``combine``, a helper raising ``ValueError`` or ``StopIteration`` on some
values, an emit of another width), over the awkward data of the function fuzzer (``None``, NaN
and infinities, ``-0.0``, int64's extremes, huge ints, unicode, nested lists and dicts), in
empty batches, batches of one record and partitions cut into several Arrow batches; grouped
(by ints, floats with NaN, strings, huge ints) and global; ``partition_aggregate``,
``aggregate``, ``group_by().aggregate``, ``persistent_aggregate`` (grouped or not) and chained
aggregators. Windows (tumbling/sliding by count, by duration over generated event times with a
lag, in processing time on a clock the test sets) run the same aggregators across batches.

What may differ, by contract (docs/api.md), and is not a difference here: the order of the
tuples of different partitions after a repartition (so grouped results and whole-batch results
of order-sensitive aggregators are compared as multisets; order-sensitive aggregators over
several partitions are compared only on their error), and, when several records fail on Spark,
which one's error comes first (then the error's kind and step must match).

``TRIDENT_FUZZ_EXAMPLES`` sets the number of examples of the properties without Spark and of
the datasets Spark SQL aggregates (default: a short profile); ``TRIDENT_FUZZ_SPARK_EXAMPLES``
the whole batches on Spark. ``bash scripts/fuzz.sh`` runs the long profile.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import importlib
import itertools
import math
import os
import re
import sys
import textwrap
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from unittest import mock

import pyarrow as pa
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from airflow_trident.errors import TridentError  # noqa: E402
from airflow_trident.graph import WindowNode  # noqa: E402
from airflow_trident.operation import Count, Max, Min, Sum  # noqa: E402
from airflow_trident.operation.window import (  # noqa: E402
    SlidingCountWindow,
    SlidingDurationWindow,
    TumblingCountWindow,
    TumblingDurationWindow,
    WindowConfig,
)
from airflow_trident.planner.plan import PersistSink, Stage  # noqa: E402
from airflow_trident.planner.planner import build_plan  # noqa: E402
from airflow_trident.runtime.local import LocalBatchProcessor  # noqa: E402
from airflow_trident.runtime.repartition import repartition  # noqa: E402
from airflow_trident.runtime.result import Partitions  # noqa: E402
from airflow_trident.runtime.spark.columns import rows_from_batch, rows_to_batch  # noqa: E402
from airflow_trident.runtime.spark.liveness import op_inputs  # noqa: E402
from airflow_trident.runtime.spark.python_ops import (  # noqa: E402
    SENTINEL,
    PythonSegment,
    batch_failure,
)
from airflow_trident.spout.memory import MemoryTransactionalSpout  # noqa: E402
from airflow_trident.state.memory import memory_state  # noqa: E402
from airflow_trident.state.window import sql_window_store  # noqa: E402
from airflow_trident.topology import TridentTopology  # noqa: E402
from tests.runtime.test_user_code_fuzz import (  # noqa: E402
    FIELDS,
    MODULES,
    PICKLED,
    SCHEMA,
    batch_of,
    dicts,
    huge,
    lists,
    texts,
)

pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")  # generated code, meant as is

# the short profile of the test command: ~10 s without Spark, a few Spark jobs
EXAMPLES = int(os.environ.get("TRIDENT_FUZZ_EXAMPLES", "40"))
WINDOW_EXAMPLES = int(os.environ.get("TRIDENT_FUZZ_EXAMPLES", "20"))
SPARK_EXAMPLES = max(1, int(os.environ.get("TRIDENT_FUZZ_SPARK_EXAMPLES", "2")))
SPARK_WINDOW_EXAMPLES = max(1, int(os.environ.get("TRIDENT_FUZZ_SPARK_EXAMPLES", "1")))
# the same examples every run, unless scripts/fuzz.sh gives a chunk its seed (--hypothesis-seed)
DERANDOMIZE = "TRIDENT_FUZZ_SEED" not in os.environ
TXID = 7
Row = tuple[Any, ...]
Outcome = tuple[Any, ...]

# -- data ---------------------------------------------------------------------------------------
# Floats whose sums are exact in any order (a float sum over 1e308 depends on the order, which a
# repartition does not keep), with NaN, the infinities and -0.0; int64's extremes (a sum of two
# overflows int64 and stays exact in Python).

ints = st.one_of(st.none(), st.integers(-3, 7), st.sampled_from([2**62, -(2**63), 2**63 - 1]))
floats = st.one_of(
    st.none(), st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 0.0, 1.5, -2.25, 0.5])
)
records = st.tuples(ints, floats, texts, lists, huge, dicts)
partitions = st.lists(st.lists(records, max_size=7), min_size=1, max_size=3)

# -- code -------------------------------------------------------------------------------------

UNARY = [
    "-({})", "not ({})", "str({})", "len({})", "abs({})", "helper({})", "self.note({})",
    "repr({})", "({})[0]", "({}) * 2", "bool({})", "({}) is None", "int({})", "float({})",
]  # fmt: skip
BINARY = [
    "({}) + ({})", "({}) - ({})", "({}) / ({})", "({}) // ({})", "({}) % ({})", "({}) == ({})",
    "({}) < ({})", "({}) and ({})", "({}) or ({})", "max({}, {})", "min({}, {})",
    "str({}) + str({})", "[{}, {}]", "({}, {})",
]  # fmt: skip
CONSTANTS = ["0", "1", "-1", "2.5", '"x"', "None", "True", "K", "self.k", "()", "[]"]


def expressions(leaves: Sequence[str]) -> st.SearchStrategy[str]:
    """Python expressions over ``leaves`` and constants, a few operators deep."""

    def grow(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.builds(lambda f, e: f.format(e), st.sampled_from(UNARY), inner),
            st.builds(lambda f, x, y: f.format(x, y), st.sampled_from(BINARY), inner, inner),
        )

    return st.recursive(st.sampled_from([*leaves, *CONSTANTS]), grow, max_leaves=4)


def reads(width: int) -> list[str]:
    """How an aggregator reads a tuple of ``width`` input fields."""
    return [f"tuple_[{i}]" for i in range(width)] + ["tuple_[-1]", "tuple_.values"]


@dataclass(frozen=True)
class AggCode:
    """A generated aggregator: its class's body, the values it emits per result, and whether
    its results are a function of the multiset of its tuples (then a repartition's order
    cannot change them)."""

    kind: str  # combiner, reducer, aggregator, or a built-in's name
    body: str
    width: int
    commutative: bool
    shape: str


# user shapes: (init, combine, zero, commutative); {x} is the first input value
COMBINERS = {
    "count": ("1", "val1 + val2", "0", True),
    "sum": ("0 if {x} is None else {x}", "val1 + val2", "0", True),
    "sum_raw": ("{x}", "val1 + val2", "0", True),
    "min": (
        "{x}", "val2 if val1 is None else (val1 if val2 is None else min(val1, val2))", "None",
        True,
    ),
    "set": ("frozenset([repr({x})])", "val1 | val2", "frozenset()", True),
    "count_and_sum": (
        "(1, 0 if {x} is None else {x})", "(val1[0] + val2[0], val1[1] + val2[1])", "(0, 0)",
        True,
    ),
    "helper": ("helper({x})", "val1 + val2", "0", True),
    "concat": ("[{x}]", "val1 + val2", "[]", False),
    "text": ("str({x})", "val1 + val2", '""', False),
}  # fmt: skip
# (init, reduce, commutative)
REDUCERS = {
    "count": ("0", "curr + 1", True),
    "sum": ("0", "curr + (0 if {x} is None else {x})", True),
    "sorted": ("()", "tuple(sorted(curr + (repr({x}),)))", True),
    "collect": ("[]", "curr + [{x}]", False),
    "helper": ("0", "curr + len(str(helper({x})))", True),
}
# (init, aggregate, complete, width, commutative)
AGGREGATORS = {
    "count": ("return [0]", "state[0] += 1", "collector.emit((state[0],))", 1, True),
    "keys": (
        "return {}", "state[repr({x})] = state.get(repr({x}), 0) + 1\nreturn state",
        "collector.emit((sorted(state.items()),))", 1, True,
    ),
    "per_tuple": (
        "return None", "collector.emit((helper({x}),))", "pass", 1, True,
    ),
    "batch_and_pairs": (
        "collector.emit((batch_id, 0))\nreturn []", "state.append({x})",
        "collector.emit((len(state), repr(sorted(map(repr, state)))))", 2, True,
    ),
    "half_or_count": (
        "return [0]", "state[0] += 1", "collector.emit((state[0] / 2 if state[0] % 2 == 0 else "
        "state[0],))", 1, True,
    ),
    "first": (
        "return []", "state.append({x})", "if state:\n    collector.emit((state[0],))", 1, False,
    ),
    "none_or_two": (
        "return [0]", "state[0] += 1",
        "for i in range(state[0] % 3):\n    collector.emit((i,))", 1, True,
    ),
}  # fmt: skip


def _def(signature: str, body: str) -> str:
    return f"def {signature}:\n{textwrap.indent(body, '    ')}\n"


@st.composite
def aggregator_code(draw: Any, width: int, builtins: bool = True) -> AggCode:
    """A generated aggregator over ``width`` input fields."""
    x = draw(st.sampled_from(reads(width)))
    kinds = ["combiner", "reducer", "aggregator"] + (["builtin"] if builtins else [])
    kind = draw(st.sampled_from(kinds))
    wild = draw(st.integers(0, 4)) == 0  # outside the shapes: expressions drawn at random
    if kind == "builtin":
        name = draw(st.sampled_from(["Count", "Sum", "Min", "Max"]))
        return AggCode(name, "", 1, True, name)
    if kind == "combiner":
        shape = draw(st.sampled_from(sorted(COMBINERS)))
        init, combine, zero, commutative = COMBINERS[shape]
        init = init.format(x=x)
        if wild:
            init = draw(expressions(reads(width)))
            combine = draw(expressions(["val1", "val2"]))
            zero = draw(st.sampled_from(CONSTANTS))
            commutative, shape = False, "wild"
        body = (
            _def("init(self, tuple_)", f"return {init}")
            + _def("combine(self, val1, val2)", f"return {combine}")
            + _def("zero(self)", f"return {zero}")
        )
        return AggCode("combiner", body, 1, commutative, shape)
    if kind == "reducer":
        shape = draw(st.sampled_from(sorted(REDUCERS)))
        init, reduce_, commutative = REDUCERS[shape]
        reduce_ = reduce_.format(x=x)
        if wild:
            init = draw(st.sampled_from(CONSTANTS))
            reduce_ = draw(expressions([*reads(width), "curr"]))
            commutative, shape = False, "wild"
        body = _def("init(self)", f"return {init}") + _def(
            "reduce(self, curr, tuple_)", f"return {reduce_}"
        )
        return AggCode("reducer", body, 1, commutative, shape)
    shape = draw(st.sampled_from(sorted(AGGREGATORS)))
    init, aggregate, complete, out, commutative = AGGREGATORS[shape]
    aggregate = aggregate.format(x=x)
    if wild:
        value = draw(expressions([*reads(width), "state"]))
        aggregate = draw(st.sampled_from([f"state.append({value})", f"return {value}"]))
        emitted = draw(expressions(["state"]))
        complete = f"collector.emit(({emitted},))"
        init, out, commutative, shape = "return []", 1, False, "wild"
    out = draw(st.sampled_from([out] * 4 + [out + 1]))  # sometimes declared another width
    body = (
        _def("init(self, batch_id, collector)", init)
        + _def("aggregate(self, state, tuple_, collector)", aggregate)
        + _def("complete(self, state, collector)", complete)
    )
    return AggCode("aggregator", body, out, commutative, shape)


MODULE = """
import math
from airflow_trident.operation import Aggregator, CombinerAggregator, ReducerAggregator

K = {k}


def helper(x):
    if x == {stop}:
        raise StopIteration
    if isinstance(x, str) and len(x) == {bad_len}:
        raise ValueError(f"bad {{x!r}}")
    return x


class Op({base}):
    def __init__(self):
        self.log = []
        self.k = {self_k}

    def note(self, x):
        self.log.append(repr(x))
        return x

{body}
"""
BASES = {"combiner": "CombinerAggregator", "reducer": "ReducerAggregator",
         "aggregator": "Aggregator"}  # fmt: skip
BUILTINS = {"Count": Count, "Sum": Sum, "Min": Min, "Max": Max}


def module_of(code: AggCode, k: str, stop: str, bad_len: int, self_k: str) -> Any:
    """The module of ``code``'s class ``Op`` (written once per source, importable by Spark's
    workers by value)."""
    source = MODULE.format(
        k=k, stop=stop, bad_len=bad_len, self_k=self_k, base=BASES.get(code.kind, "object"),
        body=textwrap.indent(code.body, "    "),
    )  # fmt: skip
    name = "fuzz_agg_" + hashlib.sha1(source.encode()).hexdigest()[:16]
    MODULES.mkdir(parents=True, exist_ok=True)
    path = MODULES / f"{name}.py"
    if not path.exists():
        path.write_text(source)
    if str(MODULES) not in sys.path:
        sys.path.insert(0, str(MODULES))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        return importlib.import_module(name)


@dataclass(frozen=True)
class Example:
    """One generated aggregation: its code, where it runs and over which fields."""

    code: AggCode
    module: Any
    shape: str  # partition, global, grouped, persist, persist_global, chained
    inputs: tuple[str, ...]
    keys: tuple[str, ...]

    def aggregator(self) -> Any:
        if self.code.kind in BUILTINS:
            return BUILTINS[self.code.kind]()
        return self.module.Op()

    @property
    def outs(self) -> list[str]:
        return [f"o{i}" for i in range(self.code.width)]

    @property
    def ordered(self) -> bool:
        """Whether its tuples reach the aggregator in the in-process order on Spark too."""
        return self.shape == "partition"


SHAPES = ["partition", "global", "grouped", "persist", "persist_global", "chained"]
KEYS = ["a", "b", "s", "h"]  # ints, floats (NaN, -0.0), strings, huge ints (pickled)


@st.composite
def modules(draw: Any, code: AggCode) -> Any:
    """``code``'s module, with its globals and helper drawn."""
    return module_of(
        code,
        k=draw(st.sampled_from(["3", "0", '"k"', "None", "2.0"])),
        stop=draw(st.sampled_from(["3", "None", '"x"', "0"])),
        bad_len=draw(st.integers(0, 2)),
        self_k=draw(st.sampled_from(["1", "None", '"s"'])),
    )


@st.composite
def examples(draw: Any, shapes: Sequence[str] = tuple(SHAPES)) -> Example:
    inputs = tuple(draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=2, unique=True)))
    code = draw(aggregator_code(len(inputs)))
    shape = draw(st.sampled_from(shapes))
    if shape in ("persist", "persist_global") and code.kind == "aggregator":
        shape = "global"  # a state aggregates with a combiner or a reducer
    if shape == "chained" and code.width != 1:
        shape = "global"
    keys: tuple[str, ...] = ()
    if shape in ("grouped", "persist"):
        keys = tuple(draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=2, unique=True)))
    module = None if code.kind in BUILTINS else draw(modules(code))
    return Example(code, module, shape, inputs, keys)


def topology(example: Example, name: str, n_partitions: int) -> tuple[TridentTopology, Any]:
    """The example's topology and its aggregator instance (whose ``log`` records its calls)."""
    t = TridentTopology(name)
    spout = MemoryTransactionalSpout({f"p{i}": [] for i in range(n_partitions)}, FIELDS, 1)
    s = t.new_stream("src", spout)
    agg = example.aggregator()
    inputs, outs = list(example.inputs), example.outs
    if example.shape == "partition":
        s.partition_aggregate(inputs, agg, outs, name="agg")
    elif example.shape == "global":
        s.aggregate(inputs, agg, outs, name="agg")
    elif example.shape == "grouped":
        s.group_by(list(example.keys)).aggregate(inputs, agg, outs, name="agg")
    elif example.shape == "chained":
        s.chained_agg().aggregate([], Count(), ["n"]).aggregate(inputs, agg, outs).chain_end(
            name="agg"
        )
    else:
        grouped = s.group_by(list(example.keys)) if example.shape == "persist" else s
        state = memory_state(f"{name}_state", "transactional")
        grouped.persistent_aggregate(state, inputs, agg, outs, name="agg")
    return t, agg


# -- outcomes -----------------------------------------------------------------------------------
# A path's outcome: ("ok", rows, {state: staged rows}, calls) or ("error", kind, message, calls);
# the calls (the aggregator's ``log``) are known where the path runs in this process.


def canon(value: Any) -> Any:
    """``value`` made comparable by ``repr``: a set's members sorted (a set iterates in its
    hashes' order); everything else as it is (``repr`` tells 1 from 1.0, -0.0 from 0.0, a
    tuple from a list; NaN is ``nan``)."""
    if isinstance(value, frozenset | set):
        return (type(value).__name__, sorted(repr(canon(v)) for v in value))
    if isinstance(value, tuple):
        return tuple(canon(v) for v in value)
    if isinstance(value, list):
        return [canon(v) for v in value]
    if isinstance(value, dict):
        return {repr(canon(k)): canon(v) for k, v in value.items()}
    return value


def shown(rows: Sequence[Sequence[Any]], ordered: bool) -> list[str]:
    """``rows`` as text, in their order or (not ``ordered``) as a multiset."""
    texts = [repr(canon(tuple(r))) for r in rows]
    return texts if ordered else sorted(texts)


def formed(outcome: Outcome, ordered: bool, calls: bool = True) -> Outcome:
    """``outcome`` comparable: rows as text (staged states as multisets), with or without the
    calls."""
    if outcome[0] != "ok":
        return outcome[:3] + (outcome[3:] if calls else ())
    states = {name: shown(rows, False) for name, rows in outcome[2].items()}
    return ("ok", shown(outcome[1], ordered), states) + (outcome[3:] if calls else ())


def error_of(exc: TridentError) -> Outcome:
    return ("error", type(exc).__name__, str(exc))


def records_of(parts: list[list[Row]]) -> dict[str, list[Row]]:
    """The partitions as the spout emits them, each value as Arrow gives it back."""
    return {f"p{i}": rows_from_batch(batch_of(rows), FIELDS, PICKLED) for i, rows in
            enumerate(parts)}  # fmt: skip


def last_and_staged(
    plan: Any, outputs: dict[str, Partitions], staged: dict[str, Any]
) -> tuple[list[Row], dict[str, list[Row]]]:
    """The last stage's tuples and each staged state's rows."""
    last = plan.phase("process")[-1]
    out = [r for part in outputs[last.id] for r in part]
    states = {name: [r for part in s.partitions for r in part] for name, s in staged.items()}
    return out, states


# -- in process ---------------------------------------------------------------------------------


def in_process(example: Example, parts: list[list[Row]], name: str) -> Outcome:
    t, agg = topology(example, name, len(parts))
    processor = LocalBatchProcessor(t)
    try:
        result = processor.process(TXID, {"src": records_of(parts)})
    except TridentError as exc:
        return (*error_of(exc), getattr(agg, "log", []))
    out, states = last_and_staged(processor.plan, result.outputs, result.staged)
    return ("ok", out, states, getattr(agg, "log", []))


# -- Spark's row path, stage after stage, without Spark -----------------------------------------


class _Task:
    """Stands for Spark's ``TaskContext`` in a worker: the partition a segment runs for."""

    def __init__(self, index: int) -> None:
        self.index = index

    def partitionId(self) -> int:  # Spark's name
        return self.index


@dataclass(frozen=True)
class _States:
    """What a ``PythonSegment`` opens states with (``StateResolver``'s interface)."""

    topology: str
    open: Callable[[str], Any]

    def __call__(self, name: str) -> Any:
        return self.open(name)


@dataclass(frozen=True)
class Source:
    """The spout's Arrow schema and which of its columns travel pickled."""

    schema: pa.Schema
    pickled: frozenset[str]


SOURCE = Source(SCHEMA, PICKLED)


def _arrow_in(
    rows: list[Row],
    fields: Sequence[str],
    typed: Source | None,
    sentinel: bool,
    cuts: Sequence[int],
) -> list[pa.RecordBatch]:
    """A partition's rows as the Arrow batches a Python step gets: the spout's columns
    (``typed``) or pickled ones, cut at ``cuts``, after a sentinel row if asked."""
    schema = typed.schema if typed else pa.schema([(f, pa.binary()) for f in fields])
    pickled = typed.pickled if typed else frozenset(fields)
    if sentinel:
        schema = schema.append(pa.field(SENTINEL, pa.bool_()))
        fields = (*fields, SENTINEL)
        rows = [(*([None] * (len(fields) - 1)), True), *((*r, False) for r in rows)]
    bounds = sorted({0, len(rows), *(c for c in cuts if 0 < c < len(rows))})
    batches = [
        rows_to_batch(rows[a:b], tuple(fields), schema, pickled)
        for a, b in itertools.pairwise(bounds)
    ]
    return batches or [rows_to_batch([], tuple(fields), schema, pickled)]


def _segment_rows(
    stage: Stage,
    rows: list[Row],
    index: int,
    typed: Source | None,
    cuts: Sequence[int],
    states: _States,
    txid: int,
) -> list[Row]:
    """Partition ``index`` of ``stage`` as a Spark task runs it: its ops fused into one
    ``PythonSegment`` over Arrow batches, every output field pickled."""
    from airflow_trident.runtime.spark import inputs
    from airflow_trident.runtime.spark.processor import _needs_sentinel

    ops = list(stage.ops)
    if ops and isinstance(ops[0], PersistSink) and ops[0].kind == "combine":
        ops[0] = inputs.combined(ops[0])  # as the Spark runtime runs a combiner's sink
    if not ops:
        return rows
    fields = op_inputs(stage)
    out_fields = ops[-1].fields
    sentinel = any(_needs_sentinel(op, False) for op in ops)
    segment = PythonSegment(
        txid, tuple(ops), tuple(fields), fields[0], out_fields,
        pa.schema([(f, pa.binary()) for f in out_fields]),
        typed.pickled if typed else frozenset(fields[0]), frozenset(out_fields), whole=True,
        sentinel=sentinel, states=states,  # type: ignore[arg-type]
    )  # fmt: skip
    batches = _arrow_in(rows, fields[0], typed, sentinel, cuts)
    with mock.patch("airflow_trident.runtime.spark.python_ops.TaskContext") as task:
        task.get.return_value = _Task(index)
        made = list(segment(iter(batches)))
    return [r for b in made for r in rows_from_batch(b, out_fields, frozenset(out_fields))]


def on_workers(
    t: TridentTopology,
    sources: dict[str, list[Row]],
    cuts: Sequence[int],
    txid: int = TXID,
    states: Callable[[str], Any] | None = None,
    source: Source = SOURCE,
) -> tuple[dict[str, Partitions], dict[str, list[Row]]]:
    """The plan's stages as Spark's Python workers run them, in the in-process order: each
    partition of a stage through the stage's ``PythonSegment`` (its Arrow batches cut at
    ``cuts``), the repartitions between stages as the local runtime does them. Returns each
    stage's output partitions and each staged state's rows."""
    plan = build_plan(t)
    done: dict[str, Partitions] = {}
    staged: dict[str, list[Row]] = {}
    resolve = _States(t.name, states or (lambda name: None))
    for stage in plan.phase("process"):
        if stage.source is not None:
            parts = [list(rows) for _, rows in sorted(sources.items())] or [[]]
        else:
            (inp,) = stage.inputs
            parts = done[inp.stage]
            how = inp.repartition
            if how is not None:
                fields = plan.stage(inp.stage).fields
                keys = [fields.index(f) for f in how.key_fields]
                n = stage.parallelism or 1
                parts = repartition(parts, how.method, keys, n, how.partitioner)
        typed = source if stage.source is not None else None
        done[stage.id] = [
            _segment_rows(stage, rows, i, typed, cuts, resolve, txid)
            for i, rows in enumerate(parts)
        ]
        if stage.sink is not None:
            index = [stage.fields.index(f) for f in stage.sink.fields]
            out = [tuple(r[i] for i in index) for p in done[stage.id] for r in p]
            staged[stage.sink.node.state] = out
    return done, staged


def worker_error(exc: Exception, txid: int) -> Outcome:
    """A worker's failure as the driver raises it."""
    if isinstance(exc, TridentError):
        return error_of(exc)
    return error_of(batch_failure(exc, txid))  # the worker's marked error, decoded


def on_row_path(
    example: Example, parts: list[list[Row]], cuts: Sequence[int], name: str
) -> Outcome:
    t, agg = topology(example, name, len(parts))
    try:
        done, staged = on_workers(t, records_of(parts), cuts)
    except Exception as exc:
        return (*worker_error(exc, TXID), getattr(agg, "log", []))
    out = [r for part in done[build_plan(t).phase("process")[-1].id] for r in part]
    return ("ok", out, staged, getattr(agg, "log", []))


# -- aggregations without Spark -----------------------------------------------------------------

case = st.tuples(examples(), partitions, st.lists(st.integers(1, 8), max_size=3))


@settings(
    max_examples=EXAMPLES, deadline=None, database=None, derandomize=DERANDOMIZE,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)  # fmt: skip
@given(case)
def test_the_row_path_gives_the_in_process_tuples_state_errors_and_calls(example: Any) -> None:
    agg, parts, cuts = example
    reference = formed(in_process(agg, parts, "fuzz_agg"), ordered=True)
    event(f"{agg.code.kind} {agg.shape}: {reference[0]}")
    got = formed(on_row_path(agg, parts, cuts, "fuzz_agg"), ordered=True)
    assert got == reference, f"the row path differs from in process for\n{agg}\n{parts!r}"


def test_the_fuzzer_reaches_every_kind_shape_and_outcome() -> None:
    # a fixed set of examples: the short profile covers what the properties are about
    seen: set[str] = set()

    @settings(max_examples=100, deadline=None, database=None, derandomize=True)
    @given(case)
    def collect(example: Any) -> None:
        agg, parts, _ = example
        outcome = in_process(agg, parts, "fuzz_agg")
        seen.update({agg.shape, outcome[0], f"{agg.code.kind} {outcome[0]}"})

    collect()
    wanted = {"combiner ok", "reducer ok", "aggregator ok", "error", "grouped", "persist"}
    assert wanted <= seen, seen


# -- windows ------------------------------------------------------------------------------------

WINDOW_FIELDS = (*FIELDS, "ts")
WINDOW_SOURCE = Source(SCHEMA.append(pa.field("ts", pa.binary())), PICKLED | {"ts"})
times = st.one_of(
    st.integers(0, 30),
    st.sampled_from([0.5, 2.5, 7.25, 12.0]),
    st.sampled_from([None, math.nan, math.inf, "7", datetime.datetime(1970, 1, 1, 0, 0, 9,
                                                                      tzinfo=datetime.UTC)]),
)  # fmt: skip
window_records = st.tuples(ints, floats, texts, lists, huge, dicts, times)


class Clock:
    """A processing-time clock the test sets before each batch (pickled with the window's
    config, so Spark's workers read the batch's time too)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


CLOCK = Clock()


@st.composite
def window_configs(draw: Any) -> WindowConfig:
    kind = draw(st.sampled_from(["tumbling_count", "sliding_count", "tumbling_duration",
                                 "sliding_duration"]))  # fmt: skip
    if kind == "tumbling_count":
        return TumblingCountWindow.of(draw(st.integers(1, 4)))
    if kind == "sliding_count":
        length = draw(st.integers(1, 4))
        return SlidingCountWindow.of(length, draw(st.integers(1, length)))
    length = draw(st.sampled_from([1, 2.5, 5, 10]))
    time_: dict[str, Any] = {"clock": CLOCK}  # processing time
    if draw(st.booleans()):  # event time
        time_ = {"timestamp_field": "ts", "lag": draw(st.sampled_from([0, 0, 1.5]))}
    if kind == "tumbling_duration":
        return TumblingDurationWindow.of(length, **time_)
    slide = draw(st.sampled_from([x for x in [0.5, 1, 2.5, 5, 10] if x <= length]))
    return SlidingDurationWindow.of(length, slide, **time_)


@dataclass(frozen=True)
class WindowExample:
    """A window over generated batches: ``batches[txid - 1][partition]`` are the records, and
    the processing time of txid ``t`` is ``clocks[t - 1]``."""

    config: WindowConfig
    code: AggCode
    module: Any
    inputs: tuple[str, ...]
    batches: list[list[list[Row]]]
    clocks: list[float]
    global_: bool

    def aggregator(self) -> Any:
        if self.code.kind in BUILTINS:
            return BUILTINS[self.code.kind]()
        return self.module.Op()


@st.composite
def window_examples(draw: Any) -> WindowExample:
    inputs = tuple(draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=2, unique=True)))
    code = draw(aggregator_code(len(inputs)))
    module = None if code.kind in BUILTINS else draw(modules(code))
    n = draw(st.integers(1, 2))
    batch = st.lists(st.lists(window_records, max_size=4), min_size=n, max_size=n)
    batches = draw(st.lists(batch, min_size=1, max_size=4))
    steps = st.lists(st.sampled_from([0, 0.5, 3, 11]), min_size=len(batches),
                     max_size=len(batches))  # fmt: skip
    clocks = list(itertools.accumulate(draw(steps)))
    config = draw(window_configs())
    return WindowExample(config, code, module, inputs, batches, clocks, draw(st.booleans()))


def window_topology(example: WindowExample, store: Any) -> TridentTopology:
    t = TridentTopology(f"w_{uuid.uuid4().hex[:12]}")
    n = len(example.batches[0])
    spout = MemoryTransactionalSpout({f"p{i}": [] for i in range(n)}, WINDOW_FIELDS, 1)
    s = t.new_stream("src", spout)
    if example.global_:
        s = s.global_()
    outs = [f"o{i}" for i in range(example.code.width)]
    s.window(example.config, store, list(example.inputs), example.aggregator(), outs, name="win")
    return t


def window_stage(t: TridentTopology) -> str:
    """The stage the window runs in."""
    plan = build_plan(t)
    return next(s.id for s in plan.phase("process") if any(isinstance(o, WindowNode) for o in
                                                            s.ops))  # fmt: skip


def window_sources(parts: list[list[Row]]) -> dict[str, list[Row]]:
    """A batch's partitions as the spout emits them, values as Arrow gives them back (a time
    travels pickled: any value)."""
    out = {}
    for i, rows in enumerate(parts):
        batch = rows_to_batch(rows, WINDOW_FIELDS, WINDOW_SOURCE.schema, WINDOW_SOURCE.pickled)
        out[f"p{i}"] = rows_from_batch(batch, WINDOW_FIELDS, WINDOW_SOURCE.pickled)
    return out


def window_runs(
    example: WindowExample, run: Callable[[int, dict[str, list[Row]]], Outcome]
) -> list[Outcome]:
    """Each txid's outcome of ``run(txid, sources)`` at its processing time, up to the first
    error (the window takes txids in order: the next would wait for it)."""
    outcomes: list[Outcome] = []
    for txid, (parts, now) in enumerate(zip(example.batches, example.clocks, strict=True), 1):
        CLOCK.now = now
        outcomes.append(run(txid, window_sources(parts)))
        if outcomes[-1][0] != "ok":
            break
    return outcomes


def window_in_process(example: WindowExample, store: Any) -> list[Outcome]:
    t = window_topology(example, store)
    processor, stage = LocalBatchProcessor(t), window_stage(t)

    def run(txid: int, sources: dict[str, list[Row]]) -> Outcome:
        try:
            result = processor.process(txid, {"src": sources})
        except TridentError as exc:
            return error_of(exc)
        return ("ok", [r for part in result.outputs[stage] for r in part])

    return window_runs(example, run)


def window_on_workers(example: WindowExample, store: Any, cuts: Sequence[int]) -> list[Outcome]:
    """The txids through the workers' ``PythonSegment`` of each stage (a window's partition is
    its task's); a txid that succeeds is processed twice (a retried task) and must give the
    same results again."""
    from airflow_trident.runtime.commit import query_state

    t = window_topology(example, store)
    stage = window_stage(t)

    def once(txid: int, sources: dict[str, list[Row]]) -> Outcome:
        try:
            done, _ = on_workers(t, sources, cuts, txid, lambda name: query_state(t, name),
                                 WINDOW_SOURCE)  # fmt: skip
        except Exception as exc:
            return worker_error(exc, txid)
        return ("ok", [r for part in done[stage] for r in part])

    def run(txid: int, sources: dict[str, list[Row]]) -> Outcome:
        first = once(txid, sources)
        if first[0] == "ok":
            again = once(txid, sources)
            assert windows_formed([again], True) == windows_formed([first], True), txid
        return first

    return window_runs(example, run)


def windows_formed(outcomes: list[Outcome], ordered: bool) -> list[Outcome]:
    return [("ok", shown(o[1], ordered)) if o[0] == "ok" else o for o in outcomes]


window_case = st.tuples(window_examples(), st.lists(st.integers(1, 4), max_size=2))


@settings(
    max_examples=WINDOW_EXAMPLES, deadline=None, database=None, derandomize=DERANDOMIZE,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)  # fmt: skip
@given(window_case)
def test_windows_on_the_row_path_give_the_in_process_results_and_errors(example: Any) -> None:
    window, cuts = example
    store = sql_window_store("sqlite://", table="fuzz_window")
    reference = windows_formed(window_in_process(window, store), True)
    event(f"{type(window.config).__name__}: {' '.join(o[0] for o in reference)}")
    got = windows_formed(window_on_workers(window, store, cuts), True)
    assert got == reference, f"the row path differs from in process for\n{window}"


# -- on Spark -----------------------------------------------------------------------------------


@contextlib.contextmanager
def arrow_batches_of(spark: Any, rows: int) -> Iterator[None]:
    """Spark's Python steps get Arrow batches of at most ``rows`` records (a partition of a
    few records comes in several batches)."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, str(rows))
    try:
        yield
    finally:
        spark.conf.set(key, before)


def on_spark(
    spark: Any,
    t: TridentTopology,
    sources: dict[str, list[Row]],
    txid: int = TXID,
    sample_rows: int = 100,
    stage: str | None = None,
) -> Outcome:
    """A batch through ``SparkBatchProcessor``: a stage's tuples (the last one's by default)
    and every staged state's rows, or the batch's error."""
    from airflow_trident.runtime.spark import SparkBatchProcessor

    processor = SparkBatchProcessor(t, sample_rows=sample_rows)
    outputs = [stage] if stage else []
    try:
        with processor.process(spark, txid, {"src": sources}, outputs=outputs) as remote:
            out = remote.output_rows(stage or remote.stages[-1])
            staged = {name: remote.collect(name).partitions[0] for name in remote.staged}
    except TridentError as exc:
        return error_of(exc)
    return ("ok", out, staged)


def register(module: Any) -> None:
    """Spark's workers get the generated module by value (they have no such file)."""
    from pyspark import cloudpickle

    if module is not None:
        cloudpickle.register_pickle_by_value(module)


def sampled_type_refused(outcome: Outcome) -> bool:
    """A value the Arrow type inferred from the driver's sample refuses: the batch fails on
    Spark, by contract (docs/api.md: declare ``output_types``)."""
    return outcome[0] == "error" and "inferred from a sample" in outcome[2]


def float_zero_sum(outcome: Outcome) -> Outcome:
    """``outcome`` as Spark SQL gives a built-in ``Sum`` over a float field (the last column)
    of no values: ``0.0``, the column's type, where in process it is ``0`` (docs/api.md)."""
    if outcome[0] != "ok":
        return outcome

    def floated(rows: list[Row]) -> list[Row]:
        zero = [r[-1] == 0 and type(r[-1]) is int for r in rows]
        return [(*r[:-1], 0.0) if z else r for r, z in zip(rows, zero, strict=True)]

    states = {name: floated(rows) for name, rows in outcome[2].items()}
    return ("ok", floated(outcome[1]), states, *outcome[3:])


def beyond_int64(outcome: Outcome) -> bool:
    """Whether a value of the last column (a built-in ``Sum``) does not fit int64: on Spark SQL
    the batch fails saying so, by contract (docs/api.md)."""
    rows = [*outcome[1], *(r for rows in outcome[2].values() for r in rows)]
    return outcome[0] == "ok" and any(
        type(r[-1]) is int and not -(2**63) <= r[-1] < 2**63 for r in rows
    )


def sum_left_int64(outcome: Outcome) -> bool:
    return outcome[0] == "error" and "the sum leaves int64" in outcome[2]


def unpruned(got: list[Outcome], want: list[Outcome]) -> list[Outcome]:
    """``got`` with each error that names its record with the fields no later step reads shown
    as ``<pruned>`` (on Spark, by contract: docs/api.md) worded as ``want``'s, if it is the
    same error on the same record."""
    out = []
    for g, w in itertools.zip_longest(got, want):
        if g is not None and w is not None and g[0] == w[0] == "error" and "<pruned>" in g[2]:
            pattern = ".*?".join(re.escape(part) for part in g[2].split("<pruned>"))
            if g[:2] == w[:2] and re.fullmatch(pattern, w[2], re.DOTALL):
                g = w
        if g is not None:
            out.append(g)
    return out


def same_error(got: Outcome, want: Outcome) -> bool:
    """The same kind of error from the same step (when records of several Spark tasks fail,
    the first failing task's error is Spark's; Spark cuts a batch into its own partitions
    before a repartition, so a combiner's error may come from its per-partition half
    ``'<step>.partial'`` or its final half)."""

    def step(o: Outcome) -> str:
        return o[2].split(":")[0].replace(".partial'", "'")

    return got[:2] == want[:2] and step(got) == step(want)


spark_case = st.tuples(examples(), partitions, st.sampled_from([1, 100]), st.integers(1, 3))


@settings(
    max_examples=SPARK_EXAMPLES, deadline=None, database=None, derandomize=DERANDOMIZE,
    phases=[Phase.generate], suppress_health_check=list(HealthCheck),
)  # fmt: skip
@given(spark_case)
def test_spark_aggregates_as_in_process(spark: Any, example: Any) -> None:
    agg, parts, sample_rows, batch_rows = example
    register(agg.module)
    name = f"fuzz_agg_{uuid.uuid4().hex[:8]}"
    reference = in_process(agg, parts, name)
    with arrow_batches_of(spark, batch_rows):
        got = on_spark(spark, topology(agg, name, len(parts))[0], records_of(parts), TXID,
                       sample_rows)  # fmt: skip
    if sampled_type_refused(got) or (agg.code.kind == "Sum" and sum_left_int64(got)):
        assert not sum_left_int64(got) or beyond_int64(reference), got
        event("not compared: a type from the sample refused, or a Sum beyond int64")
        return
    what = f"Spark differs from in process for\n{agg}\n{parts!r}"
    # before a repartition Spark cuts the batch into partitions of its own (but for
    # partition_aggregate): tuples reach an aggregator in another order, and another task's
    # error may come first
    several = len(parts) > 1 or agg.shape != "partition"
    if reference[0] == "error" and got[0] == "error" and several:
        event("compared: the error's kind and step")
        assert same_error(got, reference), what
    elif several and not agg.code.commutative:
        event("not compared: order-sensitive over several partitions")
        return  # an order-sensitive result (or error): Spark ran it, without a crash
    else:
        ordered = not several
        event(f"compared: {reference[0]}, {'in order' if ordered else 'as a multiset'}")
        wanted = [formed(reference, ordered, calls=False)]
        if agg.code.kind == "Sum" and agg.inputs[0] == "b":
            wanted.append(formed(float_zero_sum(reference), ordered, calls=False))
        assert formed(got, ordered) in wanted, what


# Spark SQL's aggregations (the built-ins over typed columns): many datasets per Spark job, each
# a group of its own (its index is the first group field)
NATIVE_BATCH = 50
NATIVE_JOBS = max(1, EXAMPLES // NATIVE_BATCH)
NATIVE_FIELDS = {"Count": ["a", "b", "s", "l", "h", "d"], "Sum": ["a", "b", "h"],
                 "Min": ["a", "b", "s", "h"], "Max": ["a", "b", "s", "h"]}  # fmt: skip


def random_record(rnd: Any, extremes: bool) -> Row:
    """A record of the ``records`` pools, drawn by ``rnd`` (a job's datasets are too large for
    hypothesis to draw); int64's extremes only if ``extremes`` (a sum beyond int64 fails the
    whole job on Spark SQL)."""

    def pick(*pools: Callable[[], Any]) -> Any:
        return rnd.choice(pools)()

    big = [2**62, -(2**63)] if extremes else [0]
    a = pick(lambda: None, lambda: rnd.randint(-3, 7), lambda: rnd.choice(big))
    b = pick(lambda: None, lambda: rnd.choice([math.nan, math.inf, -math.inf, -0.0, 0.0, 1.5,
                                               -2.25, 0.5]))  # fmt: skip
    s = pick(lambda: None, lambda: "".join(rnd.choices("aZé€😀 \t\x00", k=rnd.randint(0, 3))))
    lst = pick(lambda: None, lambda: [rnd.randint(-2, 3) for _ in range(rnd.randint(0, 3))])
    h = pick(lambda: None, lambda: rnd.randint(-(2**200), 2**200), lambda: 10**400,
             lambda: rnd.randint(-2, 2))  # fmt: skip
    d = pick(lambda: None, lambda: {rnd.choice("kén"): rnd.choice([None, 1, [0]])})
    return (a, b, s, lst, h, d)


@st.composite
def native_jobs(draw: Any) -> tuple[str, str, tuple[str, ...], bool, list[list[list[Row]]]]:
    builtin = draw(st.sampled_from(sorted(NATIVE_FIELDS)))
    field = draw(st.sampled_from(NATIVE_FIELDS[builtin]))
    keys = tuple(draw(st.lists(st.sampled_from(KEYS), max_size=2, unique=True)))
    n = draw(st.integers(1, 3))
    rnd = draw(st.randoms(use_true_random=False))
    extremes = draw(st.integers(0, 3)) == 0
    datasets = [[[random_record(rnd, extremes) for _ in range(rnd.choice([0, 1, 1, 2, 3, 6]))]
                 for _ in range(n)] for _ in range(NATIVE_BATCH)]  # fmt: skip
    return builtin, field, keys, draw(st.booleans()), datasets


def native_topology(
    builtin: str, field: str, keys: tuple[str, ...], persist: bool, n: int, name: str
) -> TridentTopology:
    t = TridentTopology(name)
    spout = MemoryTransactionalSpout({f"p{i}": [] for i in range(n)}, ("ex", *FIELDS), 1)
    grouped = t.new_stream("src", spout).group_by(["ex", *keys])
    agg = BUILTINS[builtin]()
    if persist:
        state = memory_state(f"{name}_state", "transactional")
        grouped.persistent_aggregate(state, [field], agg, ["o0"], name="agg")
    else:
        grouped.aggregate([field], agg, ["o0"], name="agg")
    return t


@settings(
    max_examples=NATIVE_JOBS, deadline=None, database=None, derandomize=DERANDOMIZE,
    phases=[Phase.generate], suppress_health_check=list(HealthCheck),
)  # fmt: skip
@given(native_jobs())
def test_spark_sql_aggregates_as_in_process(spark: Any, job: Any) -> None:
    builtin, field, keys, persist, datasets = job
    n = len(datasets[0])
    sources: dict[str, list[Row]] = {f"p{i}": [] for i in range(n)}
    for ex, parts in enumerate(datasets):
        for p, rows in records_of(parts).items():
            sources[p] += [(ex, *r) for r in rows]
    name = f"fuzz_native_{uuid.uuid4().hex[:8]}"
    processor = LocalBatchProcessor(native_topology(builtin, field, keys, persist, n, name))
    result = processor.process(TXID, {"src": sources})
    reference = ("ok", *last_and_staged(processor.plan, result.outputs, result.staged))
    got = on_spark(spark, native_topology(builtin, field, keys, persist, n, name), sources)
    if builtin == "Sum" and field == "b":
        reference = float_zero_sum(reference)
    if builtin == "Sum" and field == "a" and beyond_int64(reference):
        assert sum_left_int64(got), got
        return
    what = f"Spark SQL differs from in process: {builtin}({field}) by {keys}, persist={persist}"
    assert formed(got, False) == formed(reference, False), what


window_spark_case = st.tuples(window_examples(), st.integers(1, 3))


@settings(
    max_examples=SPARK_WINDOW_EXAMPLES, deadline=None, database=None, derandomize=DERANDOMIZE,
    phases=[Phase.generate], suppress_health_check=list(HealthCheck),
)  # fmt: skip
@given(window_spark_case)
def test_windows_on_spark_give_the_in_process_results_and_errors(
    spark: Any, pg_url: str, example: Any
) -> None:
    window, batch_rows = example
    register(window.module)
    store = sql_window_store(pg_url, table="fuzz_window")  # Spark's workers reach it
    reference = window_in_process(window, store)
    t = window_topology(window, store)
    stage = window_stage(t)

    ordered = len(window.batches[0]) == 1  # the partitions' results in Spark's order

    def run(txid: int, sources: dict[str, list[Row]]) -> Outcome:
        first = on_spark(spark, t, sources, txid, 100, stage)
        if first[0] == "ok":  # a retried process task: the window's stored results again
            again = on_spark(spark, t, sources, txid, 100, stage)
            # compared as text: a NaN is not equal to another NaN object
            assert windows_formed([again[:2]], ordered) == windows_formed([first[:2]], ordered)
        return first[:2] if first[0] == "ok" else first

    with arrow_batches_of(spark, batch_rows):
        got = window_runs(window, run)
    what = f"Spark differs from in process for\n{window}"
    got = unpruned(got, reference)
    event(f"{type(window.config).__name__}: {' '.join(o[0] for o in reference)}")
    assert windows_formed(got, ordered) == windows_formed(reference, ordered), what
