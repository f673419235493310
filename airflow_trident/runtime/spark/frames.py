"""A stage's tuples on Spark (:class:`Frame`) and the Arrow/Spark schema of Python steps.

A frame pairs the DataFrame with what Spark cannot know: the stage's fields (the DataFrame only
holds those still read: see ``liveness``), which columns are pickled, whether its partitions are
the batch's partitions, and a *sample*: the local runtime's rows for the first tuples of each
source partition, computed on the driver alongside. The sample gives Python steps their output
types (Arrow inference, or an operation's ``output_types``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_type

from airflow_trident.errors import ConfigurationError
from airflow_trident.graph import (
    AggPart,
    AggregateNode,
    EachNode,
    MapNode,
    PersistNode,
    StateQueryNode,
    WindowNode,
)
from airflow_trident.planner.plan import FinalAgg, Op, PartialAgg
from airflow_trident.runtime.result import Partitions
from airflow_trident.runtime.spark.arrow_types import arrow_type
from airflow_trident.runtime.spark.columns import PICKLED, _Pickled, infer_type
from airflow_trident.runtime.spark.compile import ROW
from airflow_trident.tuple import Fields

__all__ = [
    "Frame",
    "OutputSchema",
    "PendingAgg",
    "Sample",
    "output_schema",
    "produced_fields",
    "undeclared",
]


@dataclass(frozen=True)
class PendingAgg:
    """A built-in partial aggregation left to Spark's ``groupBy`` in the next stage."""

    node: AggregateNode | PersistNode
    pre: Frame


class Sample:
    """A frame's sample rows, computed when first read: a plan of built-in steps only (Spark
    SQL all the way to the staging) never reads them, so never computes them.

    >>> s = Sample(lambda: [[("cow",)]]); s.rows
    [[('cow',)]]
    >>> Sample([[]]).rows
    [[]]
    """

    __slots__ = ("_compute", "_rows")

    def __init__(self, rows: Partitions | Callable[[], Partitions]) -> None:
        self._rows: Partitions | None = None if callable(rows) else rows
        self._compute = rows if callable(rows) else None

    @property
    def rows(self) -> Partitions:
        """The rows, per partition."""
        if self._rows is None:
            assert self._compute is not None
            self._rows, self._compute = self._compute(), None
        return self._rows


@dataclass
class Frame:
    """A stage's tuples on Spark (see module doc)."""

    df: DataFrame
    fields: Fields
    columns: tuple[str, ...]
    sample: Sample
    pickled: frozenset[str] = frozenset()
    exact: bool = False
    nparts: int = 1
    sentinel: bool = False
    pending: PendingAgg | None = None
    known_types: dict[str, T.DataType] | None = field(default=None, repr=False)

    def types(self) -> dict[str, T.DataType]:
        """Spark types of the columns (asks Spark once, unless known already)."""
        if self.known_types is None:
            self.known_types = {f.name: f.dataType for f in self.df.schema.fields}
        return self.known_types

    def but(self, **changes: Any) -> Frame:
        """A copy with ``changes`` (Spark types are asked again when the DataFrame changed,
        unless given as ``known_types``)."""
        if "df" in changes:
            changes.setdefault("known_types", None)
        return replace(self, **changes)


def produced_fields(op: Op) -> set[str]:
    """Fields whose values ``op`` computes (the others pass through unchanged)."""
    if isinstance(op, EachNode | StateQueryNode):
        return set(op.function_fields)
    if isinstance(op, MapNode | WindowNode):
        return set(op.fields)
    if isinstance(op, AggregateNode):
        return set(op.fields) - set(op.group_fields)
    if isinstance(op, PartialAgg | FinalAgg):
        return set(op.fields) - set(op.node.group_fields)
    return set()


def _pins(op: Op) -> dict[str, pa.DataType | _Pickled]:
    """Output types the operations of ``op`` declare (``output_types``; ``object``: pickled)."""
    declared: list[tuple[Any, dict[str, str]]] = []
    if isinstance(op, EachNode | MapNode | StateQueryNode):
        declared.append((op.function, {}))
    if isinstance(op, WindowNode):
        declared.append((op.aggregator, {}))
    parts: tuple[AggPart, ...] = ()
    if isinstance(op, AggregateNode):
        parts = op.parts
    elif isinstance(op, PartialAgg | FinalAgg):
        parts = op.node.parts
    for i, part in enumerate(parts):
        rename = {part.output_fields[0]: f"_partial_{i}"} if isinstance(op, PartialAgg) else {}
        declared.append((part.aggregator, rename))
    pins: dict[str, pa.DataType | _Pickled] = {}
    for operation, rename in declared:
        types: Mapping[str, Any] = getattr(operation, "output_types", None) or {}
        for name, type_ in types.items():
            if type_ is object:  # any Python value: it travels pickled
                pins[rename.get(name, name)] = PICKLED
                continue
            if not isinstance(type_, pa.DataType):
                msg = (
                    f"step {op.id!r}: output_types[{name!r}] is {type_!r}, not a "
                    f"pyarrow.DataType (e.g. pyarrow.int64()) or object (any value, pickled)"
                )
                raise ConfigurationError(msg)
            pins[rename.get(name, name)] = type_
    return pins


def _declared(
    ops: Sequence[Op],
) -> tuple[set[str], dict[str, pa.DataType | _Pickled], set[str]]:
    """Fields ``ops`` compute, the types their operations declare, and a window's results."""
    produced: set[str] = set()
    pins: dict[str, pa.DataType | _Pickled] = {}
    windowed: set[str] = set()  # a window's results may come from tuples the sample lacks
    for op in ops:
        produced |= produced_fields(op)
        pins.update(_pins(op))
        if isinstance(op, WindowNode):
            windowed |= set(op.fields)
    return produced, pins, windowed


def undeclared(ops: Sequence[Op], columns: Sequence[str]) -> list[str]:
    """The ``columns`` whose type after ``ops`` only a sample can tell: computed by ``ops`` and
    not declared in an operation's ``output_types``. None: the driver's sample need not run
    ``ops`` (docs/api.md, "Output types on Spark")."""
    produced, pins, _ = _declared(ops)
    return [name for name in columns if name in produced and name not in pins]


@dataclass(frozen=True)
class OutputSchema:
    """The output columns of Python steps: Spark schema, Arrow schema, pickled columns."""

    spark: T.StructType
    arrow: pa.Schema
    pickled: frozenset[str]


def output_schema(
    ops: Sequence[Op],
    columns: Sequence[str],
    frame: Frame,
    sample: Partitions,
    timezone: Callable[[], str],
) -> OutputSchema:
    """Types of ``columns`` after ``ops`` ran on ``frame``: passed-through columns keep theirs;
    computed ones are declared (``output_types``) or inferred from ``sample`` (all ``None``:
    string; pickled for a window's results and when ``sample`` has no row; not typable by
    Arrow: pickled binary)."""
    produced, pins, windowed = _declared(ops)
    out_fields = ops[-1].fields
    # a sample without rows shows no type (after a window, or a filter that kept no sampled
    # row): computed fields not declared are pickled rather than guessed as strings
    seen = any(part for part in sample)
    spark_fields = []
    pickled = set()
    for name in columns:
        if name in produced:
            i = out_fields.index(name)
            found = pins.get(name) or infer_type(r[i] for part in sample for r in part)
            if found is None and (name in windowed or not seen):
                found = PICKLED  # nothing to learn from: the real values travel as they are
            if isinstance(found, type(PICKLED)):
                pickled.add(name)
                dtype: T.DataType = T.BinaryType()
            else:
                dtype = from_arrow_type(found or pa.string())
        else:
            dtype = frame.types()[name]
            if name in frame.pickled:
                pickled.add(name)
        spark_fields.append(T.StructField(name, dtype, nullable=True))
    if not spark_fields:
        spark_fields.append(T.StructField(ROW, T.BooleanType(), nullable=True))
    spark = T.StructType(spark_fields)
    tz = timezone() if any(_has_timestamp(f.dataType) for f in spark_fields) else None
    arrow = pa.schema(
        [pa.field(f.name, arrow_type(f.dataType, tz)) for f in spark_fields]
    )
    return OutputSchema(spark, arrow, frozenset(pickled))


def _has_timestamp(dtype: T.DataType) -> bool:
    if isinstance(dtype, T.TimestampType):
        return True
    if isinstance(dtype, T.ArrayType):
        return _has_timestamp(dtype.elementType)
    if isinstance(dtype, T.MapType):
        return _has_timestamp(dtype.keyType) or _has_timestamp(dtype.valueType)
    if isinstance(dtype, T.StructType):
        return any(_has_timestamp(f.dataType) for f in dtype.fields)
    return False
