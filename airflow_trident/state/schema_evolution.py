"""Schema evolution of lakehouse sinks (Delta, Iceberg): a batch's Arrow schema against the table's.

The rules, checked *before* anything is written (:func:`plan_schema`):

=============================================  ===============================================
the batch has                                  result
=============================================  ===============================================
a column of the table, same type               written as is
a column of the table, a narrower type         cast (``int32`` -> ``int64``, ``float32`` ->
                                               ``float64``, ``string`` <-> ``large_string``)
a column of the table, all ``None``            written as nulls of the table's type
a column of the table, another type            refused (:class:`SchemaMismatchError`)
a column the table lacks                       added as a nullable column when the sink
                                               evolves (``evolve_schema=True``), else refused
a column the table lacks (or a first batch's   not written until a batch gives it a type (its
column), all ``None``: no type yet             rows read ``None`` there) when the sink
                                               evolves; else, and for a merge key or partition
                                               column, refused naming the fix (``schema=``)
no value for a nullable column of the table    nulls (an older txid's rows, replayed after the
                                               table gained a column, keep the schema they had)
no value for a required column of the table    refused
=============================================  ===============================================

Examples
--------
>>> import pyarrow as pa
>>> table = pa.schema([("word", pa.string()), ("n", pa.int64())])
>>> batch = pa.schema([("word", pa.string()), ("n", pa.int32()), ("lang", pa.string())])
>>> plan = plan_schema(batch, table, evolve=True, where="table t, txid 3")
>>> [f.name for f in plan.added], plan.target.names
(['lang'], ['word', 'n', 'lang'])
>>> plan_schema(batch, table, evolve=False, where="table t, txid 3")
Traceback (most recent call last):
...
airflow_trident.errors.SchemaMismatchError: table t, txid 3: the batch has columns the table does \
not: ['lang']; nothing was written; hint: pass evolve_schema=True to add them as nullable columns, \
or drop them from the written fields
>>> data = pa.table({"word": ["a"], "n": pa.array([1], pa.int32())})
>>> align(data, plan_schema(data.schema, table, evolve=False, where="t")).schema.types
[DataType(string), DataType(int64)]

A first batch (no table yet) whose ``lang`` has no type: the table is made without it.

>>> first = pa.table({"word": ["a"], "lang": pa.nulls(1)})
>>> plan = plan_schema(first.schema, None, evolve=True, where="table t, txid 1")
>>> plan.untyped, align(first, plan).column_names
(('lang',), ['word'])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from airflow_trident.errors import SchemaMismatchError

__all__ = ["SchemaPlan", "align", "plan_schema"]


@dataclass(frozen=True)
class SchemaPlan:
    """How a batch is written: ``added`` are new (nullable) columns, ``target`` the schema the
    batch is cast to (the table's columns, then the added ones); ``target is None`` when the
    table does not exist yet (the batch's schema makes it)."""

    added: tuple[pa.Field, ...]
    target: pa.Schema | None
    untyped: tuple[str, ...] = ()
    """Columns left out of the write: new (or the first batch's), every value ``None``, so of
    no type yet; added by the first batch that gives them one."""


def _widens(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether values of ``source`` are written into a ``target`` column without loss."""
    if source == target or pa.types.is_null(source):
        return True
    ints = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
    if source in ints and target in ints:
        return ints.index(source) <= ints.index(target)
    if pa.types.is_float32(source) and pa.types.is_float64(target):
        return True
    strings = (pa.string(), pa.large_string(), pa.string_view())
    binaries = (pa.binary(), pa.large_binary(), pa.binary_view())
    return (source in strings and target in strings) or (source in binaries and target in binaries)


def plan_schema(
    batch: pa.Schema,
    table: pa.Schema | None,
    *,
    evolve: bool,
    where: str,
    keys: Sequence[str] = (),
) -> SchemaPlan:
    """Check ``batch`` against the ``table``'s schema (``None``: no table yet) by the rules of
    this module. ``keys``: columns that must have a type (merge keys, partition columns).

    Raises
    ------
    SchemaMismatchError
        For a column of another type, a required column the batch lacks, a new column when the
        sink does not evolve, or a new column whose type is unknown (all ``None``) when the
        sink does not evolve or the column is one of ``keys``.
    """
    if table is None:
        return _first_batch(batch, evolve=evolve, where=where, keys=keys)
    known = set(table.names)
    conflicts = [
        f"{f.name}: {f.type} into {table.field(f.name).type}"
        for f in batch
        if f.name in known and not _widens(f.type, table.field(f.name).type)
    ]
    if conflicts:
        msg = (
            f"{where}: incompatible column types {conflicts}; nothing was written; hint: write "
            f"the table's type (cast in the topology), or write into a new column or table"
        )
        raise SchemaMismatchError(msg)
    required = [f.name for f in table if not f.nullable and f.name not in batch.names]
    if required:
        msg = (
            f"{where}: the batch has no values for required columns {required}; nothing was "
            f"written; hint: write them, or make them optional in the table"
        )
        raise SchemaMismatchError(msg)
    new = [f for f in batch if f.name not in known]
    if new and not evolve:
        msg = (
            f"{where}: the batch has columns the table does not: {[f.name for f in new]}; "
            f"nothing was written; hint: pass evolve_schema=True to add them as nullable "
            f"columns, or drop them from the written fields"
        )
        raise SchemaMismatchError(msg)
    untyped = [f.name for f in new if pa.types.is_null(f.type)]
    _refuse_untyped_keys(untyped, keys, where)
    added = tuple(f.with_nullable(True) for f in new if f.name not in untyped)
    return SchemaPlan(added, pa.schema([*table, *added]), tuple(untyped))


def _first_batch(batch: pa.Schema, *, evolve: bool, where: str, keys: Sequence[str]) -> SchemaPlan:
    """The plan of the batch that creates the table: a column of no type is left out (the
    table is made without it) when the sink evolves; else it is refused."""
    untyped = [f.name for f in batch if pa.types.is_null(f.type)]
    if not untyped:
        return SchemaPlan((), None)
    _refuse_untyped_keys(untyped, keys, where)
    typed = [f for f in batch if f.name not in untyped]
    if not evolve or not typed:
        why = (
            "a sink that does not evolve could never add them later"
            if typed
            else "no column of the batch has a type"
        )
        msg = (
            f"{where}: columns {untyped} hold only None, so their type is unknown, and the "
            f"table is made from this first batch ({why}); nothing was written; hint: give the "
            f"sink schema=pyarrow.schema([...]) naming their types"
            + ("" if evolve else ", or pass evolve_schema=True to add them once typed")
        )
        raise SchemaMismatchError(msg)
    return SchemaPlan((), pa.schema(typed), tuple(untyped))


def _refuse_untyped_keys(untyped: Sequence[str], keys: Sequence[str], where: str) -> None:
    bad = [k for k in keys if k in untyped]
    if bad:
        msg = (
            f"{where}: key or partition columns {bad} hold only None, so their type is unknown; "
            f"nothing was written; hint: give the sink schema=pyarrow.schema([...]) naming "
            f"their types"
        )
        raise SchemaMismatchError(msg)


def align(data: pa.Table, plan: SchemaPlan) -> pa.Table:
    """``data`` cast to the plan's target schema (missing nullable columns as nulls)."""
    if plan.target is None:
        return data
    columns = [
        data.column(f.name).cast(f.type)
        if f.name in data.column_names
        else pa.nulls(data.num_rows, f.type)
        for f in plan.target
    ]
    return pa.Table.from_arrays(columns, schema=plan.target)
