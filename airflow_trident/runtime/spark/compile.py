r"""Built-in operations as Spark SQL: no Python runs per row.

* ``Split`` -> the package's Java ``str.split()`` + ``explode``
  (:mod:`~airflow_trident.runtime.spark.jvm_functions`), or where a session cannot load it,
  ``split`` + ``explode`` on the whitespace Python's ``str.split()`` uses (Java's ``\s`` is only
  ASCII), dropping empty tokens as ``str.split()`` does;
* ``Count``/``Sum``/``Min``/``Max`` -> ``groupBy().agg()`` (Spark aggregates partially before its
  shuffle, as Trident's combiners do); ``Sum`` of nothing is ``0`` (its ``zero()``);
* ``project`` -> ``select``; merges -> ``unionAll``; joins -> null-safe equi-joins (Python's
  ``None == None``), ``outer`` sides as left/full outer joins;
* exact partitions -> ``repartitionById`` on a computed partition id.

>>> print(_WHITESPACE)
(?U)[\s\x1c-\x1f]+
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_trident.graph import AggPart, JoinNode
from airflow_trident.operation.builtin import Count, Max, Min, Split, Sum
from airflow_trident.runtime.spark.jvm_functions import split_function
from airflow_trident.tuple import Fields

__all__ = [
    "PID",
    "ROW",
    "agg_exprs",
    "builtin_parts",
    "col",
    "exact_sum",
    "exact_partitions",
    "hash_pid",
    "is_split",
    "join",
    "regex_split_words",
    "select",
    "split_words",
    "union",
]

PID = "__trident_pid__"
ROW = "__trident_row__"  # keeps the row count of a frame whose fields are all unused

# Python's whitespace is Unicode's White_Space (Java's \s under (?U)) plus \x1c-\x1f. Java's
# String.split compiles the pattern for every row: a short pattern is twice as fast as a class
# listing the 29 characters.
_WHITESPACE = r"(?U)[\s\x1c-\x1f]+"
_ORDERED = (T.NumericType, T.StringType, T.DateType, T.TimestampType, T.TimestampNTZType)


def col(name: str) -> Column:
    """The column called ``name`` (quoted: field names may hold dots)."""
    return F.col("`" + name.replace("`", "``") + "`")


def select(df: DataFrame, columns: Sequence[str]) -> DataFrame:
    """``df`` with only ``columns`` (or the row-count placeholder when there are none)."""
    if not columns:
        return df.select(F.lit(None).cast("boolean").alias(ROW))
    return df.select(*[col(c) for c in columns])


def is_split(function: Any, input_type: T.DataType | None, width: int) -> bool:
    """Whether an ``each`` can run as Spark SQL: the built-in ``Split`` of a string field."""
    return type(function) is Split and isinstance(input_type, T.StringType) and width == 1


def split_words(df: DataFrame, source: str, target: str, keep: Sequence[str]) -> DataFrame:
    """One row per whitespace-separated word of ``source`` (none for ``None``, as ``Split``),
    with the ``keep`` columns: by the package's Java ``str.split()`` where the session has it
    (:mod:`~airflow_trident.runtime.spark.jvm_functions`), else by Spark's ``split``."""
    function = split_function(df.sparkSession)
    if function is None:
        return regex_split_words(df, source, target, keep)
    text = F.call_udf(function, col(source))  # no empty words
    return df.select(*[col(c) for c in keep], F.explode(text).alias(target))


def regex_split_words(df: DataFrame, source: str, target: str, keep: Sequence[str]) -> DataFrame:
    """:func:`split_words` by Spark's ``split`` on Python's whitespace, for a session without the
    Java function."""
    text = F.split(col(source), _WHITESPACE)
    words = df.select(*[col(c) for c in keep], F.explode(text).alias(target))
    return words.where(col(target) != F.lit(""))


_BUILTINS = (Count, Sum, Min, Max)


def builtin_parts(parts: Sequence[AggPart], types: Callable[[], Mapping[str, T.DataType]]) -> bool:
    """Whether every aggregator of ``parts`` is a built-in Spark can run on these columns
    (``types``: the columns' Spark types, asked only when a value is aggregated)."""
    for part in parts:
        agg = type(part.aggregator)
        if agg not in _BUILTINS:
            return False
        if agg is Count:
            continue
        if not part.input_fields:
            return False
        kind = types().get(part.input_fields[0])
        wanted = T.NumericType if agg is Sum else _ORDERED
        if not isinstance(kind, wanted):
            return False
    return True


def agg_exprs(
    parts: Sequence[AggPart],
    names: Sequence[str],
    types: Callable[[], Mapping[str, T.DataType]] | None = None,
) -> list[Column]:
    """One aggregate column per part, named ``names``; ``types``: the input columns' Spark
    types, asked only for a ``Sum`` (of an integer column, it is exact: :func:`exact_sum`)."""
    exprs = []
    for part, name in zip(parts, names, strict=True):
        agg = type(part.aggregator)
        if agg is Count:
            expr = F.count(F.lit(1))
        else:
            field = part.input_fields[0]
            value = col(field)
            if agg is Sum and types is not None and isinstance(types().get(field), T.IntegralType):
                expr = exact_sum(value, f"Sum of {field!r} into {name!r}")
            elif agg is Sum:
                expr = F.coalesce(F.sum(value), F.lit(0))
            elif agg is Min:
                expr = F.min(value)
            else:
                expr = F.max(value)
        exprs.append(expr.alias(name))
    return exprs


_INT64 = (-(2**63), 2**63 - 1)


def exact_sum(value: Column, what: str) -> Column:
    """The sum of the integer column ``value`` as an int64 (``0`` for none), as in process:
    exact whatever the partial sums (Spark's ``sum`` of a ``bigint`` fails on a partial sum
    beyond int64, or wraps without ANSI mode). Each value is summed as its high and low 32 bits
    (two int64 sums that cannot overflow below 2^31 values per group and batch), put together
    in ``decimal``; a sum that does not fit int64 fails the batch saying so (in process it is a
    Python int; Spark's column is 64-bit). As fast as ``sum`` (a ``decimal`` sum: 3x slower).
    """
    v = value.cast(T.LongType())
    high = F.sum(F.shiftright(v, 32)).cast(T.DecimalType(20, 0))
    low = F.sum(v.bitwiseAND(F.lit(0xFFFFFFFF))).cast(T.DecimalType(20, 0))
    total = high * F.lit(2**32).cast(T.DecimalType(10, 0)) + low
    beyond = (
        f"{what}: the sum leaves int64 (Spark SQL's integer columns are 64-bit); the batch is "
        f"not committed"
    )
    fits = total.between(F.lit(_INT64[0]), F.lit(_INT64[1]))
    return (
        F.when(total.isNull(), F.lit(0).cast(T.LongType()))
        .when(fits, total.cast(T.LongType()))
        .otherwise(F.raise_error(F.lit(beyond)).cast(T.LongType()))
    )


def union(frames: Sequence[DataFrame], fields: Sequence[Fields], out: Fields) -> DataFrame:
    """The merge of ``frames`` (positional, renamed to ``out``)."""
    renamed = [
        df.select(*[col(f).alias(o) for f, o in zip(names, out, strict=True)])
        for df, names in zip(frames, fields, strict=True)
    ]
    return functools.reduce(DataFrame.unionAll, renamed)


def join(node: JoinNode, frames: Sequence[DataFrame], fields: Sequence[Fields]) -> DataFrame:
    """``node``'s join of ``frames``: join fields, then each side's other fields.

    Inner sides must all match a key; ``outer`` sides join when present. Keys compare null-safe.
    """
    sides = []
    keys: list[list[str]] = []
    for i, (df, names) in enumerate(zip(frames, fields, strict=True)):
        sides.append(df.select(*[col(f).alias(_side(i, f)) for f in names]))
        keys.append([_side(i, f) for f in node.join_fields[i]])
    inner = [i for i, t in enumerate(node.join_types) if t == "inner"]
    order = (
        inner + [i for i in range(len(sides)) if i not in inner]
        if inner
        else list(range(len(sides)))
    )
    joined = sides[order[0]]
    key_cols = [col(k) for k in keys[order[0]]]
    for i in order[1:]:
        how = "inner" if i in inner else ("left" if inner else "full")
        cond = functools.reduce(
            lambda a, b: a & b,
            [a.eqNullSafe(col(b)) for a, b in zip(key_cols, keys[i], strict=True)],
        )
        joined = joined.join(sides[i], on=cond, how=how)
        if how == "full":
            key_cols = [F.coalesce(a, col(b)) for a, b in zip(key_cols, keys[i], strict=True)]
    n_keys = len(node.join_fields[0])
    outputs = [k.alias(name) for k, name in zip(key_cols, node.fields[:n_keys], strict=True)]
    rest = iter(node.fields[n_keys:])
    for i, others in enumerate(node.other_fields):
        outputs.extend(col(_side(i, f)).alias(next(rest)) for f in others)
    return joined.select(*outputs)


def _side(index: int, name: str) -> str:
    return f"__j{index}_{name}"


def exact_partitions(
    spark: SparkSession, df: DataFrame, pid: Column, n: int, *, sentinel: bool
) -> DataFrame:
    """``df`` in exactly ``n`` partitions, row ``r`` in partition ``pid(r) mod n``.

    With ``sentinel``, every partition also gets one row with :data:`SENTINEL` true, so a
    Python step runs for it even when it holds no tuples (Spark skips empty partitions).
    """
    from airflow_trident.runtime.spark.python_ops import SENTINEL

    keyed = df.withColumn(PID, pid.cast("int"))
    if sentinel:
        keyed = keyed.withColumn(SENTINEL, F.lit(False))
        marks = spark.range(n).select(
            F.col("id").cast("int").alias(PID), F.lit(True).alias(SENTINEL)
        )
        keyed = keyed.unionByName(marks, allowMissingColumns=True)
    return keyed.repartitionById(n, PID).drop(PID)


def hash_pid(keys: Sequence[str], n: int) -> Column:
    """The partition of ``keys`` among ``n`` (Spark's own hash partitioning)."""
    if not keys:
        return F.lit(0)
    return F.pmod(F.hash(*[col(k) for k in keys]), F.lit(n))
