"""Spark types as the Arrow types of a Python step's batches, on every supported PySpark.

PySpark's ``to_arrow_type`` changed its signature between minor releases: 4.2 takes the
session's ``timezone`` and labels a ``TimestampType`` with it; 4.1 takes ``timestamp_utc`` and
labels it ``"UTC"``. The values are the same (microseconds since the epoch); the label is what a
Python step's ``datetime`` carries, so every Spark the product runs on gets the 4.2 label here.

>>> from pyspark.sql import types as T
>>> arrow_type(T.TimestampType(), "Europe/Paris")
TimestampType(timestamp[us, tz=Europe/Paris])
>>> arrow_type(T.ArrayType(T.TimestampType()), "UTC")
ListType(list<element: timestamp[us, tz=UTC]>)
>>> arrow_type(T.LongType(), None)
DataType(int64)
"""

from __future__ import annotations

import inspect
from functools import cache

import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_type

__all__ = ["arrow_type"]


@cache
def _takes_timezone() -> bool:
    return "timezone" in inspect.signature(to_arrow_type).parameters


def arrow_type(spark_type: T.DataType, timezone: str | None) -> pa.DataType:
    """The Arrow type of ``spark_type`` in a Python step's batches, its timestamps labelled
    with ``timezone`` (the session's; ``None`` where the type holds no timestamp)."""
    if _takes_timezone():  # PySpark 4.2 and later
        return to_arrow_type(spark_type, timezone=timezone)  # type: ignore[call-arg,unused-ignore]
    return _relabel(to_arrow_type(spark_type), timezone)


def _relabel(arrow: pa.DataType, timezone: str | None) -> pa.DataType:
    """``arrow`` with every zoned timestamp labelled ``timezone`` (PySpark 4.1 says ``UTC``)."""
    if pa.types.is_timestamp(arrow):
        return pa.timestamp(arrow.unit, tz=timezone) if arrow.tz is not None else arrow
    if pa.types.is_large_list(arrow):
        return pa.large_list(arrow.value_field.with_type(_relabel(arrow.value_type, timezone)))
    if pa.types.is_list(arrow):
        return pa.list_(arrow.value_field.with_type(_relabel(arrow.value_type, timezone)))
    if pa.types.is_map(arrow):
        return pa.map_(
            arrow.key_field.with_type(_relabel(arrow.key_type, timezone)),
            arrow.item_field.with_type(_relabel(arrow.item_type, timezone)),
        )
    if pa.types.is_struct(arrow):
        return pa.struct([f.with_type(_relabel(f.type, timezone)) for f in arrow])
    return arrow
