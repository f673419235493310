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

User code runs once per record, in the order the local runtime runs it. When it raises (any
exception, ``StopIteration`` included: no user code is called by ``map`` or a generator here)
or emits a tuple of the wrong width, :func:`run_columns` raises the local runtime's error,
naming the step, the txid and the record (:func:`~airflow_trident.runtime.local.user_error`),
worked out where it failed, without calling user code again. A value its Arrow type refuses
raises :class:`~airflow_trident.runtime.spark.columns.ColumnConversionError`, as the row
path's conversion does. Only a batch the column path cannot take at all (a step reading a
field the batch lacks) returns ``None`` — before any user code ran — for the row path to run.

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
from dataclasses import dataclass
from typing import Any, NoReturn, cast

import pyarrow as pa

from airflow_trident.graph import EachNode, FilterNode
from airflow_trident.operation.base import ColumnFunction
from airflow_trident.operation.inline import InlinedExecute, InlinedKeep, UserCodeError, WrongWidth
from airflow_trident.planner.plan import Op
from airflow_trident.runtime.local import column_function_error, user_error, width_error
from airflow_trident.runtime.spark.columns import (
    PRUNED,
    ColumnConversionError,
    python_values,
    typed_array,
)
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

    def has(self, name: str) -> bool:
        """``name`` was read or made (else it was pruned before the Python step)."""
        return name in self.made or name in self.batch.schema.names

    def row(self, fields: Fields, index: int) -> tuple[Any, ...]:
        """Record ``index``'s values of ``fields``, as the row path has them (for errors)."""
        return tuple(self.get(name)[index] if self.has(name) else PRUNED for name in fields)

    def output(self, target: pa.Field, pickled_out: frozenset[str]) -> pa.Array:
        """The column of ``target``: made values converted as the row path converts them,
        others passed through (converted too when their type or pickling changes).

        Raises
        ------
        ColumnConversionError
            If a value does not fit the type.
        """
        values = self.made.get(target.name)
        if values is None:
            if target.name not in self.batch.schema.names:  # a placeholder: keeps the count
                return pa.nulls(self.count, target.type)
            array = self.batch.column(target.name)
            same = (target.name in self.pickled_in) == (target.name in pickled_out)
            if same and array.type == target.type:
                return (
                    array
                    if self.positions is None
                    else array.take(pa.array(self.positions, pa.int64()))
                )
            values = self.get(target.name)
        if target.name in pickled_out:
            values = [None if v is None else pickle.dumps(v) for v in values]
        try:
            return typed_array(values, target.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as exc:
            raise ColumnConversionError(target.name, target.type, exc) from exc


@dataclass(frozen=True)
class _Step:
    """One step on the current records: what its errors name."""

    op: EachNode | FilterNode
    txid: int
    fields: Fields  # the step's input fields (its records' values, in errors)
    columns: _Columns

    def failed(self, index: int | None, exc: Exception) -> NoReturn:
        """User code raised ``exc`` on record ``index`` (``None``: on no one record)."""
        row = None if index is None else self.columns.row(self.fields, index)
        error = user_error(self.op.id, self.txid, row, exc)
        if error is exc:
            raise error
        raise error from exc

    def wrong_width(self, index: int, emitted: tuple[Any, ...]) -> NoReturn:
        op = cast(EachNode, self.op)
        row = self.columns.row(self.fields, index)
        raise width_error(op.id, self.txid, row, emitted, op.function_fields)


def _each(step: _Step, op: EachNode, inlined: InlinedExecute | InlinedKeep | None) -> None:
    columns, width = step.columns, len(op.function_fields)
    if isinstance(op.function, ColumnFunction):
        out = _column_function(step, op, op.function)
    elif isinstance(inlined, InlinedExecute) and inlined.fits(width):
        inputs = [columns.get(name) for name in inlined.fields]
        try:
            out = inlined(inputs, width, columns.count)
        except WrongWidth as exc:
            step.wrong_width(exc.index, exc.emitted)
        except UserCodeError as exc:
            step.failed(exc.index, exc.error)
    else:
        out = _per_tuple(step, op)
    for name, values in zip(op.function_fields, out, strict=True):
        columns.made[name] = values if type(values) is list else list(values)


def _column_function(step: _Step, op: EachNode, function: ColumnFunction) -> list[Any]:
    """The column function's output columns, its failure the local runtime's (which runs
    each record alone to name the first failing one)."""
    columns, width = step.columns, len(op.function_fields)
    if not columns.count:  # the local runtime does not call it without tuples
        return [[] for _ in range(width)]
    try:
        out = function.execute_columns([columns.get(name) for name in op.input_fields])
        sizes = [len(column) for column in out]
        if sizes != [columns.count] * width:
            declared = list(op.function_fields)
            msg = f"execute_columns returned {sizes} values for {declared}, {columns.count} tuples"
            raise ValueError(msg)
    except Exception as exc:
        rows = [columns.row(step.fields, i) for i in range(columns.count)]
        error = column_function_error(op, rows, step.fields, step.txid, exc)
        if error is exc:
            raise
        raise error from exc
    return list(out)


def _per_tuple(step: _Step, op: EachNode) -> list[list[Any]]:
    """The function's output columns; takes the records each output belongs to first, when
    some record did not emit exactly one tuple. Each record's emits are checked as soon as
    its ``execute`` returns, as the local runtime does (no later record runs after a wrong
    width)."""
    columns = step.columns
    execute = op.function.execute
    collector = TridentCollector()
    emitted = cast(list[Any], collector.rows)
    mark = emitted.append
    width = len(op.function_fields)
    record = -1
    tuples = columns.tuples(op.input_fields)
    mark(_NEXT)  # each record's emits follow a marker
    try:
        for record, t in enumerate(tuples):  # noqa: B007
            execute(t, collector)
            last = emitted[-1]
            if last is _NEXT or len(last) != width or emitted[-2] is not _NEXT:
                _check_record(emitted, width)  # none, several, or a wrong width
            mark(_NEXT)
    except _WrongEmit as exc:
        step.wrong_width(record, exc.emitted)
    except Exception as exc:
        step.failed(record, exc)
    n = columns.count
    if len(emitted) == 2 * n + 1 and emitted[2::2].count(_NEXT) == n:  # identity: C speed
        outputs = emitted[1::2]
    else:
        index, outputs, record = [], [], -1
        for item in emitted:
            if item is _NEXT:
                record += 1
            else:
                index.append(record)
                outputs.append(item)
        columns.take(index)
    return [list(map(operator.itemgetter(i), outputs)) for i in range(width)]


class _WrongEmit(Exception):
    """A record emitted a tuple of the wrong width (raised by :func:`_check_record`)."""

    def __init__(self, emitted: tuple[Any, ...]) -> None:
        super().__init__(emitted)
        self.emitted = emitted


def _check_record(emitted: list[Any], width: int) -> None:
    """Fail on the first of the last record's emits (those after the last marker) that has
    not ``width`` values."""
    start = len(emitted)
    while emitted[start - 1] is not _NEXT:
        start -= 1
    for item in emitted[start:]:
        if len(item) != width:
            raise _WrongEmit(item)


def _filter(step: _Step, op: FilterNode, inlined: InlinedExecute | InlinedKeep | None) -> None:
    columns = step.columns
    if isinstance(inlined, InlinedKeep):
        try:
            kept = inlined([columns.get(name) for name in inlined.fields], columns.count)
        except UserCodeError as exc:
            step.failed(exc.index if exc.named else None, exc.error)
    else:
        kept = _keep(step, op)
    if len(kept) != columns.count:
        columns.take(kept)


def _keep(step: _Step, op: FilterNode) -> list[int]:
    """The positions of the records ``is_keep`` keeps, called record by record (its
    truthiness taken before the next record's call, as the local runtime does)."""
    keep = op.filter.is_keep
    kept: list[int] = []
    append = kept.append
    record = -1
    tuples = step.columns.tuples(op.input_fields)
    try:
        for record, t in enumerate(tuples):
            try:
                result = keep(t)
            except Exception as exc:
                raise UserCodeError(record, exc) from exc
            if result:
                append(record)
    except UserCodeError as exc:
        step.failed(exc.index, exc.error)
    except Exception as exc:  # the truthiness of what is_keep returned: no record named
        step.failed(None, exc)
    return kept


def _input_fields(batch: pa.RecordBatch, ops: Sequence[Op]) -> list[Fields]:
    """Each op's input fields: the first one's, then the previous op's output fields."""
    if not ops:
        return []
    first = ops[0]
    if isinstance(first, EachNode):
        fields: Fields = tuple(f for f in first.fields if f not in first.function_fields)
    else:
        fields = tuple(first.fields)
    return [fields, *(tuple(op.fields) for op in ops[:-1])]


def _readable(batch: pa.RecordBatch, ops: Sequence[Op]) -> bool:
    """Every field each op reads is in the batch or made by an earlier op."""
    available = set(batch.schema.names)
    for op in ops:
        if not set(op.input_fields) <= available:  # type: ignore[union-attr]
            return False
        if isinstance(op, EachNode):
            available |= set(op.function_fields)
    return True


def run_columns(
    batch: pa.RecordBatch,
    ops: Sequence[Op],
    out_schema: pa.Schema,
    pickled_in: frozenset[str] = frozenset(),
    pickled_out: frozenset[str] = frozenset(),
    inlined: Sequence[InlinedExecute | InlinedKeep | None] = (),
    *,
    txid: int = 0,
    in_fields: Sequence[Fields] = (),
) -> pa.RecordBatch | None:
    """``batch`` through ``ops`` (``each`` and filters), column by column, as a batch of
    ``out_schema``; ``None`` when a step reads a field the batch lacks (nothing ran: the row
    path then runs the batch). ``inlined``: for each op, its ``execute`` (``is_keep``) as a
    comprehension, if it has one. ``txid`` and ``in_fields`` (each op's input fields; by
    default the batch's, then each op's output fields) are for the errors.

    Raises
    ------
    TridentError
        The local runtime's error when user code raised (naming the step, the txid and the
        record) or emitted a tuple of the wrong width.
    ColumnConversionError
        If a value does not fit its Arrow type.
    """
    if not _readable(batch, ops):
        return None
    fields = list(in_fields) or _input_fields(batch, ops)
    columns = _Columns(batch, pickled_in)
    for i, op in enumerate(ops):
        fast = inlined[i] if i < len(inlined) else None
        if isinstance(op, EachNode):
            _each(_Step(op, txid, fields[i], columns), op, fast)
        else:
            node = cast(FilterNode, op)
            _filter(_Step(node, txid, fields[i], columns), node, fast)
    arrays = [columns.output(target, pickled_out) for target in out_schema]
    return pa.RecordBatch.from_arrays(arrays, schema=out_schema)
