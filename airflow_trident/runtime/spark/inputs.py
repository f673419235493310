"""Where a stage's tuples come from on Spark: emitted rows, a repartition, a merge, a join, or a
built-in aggregation finished by Spark's ``groupBy``.

Exact partitions (see ``liveness``) are made with ``repartitionById`` on a computed partition id;
otherwise Spark chooses (``repartition(cols)``, adaptive shuffle partitions).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_type

from airflow_trident.errors import ConfigurationError
from airflow_trident.graph import AggregateNode, JoinNode, MergeNode, RepartitionNode
from airflow_trident.planner.plan import FinalAgg, PersistSink, Stage
from airflow_trident.runtime.join import join_partitions
from airflow_trident.runtime.repartition import repartition
from airflow_trident.runtime.result import Partitions
from airflow_trident.runtime.spark import compile as C
from airflow_trident.runtime.spark.arrow_types import arrow_type
from airflow_trident.runtime.spark.columns import array_of
from airflow_trident.runtime.spark.driver_read import (
    READ_HERE_BYTES,
    READ_HERE_RECORDS,
    reads_here,
    table_here,
)
from airflow_trident.runtime.spark.frames import Frame, PendingAgg, Sample
from airflow_trident.runtime.spark.native import native_partitions, native_types
from airflow_trident.runtime.spark.python_ops import (
    LocalStep,
    PartitionerSegment,
    PythonSegment,
    driver_copy,
)
from airflow_trident.spout.ranges import PartitionRows
from airflow_trident.tuple import Fields

__all__ = [
    "aggregated",
    "combined",
    "establish",
    "joined",
    "merged",
    "moved",
    "source",
]

Row = tuple[Any, ...]


def combined(sink: PersistSink) -> FinalAgg:
    """The final combine of a combiner sink's partials (one row per group), as a step."""
    node = sink.node
    agg = AggregateNode(
        node.id, (), sink.fields, parts=node.parts, group_fields=node.group_fields, scope="batch"
    )
    return FinalAgg(agg, True, sink.fields)


def source(
    spark: SparkSession,
    fields: Fields,
    emitted: Mapping[str, Sequence[Row]],
    columns: tuple[str, ...],
    *,
    exact: bool,
    sentinel: bool,
    sample_rows: int,
    read_here_bytes: int = READ_HERE_BYTES,
    read_here_records: int = READ_HERE_RECORDS,
) -> Frame:
    """The emitted rows (``columns`` of them), built column by column into one Arrow table.

    Exact: one Spark partition per source partition, in name order (the local runtime's).
    Ranges are read by Spark, or by this process when they hold at most ``read_here_bytes``
    (ranges that know their records, not their bytes: ``read_here_records``)
    (:mod:`~airflow_trident.runtime.spark.driver_read`).
    """
    parts = sorted(emitted.items())
    if any(isinstance(part, PartitionRows) and part.native for _, part in parts):
        if not read_by_spark(emitted, read_here_bytes, read_here_records):
            ranged = cast(list[tuple[str, PartitionRows]], parts)  # reads_here checked it
            return _source_here(spark, fields, ranged, columns, exact, sentinel, sample_rows)
        return _native_source(spark, fields, parts, columns, exact, sentinel, sample_rows)
    rows = [r for _, part in parts for r in part]
    arrays, names, pickled = [], list(columns), set()
    for name in columns:
        index = fields.index(name)
        array, is_pickled = array_of([r[index] for r in rows])
        arrays.append(array)
        if is_pickled:
            pickled.add(name)
    if not columns:
        arrays, names = [pa.nulls(len(rows), pa.bool_())], [C.ROW]
    n = max(1, len(parts))
    exact = exact or sentinel
    if exact:
        counts = [len(part) for _, part in parts]
        pids = itertools.chain.from_iterable(itertools.repeat(i, c) for i, c in enumerate(counts))
        arrays.append(pa.array(list(pids), pa.int32()))
        names.append(C.PID)
    df = spark.createDataFrame(pa.Table.from_arrays(arrays, names=names))
    if exact:
        df = C.exact_partitions(spark, df, C.col(C.PID), n, sentinel=sentinel)
    sample = [list(part[:sample_rows]) for _, part in parts] or [[]]
    types = {c: from_arrow_type(a.type) for c, a in zip(columns, arrays, strict=False)}
    frame = Frame(df, fields, columns, Sample(sample), frozenset(pickled), exact, n, sentinel)
    return frame.but(known_types=types)


def read_by_spark(
    emitted: Mapping[str, Sequence[Row]],
    read_here_bytes: int = READ_HERE_BYTES,
    read_here_records: int = READ_HERE_RECORDS,
) -> bool:
    """Whether :func:`source` has Spark read ``emitted`` (ranges too large to read here);
    else this process reads or holds every tuple of it."""
    parts = sorted(emitted.items())
    if not any(isinstance(part, PartitionRows) and part.native for _, part in parts):
        return False
    return not reads_here(parts, read_here_bytes, read_here_records)


def _source_here(
    spark: SparkSession,
    fields: Fields,
    parts: Sequence[tuple[str, PartitionRows]],
    columns: tuple[str, ...],
    exact: bool,
    sentinel: bool,
    sample_rows: int,
) -> Frame:
    """Small ranges read by this process (:func:`~.driver_read.table_here`), one Arrow table
    of their read specs' types; exact: one Spark partition per source partition."""
    exact = exact or sentinel
    table, rows_of = table_here(parts, columns, C.PID if exact else None)
    df = spark.createDataFrame(table)
    n = max(1, len(parts))
    if exact:
        df = C.exact_partitions(spark, df, C.col(C.PID), n, sentinel=sentinel)
    sample = Sample([rows[:sample_rows] for rows in rows_of] or [[]])
    frame = Frame(df, fields, columns, sample, frozenset(), exact, n, sentinel)
    types = {c: from_arrow_type(table.schema.field(c).type) for c in columns}
    return frame.but(known_types=types)


def _native_source(
    spark: SparkSession,
    fields: Fields,
    parts: Sequence[tuple[str, Sequence[Row]]],
    columns: tuple[str, ...],
    exact: bool,
    sentinel: bool,
    sample_rows: int,
) -> Frame:
    """The emitted ranges read by Spark (:mod:`~airflow_trident.runtime.spark.native`): one or
    more tasks per source partition; exact: one Spark partition per source partition."""
    native: list[tuple[str, PartitionRows]] = []
    for name, part in parts:
        if not isinstance(part, PartitionRows) or part.emitted_rows:
            msg = (
                f"source partition {name!r} mixes tuples emitted one by one with ranges: a "
                f"spout emits either (emit_range for every partition, or emit)"
            )
            raise ConfigurationError(msg)
        native.append((name, part))
    exact = exact or sentinel
    df = native_partitions(spark, native, C.PID if exact else None)
    cols = [C.col(c) for c in columns] or [F.lit(None).cast("boolean").alias(C.ROW)]
    df = df.select(*cols, C.col(C.PID)) if exact else df.select(*cols)
    if exact:
        df = C.exact_partitions(spark, df, C.col(C.PID), max(1, len(parts)), sentinel=sentinel)
    sample = Sample(lambda: [list(part[:sample_rows]) for _, part in parts] or [[]])
    n = max(1, len(parts))
    frame = Frame(df, fields, columns, sample, frozenset(), exact, n, sentinel)
    spec_types = native_types(native)
    if sentinel or not columns or spec_types is None or not set(columns) <= set(spec_types):
        return frame  # Spark is asked for the types when they are needed
    return frame.but(known_types={c: spec_types[c] for c in columns})


def moved(
    spark: SparkSession,
    up: Frame,
    how: RepartitionNode,
    hint: int | None,
    *,
    exact: bool,
    sentinel: bool,
    txid: int,
    timezone: Callable[[], str],
) -> Frame:
    """``up`` repartitioned by ``how`` into ``hint`` partitions (the local runtime: 1 without
    a hint; Spark chooses when exact partitions are not needed)."""
    n = hint or 1
    keys = [up.fields.index(f) for f in how.key_fields]
    sample = Sample(
        lambda: repartition(up.sample.rows, how.method, keys, n, driver_copy(how.partitioner))
    )
    exact = exact or sentinel or how.method not in ("partition_by", "shuffle")
    df = up.df
    if how.method == "partition_by" and not exact:
        cols = [C.col(k) for k in how.key_fields]
        df = df.repartition(hint, *cols) if hint else df.repartition(*cols)
    elif how.method == "shuffle" and not exact:
        count = hint or int(str(spark.conf.get("spark.sql.shuffle.partitions")))
        df = df.repartition(count)
    else:
        if how.method == "partition_by":
            pid = C.hash_pid(how.key_fields, n)
        elif how.method == "shuffle":
            pid = F.pmod(F.hash(*[C.col(c) for c in up.columns or (C.ROW,)]), F.lit(n))
        elif how.method == "broadcast":
            df = df.crossJoin(spark.range(n).select(F.col("id").cast("int").alias(C.PID)))
            pid = C.col(C.PID)
        elif how.method == "custom":
            df = _custom(up, how, n, txid, timezone)
            pid = C.col(C.PID)
        else:  # global, batch_global
            n, pid = 1, F.lit(0)
        df = C.exact_partitions(spark, df, pid, n, sentinel=sentinel)
    return up.but(df=df, sample=sample, exact=exact, nparts=n, sentinel=sentinel)


def _custom(
    up: Frame, how: RepartitionNode, n: int, txid: int, timezone: Callable[[], str]
) -> DataFrame:
    """``up`` with each row once per partition the custom partitioner sends it to."""
    spark_fields = [T.StructField(c, up.types()[c]) for c in up.columns]
    spark_fields.append(T.StructField(C.PID, T.IntegerType()))
    tz = timezone()
    arrow = pa.schema(
        [pa.field(f.name, arrow_type(f.dataType, tz)) for f in spark_fields]
    )
    fn = PartitionerSegment(txid, how.id, how.partitioner, n, up.fields, arrow, C.PID, up.pickled)
    return up.df.mapInArrow(fn, T.StructType(spark_fields))


def _pickled_too(frame: Frame, columns: set[str], txid: int, timezone: Callable[[], str]) -> Frame:
    """``frame`` with ``columns`` pickled as well (a Python pass that re-encodes them)."""
    pickled = frame.pickled | columns
    spark_fields = [
        T.StructField(c, T.BinaryType() if c in pickled else frame.types()[c])
        for c in frame.columns
    ]
    tz = timezone()
    arrow = pa.schema(
        [pa.field(f.name, arrow_type(f.dataType, tz)) for f in spark_fields]
    )
    fn = PythonSegment(
        txid, (), (), frame.fields, frame.fields, arrow, frame.pickled, frozenset(pickled)
    )
    df = C.select(frame.df, frame.columns).mapInArrow(fn, T.StructType(spark_fields))
    return frame.but(df=df, pickled=frozenset(pickled))


def _merge_types(stages: Sequence[Frame], txid: int, timezone: Callable[[], str]) -> list[Frame]:
    """The inputs with one type per merged field: Spark widens numbers; other mismatches are
    pickled on every side (Python's merge does not care about types)."""
    mismatched: set[int] = set()
    for k in range(len(stages[0].fields)):
        kinds = {"pickled" if f.fields[k] in f.pickled else f.types()[f.fields[k]] for f in stages}
        numeric = all(isinstance(t, T.NumericType) for t in kinds)
        if len(kinds) > 1 and not numeric:
            mismatched.add(k)
    if not mismatched:
        return list(stages)
    out = []
    for f in stages:
        wanted = {f.fields[k] for k in mismatched} - f.pickled
        out.append(_pickled_too(f, wanted, txid, timezone) if wanted else f)
    return out


def merged(
    stages: Sequence[Frame], node: MergeNode, txid: int, timezone: Callable[[], str]
) -> Frame:
    """The union of the inputs, partitions after partitions (as Trident's merge)."""
    stages = _merge_types(stages, txid, timezone)
    frames = [C.select(f.df, f.fields) for f in stages]
    df = C.union(frames, [f.fields for f in stages], node.fields)
    pickled = {
        node.fields[k] for up in stages for k, name in enumerate(up.fields) if name in up.pickled
    }
    sample = Sample(lambda: [part for up in stages for part in up.sample.rows])
    exact = all(f.exact for f in stages)
    nparts = sum(f.nparts for f in stages)
    return Frame(df, node.fields, node.fields, sample, frozenset(pickled), exact, nparts)


def joined(stages: Sequence[Frame], node: JoinNode, hint: int | None) -> Frame:
    """The join of the inputs (Spark shuffles them by key itself)."""
    fields = [f.fields for f in stages]
    df = C.join(node, [C.select(f.df, f.fields) for f in stages], fields)
    n = hint or 1

    def sample() -> Partitions:
        samples = [
            repartition(up.sample.rows, "partition_by", [up.fields.index(k) for k in keys], n)
            for up, keys in zip(stages, node.join_fields, strict=True)
        ]
        return join_partitions(node, samples, fields)

    sources = [(stages[0], k) for k in node.join_fields[0]]
    sources += [
        (up, f) for up, others in zip(stages, node.other_fields, strict=True) for f in others
    ]
    pickled = {out for out, (up, f) in zip(node.fields, sources, strict=True) if f in up.pickled}
    return Frame(df, node.fields, node.fields, Sample(sample), frozenset(pickled), False, n)


def aggregated(
    stage: Stage,
    op: FinalAgg | PersistSink,
    pending: PendingAgg,
    up: Frame,
    txid: int,
    states: Any,
    *,
    exact: bool,
) -> Frame:
    """A built-in combiner aggregation, partial and final, as one ``groupBy().agg()`` (then in
    ``hint`` partitions by key, unless :func:`establish` makes them exact next)."""
    node = pending.node
    group = list(node.group_fields)
    exprs = C.agg_exprs(node.parts, op.fields[len(group) :], pending.pre.types)
    keys = [C.col(k) for k in group]
    pre = pending.pre.df
    df = pre.groupBy(*keys).agg(*exprs) if group else pre.agg(*exprs)
    if group and stage.parallelism and not exact:
        df = df.repartition(stage.parallelism, *keys)
    n = stage.parallelism or 1
    assert stage.inputs[0].repartition is not None
    method = stage.inputs[0].repartition.method
    step = op if isinstance(op, FinalAgg) else combined(op)

    def sample() -> Partitions:
        rows = repartition(up.sample.rows, method, list(range(len(group))), n)
        return LocalStep(step, stage.in_fields, txid, states).partitions(rows)

    pickled = frozenset(k for k in group if k in pending.pre.pickled)  # keys stay pickled
    return Frame(df, op.fields, op.fields, Sample(sample), pickled, False, n)


def establish(
    spark: SparkSession, stage: Stage, frame: Frame, *, exact: bool, sentinel: bool
) -> Frame:
    """A join's, merge's or aggregation's output as the batch's partitions, when needed:
    by key (``hint`` or 1 partitions), or the merged partitions with sentinel rows."""
    if not (exact or sentinel) or (frame.exact and not sentinel):
        return frame
    first = stage.ops[0]
    if frame.exact:
        pid, n = F.spark_partition_id(), frame.nparts
    else:
        keys: Sequence[str] = ()
        if isinstance(first, JoinNode):
            keys = first.fields[: len(first.join_fields[0])]
        elif isinstance(first, FinalAgg | PersistSink):
            keys = first.node.group_fields
        n = (stage.parallelism or 1) if keys else 1
        pid = C.hash_pid(keys, n)
    df = C.exact_partitions(spark, frame.df, pid, n, sentinel=sentinel)
    return frame.but(df=df, exact=True, nparts=n, sentinel=sentinel)
