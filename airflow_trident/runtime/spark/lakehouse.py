"""Delta sinks committed through Spark's own Delta writer (``commit_mode="spark"``).

A state whose factory says Spark's Delta writer can append it
(:meth:`~airflow_trident.state.delta.DeltaStateFactory.spark_append`: the plain
:class:`~airflow_trident.state.delta.DeltaWriter`, appending, no ``conn_id``/``storage_options``:
Spark reaches the table with its own file-system configuration) is committed by the driver
(:data:`DELTA`, a :class:`SparkWriter`) when the session runs Delta's Spark
connector (``spark.sql.extensions`` names ``io.delta.sql.DeltaSparkSessionExtension``): each
commit partition's staged Parquet is read by Spark and appended by Spark's Delta writer in one
Delta commit carrying the application transaction ``(<app_id>.p<i>of<n>, txid)`` (the writer's
``txnAppId``/``txnVersion`` options) — the record the Python writer (delta-rs) checks, so either
writer skips a partition the other committed. One Spark write records one application
transaction: the app-level one, ``(<app_id>, txid * 4096 + n)``, follows in a Delta commit of
its own without data (delta-rs), as the Python writer would have recorded it.

Iceberg appends have their own Spark path (:mod:`airflow_trident.runtime.spark.iceberg`); every
other state is applied by the Spark tasks of
:class:`~airflow_trident.runtime.spark.commit.SparkBatchApplier` with the Python writer.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from airflow_trident.graph import PersistNode
from airflow_trident.state.base import AppendsOnSpark
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.delta import MAX_PARTITIONS, DeltaState

__all__ = [
    "DELTA",
    "DELTA_EXTENSION",
    "SparkWriter",
    "commit_with_spark_delta",
    "spark_writes_delta",
    "staged_partitions",
    "staged_uri",
]

log = logging.getLogger(__name__)

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"


def spark_writes_delta(spark: Any) -> bool:
    """Whether ``spark`` runs Delta's Spark connector (its session extension is configured;
    Delta refuses to read or write without it and its ``DeltaCatalog``)."""
    try:
        extensions = spark.conf.get("spark.sql.extensions", "") or ""
    except Exception:  # a session that cannot say: the Python writer, as before
        return False
    return DELTA_EXTENSION in extensions.split(",")


def table_format(node: PersistNode, entry: Mapping[str, Any]) -> str | None:
    """The table format whose Spark writer can append staged state ``entry`` of ``node``
    (:meth:`~airflow_trident.state.base.AppendsOnSpark.spark_append`: the factory says), or
    ``None``: the Python writer applies it. Only updates of rows Arrow carried."""
    if node.mode != "update" or entry.get("pickled"):
        return None
    if isinstance(node.factory, AppendsOnSpark):
        return node.factory.spark_append(node.updater)
    return None


def _delta_on_spark(node: PersistNode, entry: Mapping[str, Any]) -> bool:
    """Deprecated as ``delta_on_spark``: :func:`table_format` is ``"delta"``."""
    return table_format(node, entry) == "delta"


def __getattr__(name: str) -> Any:
    if name != "delta_on_spark":
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    warnings.warn(
        f"{__name__}.delta_on_spark is deprecated: the state factory says which Spark writer "
        f"appends its rows (airflow_trident.state.base.AppendsOnSpark.spark_append)",
        DeprecationWarning,
        stacklevel=2,
    )
    return _delta_on_spark


def commit_with_spark_delta(
    spark: Any, node: PersistNode, entry: Mapping[str, Any], txid: int, states: StateBinding
) -> int:
    """Append every commit partition of staged state ``entry`` that the Delta table does not
    hold yet, each in one Delta commit by Spark's writer; return how many were written."""
    written = 0
    for state, rows in staged_partitions(spark, node, entry, states):  # the factory's: Delta's
        if state.holds(txid):
            # a commit that died before its app-level record: record it now
            if state.written_txid() == txid:
                record_app_transaction(state, txid)
            continue
        if rows is None:  # no rows: nothing to record (as the Python writer)
            continue
        written += _append(state, rows(), txid)
    return written


def staged_partitions(
    spark: Any, node: PersistNode, entry: Mapping[str, Any], states: StateBinding
) -> Iterator[tuple[Any, Callable[[], Any] | None]]:
    """Each commit partition of staged state ``entry``: its state and a reader of its staged
    rows as a DataFrame of the written fields (``None``: the partition staged no rows)."""
    files = entry["files"]
    count = max(1, len(files))
    columns = list(node.updater.fields or entry["fields"])
    for index in range(count):
        state = states.make_state(node.factory, index, count)
        path = files[index]["path"] if files else None
        yield state, None if path is None else partial(_read_staged, spark, path, columns)


def _read_staged(spark: Any, path: str, columns: list[str]) -> Any:
    return spark.read.parquet(staged_uri(path)).select(*columns)


def _append(state: DeltaState, frame: Any, txid: int) -> int:
    from pyspark.sql import functions as F

    factory = state.factory
    column = factory.txid_column
    if column is not None:
        frame = frame.drop(column).withColumn(column, F.lit(txid).cast("long"))
    (
        frame.write.format("delta")
        .mode("append")
        .option("txnAppId", state.partition_app_id)
        .option("txnVersion", str(txid))
        .save(factory.path)
    )
    record_app_transaction(state, txid)
    log.info(
        "delta table %s: txid %d partition %d/%d appended by Spark's Delta writer",
        factory.path, txid, state.index, state.count,
    )  # fmt: skip
    return 1


_Commit = Callable[[Any, PersistNode, Mapping[str, Any], int, StateBinding], int]


@dataclass(frozen=True)
class SparkWriter:
    """A table format's own Spark writer, for the staged states whose factory names the format
    (:meth:`~airflow_trident.state.base.AppendsOnSpark.spark_append`): ``runs_in(spark)``,
    whether the session runs the format's connector; ``commit(spark, node, entry, txid,
    states)`` appends each commit partition of staged state ``entry`` the table does not hold
    yet, returning how many it wrote."""

    name: str
    runs_in: Callable[[Any], bool]
    commit: _Commit


DELTA = SparkWriter("Delta", spark_writes_delta, commit_with_spark_delta)
"""Spark's Delta writer (see the module docs)."""


def record_app_transaction(state: DeltaState, txid: int) -> None:
    """Record ``(<app_id>, txid * 4096 + n)`` in a Delta commit of its own (no data), unless
    the table already holds it or a later txid's."""
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    version = txid * _COUNT_BASE + state.count
    table = DeltaTable(state.factory.path)
    current = table.transaction_version(state.factory.app_id)
    if current is not None and current // _COUNT_BASE >= txid:
        return
    write_deltalake(
        state.factory.path,
        pa.schema(table.schema().to_arrow()).empty_table(),
        mode="append",
        commit_properties=CommitProperties(
            app_transactions=[Transaction(app_id=state.factory.app_id, version=version)]
        ),
    )


_COUNT_BASE = MAX_PARTITIONS + 1  # the app-level version's encoding (state/delta.py)


def staged_uri(path: str) -> str:
    """The URI Spark reads a staged Parquet file at (a local path becomes ``file://``)."""
    import pathlib

    return path if "://" in path else pathlib.Path(path).resolve().as_uri()
