"""A run of ``each`` and filter steps on one Arrow batch, a column at a time.

A Spark Python step made only of ``each`` and filters need not build a row tuple per record:
each step reads its input fields as Python lists, and the columns no step touches pass
through as Arrow arrays (taken by index where a step dropped or repeated records).

- A :class:`~airflow_trident.operation.ColumnFunction` gets its columns in one call.
- A per-tuple ``Function`` whose ``execute`` emits exactly once, from an expression of the
  tuple's fields, runs as one comprehension over the columns
  (:mod:`~airflow_trident.operation.inline`; the caller passes it as ``inlined``).
- Any other per-tuple ``Function`` gets one :class:`~airflow_trident.tuple.TridentTuple` per
  record and one collector for the batch; the records it emits for are worked out from a marker put
  between records. When every record emitted exactly one tuple (the common case), the outputs
  are the output columns as they are.
- A filter keeps the records whose ``is_keep`` is true (a comprehension over the columns where
  its body is assignments and one ``return``).

Any failure (an exception, an output of the wrong width or length, a value its Arrow type
refuses) makes :func:`run_columns` return ``None``: the caller then runs the batch through the
row path, which raises the local runtime's error naming the record. The records before the
failing one ran twice in that case; the batch fails (and is replayed) either way.

>>> import pyarrow as pa
>>> from airflow_trident.graph import EachNode
>>> from airflow_trident.operation.builtin import Split
>>> op = EachNode("split", (), ("s", "w"), function=Split(), input_fields=("s",),
...               function_fields=("w",))
>>> batch = pa.record_batch({"s": ["the cow", "", "a"]})
>>> out = run_columns(batch, (op,), pa.schema([("s", pa.string()), ("w", pa.string())]))
>>> out.to_pydict()
{'s': ['the cow', 'the cow', 'a'], 'w': ['the', 'cow', 'a']}
"""

from __future__ import annotations

import operator
import pickle
from collections.abc import Iterator, Sequence
from typing import Any, cast

import pyarrow as pa

from airflow_trident.graph import EachNode, FilterNode
from airflow_trident.operation.base import ColumnFunction
from airflow_trident.operation.inline import InlinedExecute, InlinedKeep
from airflow_trident.planner.plan import Op
from airflow_trident.runtime.spark.columns import python_values
from airflow_trident.tuple import Fields, TridentCollector, TridentTuple, tuple_type

__all__ = ["columnar_ops", "run_columns"]

_NEXT = object()  # put in the collector's rows after each record's emits


def columnar_ops(ops: Sequence[Op]) -> bool:
    """``ops`` can run column to column: ``each`` and filters only."""
    return bool(ops) and all(isinstance(op, EachNode | FilterNode) for op in ops)


class _Columns:
    """The current records' columns: Python lists of what was read or made, and the
    records' positions in the input batch (``None`` while they are the batch's own)."""

    def __init__(self, batch: pa.RecordBatch, pickled_in: frozenset[str]) -> None:
        self.batch = batch
        self.pickled_in = pickled_in
        self.count = batch.num_rows
        self.read: dict[str, list[Any]] = {}
        self.made: dict[str, list[Any]] = {}
        self.positions: list[int] | None = None

    def get(self, name: str) -> list[Any]:
        values = self.made.get(name)
        if values is None:
            values = self.read.get(name)
        if values is None:
            values = python_values(self.batch.column(name))
            if name in self.pickled_in:
                values = [None if v is None else pickle.loads(v) for v in values]
            if self.positions is not None:
                values = [values[i] for i in self.positions]
            self.read[name] = values
        return values

    def tuples(self, fields: Fields) -> Iterator[TridentTuple]:
        """A :class:`~airflow_trident.tuple.TridentTuple` of ``fields`` per current record."""
        inputs = [self.get(name) for name in fields]
        values = zip(*inputs, strict=True) if inputs else [()] * self.count
        return map(tuple_type(fields), values)

    def take(self, index: list[int]) -> None:
        """Keep (or repeat) the current records at ``index``."""
        for columns in (self.read, self.made):
            for name, values in columns.items():
                columns[name] = [values[i] for i in index]
        self.positions = index if self.positions is None else [self.positions[i] for i in index]
        self.count = len(index)

    def output(self, target: pa.Field, pickled_out: frozenset[str]) -> pa.Array:
        values = self.made.get(target.name)
        if values is not None:
            if target.name in pickled_out:
                values = [None if v is None else pickle.dumps(v) for v in values]
            return pa.array(values, target.type)
        if target.name not in self.batch.schema.names:  # a placeholder that keeps the count
            return pa.nulls(self.count, target.type)
        if (target.name in self.pickled_in) != (target.name in pickled_out):
            raise TypeError(target.name)  # the row path converts it
        array = self.batch.column(target.name)
        if array.type != target.type:
            raise TypeError(target.name)
        return array if self.positions is None else array.take(pa.array(self.positions))


def _each(op: EachNode, columns: _Columns, inlined: InlinedExecute | InlinedKeep | None) -> None:
    if isinstance(op.function, ColumnFunction):
        out = op.function.execute_columns([columns.get(name) for name in op.input_fields])
        if [len(c) for c in out] != [columns.count] * len(op.function_fields):
            raise ValueError(op.id)
    elif isinstance(inlined, InlinedExecute):
        inputs = [columns.get(name) for name in inlined.fields]
        out = inlined(inputs, len(op.function_fields), columns.count)
    else:
        out = _per_tuple(op, columns)
    for name, values in zip(op.function_fields, out, strict=True):
        columns.made[name] = values if type(values) is list else list(values)


def _per_tuple(op: EachNode, columns: _Columns) -> list[list[Any]]:
    """The function's output columns; takes the records each output belongs to first, when
    some record did not emit exactly one tuple."""
    execute = op.function.execute
    collector = TridentCollector()
    emitted = cast(list[Any], collector.rows)
    mark = emitted.append
    for t in columns.tuples(op.input_fields):
        execute(t, collector)
        mark(_NEXT)
    n = columns.count
    if len(emitted) == 2 * n and emitted[1::2].count(_NEXT) == n:  # identity first: C speed
        outputs = emitted[0::2]
    else:
        index, outputs, record = [], [], 0
        for item in emitted:
            if item is _NEXT:
                record += 1
            else:
                index.append(record)
                outputs.append(item)
        columns.take(index)
    width = len(op.function_fields)
    if outputs and set(map(len, outputs)) != {width}:
        raise ValueError(op.id)
    return [list(map(operator.itemgetter(i), outputs)) for i in range(width)]


def _filter(
    op: FilterNode, columns: _Columns, inlined: InlinedExecute | InlinedKeep | None
) -> None:
    if isinstance(inlined, InlinedKeep):
        keep = inlined([columns.get(name) for name in inlined.fields], columns.count)
    else:
        keep = list(map(op.filter.is_keep, columns.tuples(op.input_fields)))
    if not all(keep):
        columns.take([i for i, k in enumerate(keep) if k])


def run_columns(
    batch: pa.RecordBatch,
    ops: Sequence[Op],
    out_schema: pa.Schema,
    pickled_in: frozenset[str] = frozenset(),
    pickled_out: frozenset[str] = frozenset(),
    inlined: Sequence[InlinedExecute | InlinedKeep | None] = (),
) -> pa.RecordBatch | None:
    """``batch`` through ``ops`` (``each`` and filters), column by column, as a batch of
    ``out_schema``; ``None`` when anything fails (the row path then runs the batch).
    ``inlined``: for each op, its ``execute`` (``is_keep``) as a comprehension, if it has
    one."""
    try:
        columns = _Columns(batch, pickled_in)
        for i, op in enumerate(ops):
            fast = inlined[i] if i < len(inlined) else None
            if isinstance(op, EachNode):
                _each(op, columns, fast)
            else:
                _filter(cast(FilterNode, op), columns, fast)
        arrays = [columns.output(target, pickled_out) for target in out_schema]
        return pa.RecordBatch.from_arrays(arrays, schema=out_schema)
    except Exception:
        return None
