"""Python rows <-> Arrow columns for the Spark runtime: type inference, pickled columns.

A column Arrow cannot type (a set, an object, ints mixed with strings) is *pickled*: it travels
as ``binary`` and the Spark runtime unpickles it wherever Python reads it again.

>>> infer_type([1, None, 2]), infer_type([1, 2.5]), infer_type([None]) is None
(DataType(int64), DataType(double), True)
>>> infer_type([{"ann": 1}, {"bob": 2}])
MapType(map<string, int64>)
>>> infer_type([{1, 2}]) is PICKLED
True
>>> schema = pa.schema([("w", pa.string()), ("n", pa.int64())])
>>> batch = rows_to_batch([("a", 1, "x")], ("w", "n", "z"), schema, frozenset())
>>> rows_from_batch(batch, ("z", "w", "n"), frozenset())
[(<pruned>, 'a', 1)]
"""

from __future__ import annotations

import datetime
import decimal
import pickle
from collections.abc import Iterable, Sequence
from typing import Any, Final

import pyarrow as pa

from airflow_trident.tuple import Fields

__all__ = [
    "PICKLED",
    "PRUNED",
    "ColumnConversionError",
    "array_of",
    "infer_type",
    "python_values",
    "rows_from_batch",
    "rows_to_batch",
    "typed_array",
]

Row = tuple[Any, ...]
_INT64 = (-(2**63), 2**63 - 1)


class _Pruned:
    """Stands for a field no later step reads (it was not shipped to the Python worker)."""

    _instance: _Pruned | None = None

    def __new__(cls) -> _Pruned:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<pruned>"

    def __reduce__(self) -> tuple[type[_Pruned], tuple[()]]:
        return (_Pruned, ())


class _Pickled:
    """Marks a column that must be pickled (Arrow cannot type its values)."""

    def __repr__(self) -> str:
        return "PICKLED"


PRUNED: Final = _Pruned()
PICKLED: Final = _Pickled()


class ColumnConversionError(ValueError):
    """Values of a column that do not fit its declared Arrow type."""

    def __init__(self, column: str, type_: pa.DataType, cause: Exception) -> None:
        self.column = column
        self.type = type_
        super().__init__(f"column {column!r} does not fit Arrow type {type_}: {cause}")


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int" if _INT64[0] <= value <= _INT64[1] else "big"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, bytes | bytearray):
        return "bytes"
    if isinstance(value, dict):
        return "dict"
    if isinstance(value, list):
        return "list"  # a tuple is "other": Arrow's list would come back as a Python list
    if isinstance(value, datetime.datetime | datetime.date | decimal.Decimal):
        return "arrow"
    return "other"


_ATOMS: Final = {
    frozenset({"bool"}): pa.bool_(),
    frozenset({"int"}): pa.int64(),
    frozenset({"float"}): pa.float64(),
    frozenset({"int", "float"}): pa.float64(),
    frozenset({"str"}): pa.string(),
    frozenset({"bytes"}): pa.binary(),
}


def infer_type(values: Iterable[Any]) -> pa.DataType | _Pickled | None:
    """The Arrow type of ``values`` (Python objects), ``None`` if all are ``None``, or
    :data:`PICKLED` if Arrow cannot hold them (mixed kinds, sets, objects, huge ints).

    Dicts become maps (not structs: their keys vary), lists lists; a tuple is pickled (an Arrow
    list comes back as a Python list).
    """
    present = [v for v in values if v is not None]
    if not present:
        return None
    kinds = frozenset(_kind(v) for v in present)
    atom = _ATOMS.get(kinds)
    if atom is not None:
        return atom
    if kinds == {"dict"}:
        keys = infer_type(k for d in present for k in d)
        items = infer_type(v for d in present for v in d.values())
        if keys is PICKLED or items is PICKLED or any(None in d for d in present):
            return PICKLED
        return pa.map_(keys or pa.string(), items or pa.string())
    if kinds == {"list"}:
        element = infer_type(v for seq in present for v in seq)
        if element is PICKLED:
            return PICKLED
        return pa.list_(element or pa.string())
    if kinds == {"arrow"}:
        try:
            found: pa.DataType = pa.array(present).type
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return PICKLED
        return found
    return PICKLED


def array_of(values: Sequence[Any]) -> tuple[pa.Array, bool]:
    """An Arrow array of ``values`` and whether it is pickled (for emitted source columns).

    Arrow's own (C++) inference runs first; dicts, all-``None`` and untypable columns take the
    slower Python inference.
    """
    try:
        array = pa.array(values)
        if not _needs_python_inference(array.type):
            return array, False
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    found = infer_type(values)
    if found is None:
        return pa.array(values, pa.string()), False
    if isinstance(found, _Pickled):
        return pa.array([None if v is None else pickle.dumps(v) for v in values], pa.binary()), True
    try:
        return pa.array(values, found), False
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([None if v is None else pickle.dumps(v) for v in values], pa.binary()), True


def _needs_python_inference(type_: pa.DataType) -> bool:
    if pa.types.is_null(type_) or pa.types.is_struct(type_) or pa.types.is_union(type_):
        return True
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return _needs_python_inference(type_.value_type)
    if pa.types.is_map(type_):
        return _needs_python_inference(type_.key_type) or _needs_python_inference(type_.item_type)
    return False


def _has_map(type_: pa.DataType) -> bool:
    if pa.types.is_map(type_):
        return True
    return any(_has_map(type_.field(i).type) for i in range(type_.num_fields))


def python_values(array: pa.Array | pa.ChunkedArray) -> list[Any]:
    """``array`` as Python values, maps as dicts (asked only for maps: it is 25x slower)."""
    if _has_map(array.type):
        return array.to_pylist(maps_as_pydicts="strict")  # type: ignore[no-any-return]
    return array.to_pylist()  # type: ignore[no-any-return]


def rows_from_batch(batch: pa.RecordBatch, fields: Fields, pickled: frozenset[str]) -> list[Row]:
    """Rows of ``fields`` from ``batch``; a field not in the batch is :data:`PRUNED`."""
    n = batch.num_rows
    names = {name: i for i, name in enumerate(batch.schema.names)}
    columns: list[list[Any]] = []
    for field in fields:
        index = names.get(field)
        if index is None:
            columns.append([PRUNED] * n)
            continue
        values = python_values(batch.column(index))
        if field in pickled:
            values = [None if v is None else pickle.loads(v) for v in values]
        columns.append(values)
    if not columns:
        return [()] * n
    return list(zip(*columns, strict=True))


def typed_array(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """``values`` as an Arrow array of ``type_``, refusing what would come back as another
    value: Arrow casts a float into an integer type by truncating it (``1.5`` -> ``1``).

    >>> typed_array([1, None], pa.int64()).to_pylist()
    [1, None]
    >>> typed_array([1.5], pa.int64())
    Traceback (most recent call last):
    ...
    pyarrow.lib.ArrowInvalid: float 1.5 in an int64 column would come back as another value
    """
    if pa.types.is_integer(type_):
        for value in values:
            if isinstance(value, float):
                msg = f"float {value!r} in an {type_} column would come back as another value"
                raise pa.ArrowInvalid(msg)
    return pa.array(values, type_)


def rows_to_batch(
    rows: Sequence[Row], fields: Fields, schema: pa.Schema, pickled: frozenset[str]
) -> pa.RecordBatch:
    """A batch of ``schema``'s columns taken from ``rows`` (whose values follow ``fields``).

    Raises
    ------
    ColumnConversionError
        If a column's values do not fit its Arrow type.
    """
    index = {name: i for i, name in enumerate(fields)}
    arrays = []
    for target in schema:
        position = index.get(target.name)
        if position is None:  # a placeholder column that keeps the row count
            arrays.append(pa.nulls(len(rows), target.type))
            continue
        values = [r[position] for r in rows]
        if target.name in pickled:
            values = [None if v is None else pickle.dumps(v) for v in values]
        try:
            arrays.append(typed_array(values, target.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as exc:
            raise ColumnConversionError(target.name, target.type, exc) from exc
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
