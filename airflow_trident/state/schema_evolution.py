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
"""

from __future__ import annotations

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
    batch: pa.Schema, table: pa.Schema | None, *, evolve: bool, where: str
) -> SchemaPlan:
    """Check ``batch`` against the ``table``'s schema (``None``: no table yet) by the rules of
    this module.

    Raises
    ------
    SchemaMismatchError
        For a column of another type, a required column the batch lacks, a new column when the
        sink does not evolve, or a new column whose type is unknown (all ``None``).
    """
    if table is None:
        return SchemaPlan((), None)
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
    if untyped:
        msg = (
            f"{where}: new columns {untyped} hold only None, so their type is unknown; nothing "
            f"was written; hint: give the sink schema=pyarrow.schema([...]) naming their types"
        )
        raise SchemaMismatchError(msg)
    added = tuple(f.with_nullable(True) for f in new)
    return SchemaPlan(added, pa.schema([*table, *added]))


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
