"""What :class:`~airflow_trident.runtime.spark.SparkBatchProcessor` returns: lazy DataFrames.

Nothing runs until an action; run actions through :meth:`SparkProcessResult.run` (or the
collecting helpers) so that a failure in a user operation surfaces as the local runtime's
:class:`~airflow_trident.errors.BatchFailedError`, naming step, txid and record.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, TypeVar

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_trident.errors import MalformedRecordError, TridentError
from airflow_trident.runtime.result import ProcessResult, StagedState
from airflow_trident.runtime.spark.columns import python_values
from airflow_trident.runtime.spark.compile import col
from airflow_trident.runtime.spark.python_ops import batch_failure
from airflow_trident.tuple import Fields

__all__ = ["SparkProcessResult", "SparkStagedState", "frame_rows"]

R = TypeVar("R")

log = logging.getLogger(__name__)

_SPARK_PARTITION = "__trident_spark_partition"

_SIMPLE_TYPES = (T.StringType, T.LongType, T.IntegerType, T.ShortType, T.ByteType,
                 T.DoubleType, T.FloatType, T.BooleanType, T.BinaryType)  # fmt: skip


def frame_rows(df: DataFrame, fields: Fields, pickled: frozenset[str]) -> list[tuple[Any, ...]]:
    """The rows of ``df`` as tuples of ``fields`` (pickled columns unpickled); an action."""
    table = df.select(*[col(f) for f in fields]).toArrow() if fields else df.toArrow()
    if not fields:
        return [()] * table.num_rows
    columns = []
    for name in fields:
        values = python_values(table.column(name))
        if name in pickled:
            values = [None if v is None else pickle.loads(v) for v in values]
        columns.append(values)
    return list(zip(*columns, strict=True))


@dataclass(frozen=True)
class SparkStagedState:
    """Rows staged for one state's commit, as a DataFrame (see ``PersistSink``).

    ``combine``: group fields + one combined value per group, one row per group. ``pickled``
    names columns holding pickled Python values (Arrow could not type them). ``partitions``:
    the frame's Spark partitions are exactly the batch's commit partitions, this many (Spark
    partition ``i`` is commit partition ``i``, as in process); ``None``: Spark chose them.
    """

    state: str
    kind: Literal["combine", "reduce", "update"]
    fields: Fields
    frame: DataFrame
    pickled: frozenset[str] = frozenset()
    partitions: int | None = None


@dataclass
class SparkProcessResult:
    """Staged states, stage outputs and emitted counts of one batch on Spark.

    Use it as a context manager (or call :meth:`close`): stage outputs read by several stages
    are cached until then.
    """

    txid: int
    staged: dict[str, SparkStagedState] = field(default_factory=dict)
    producers: dict[str, Callable[[], DataFrame]] = field(default_factory=dict)
    emitted: dict[str, Mapping[str, int]] = field(default_factory=dict)
    output_fields: dict[str, Fields] = field(default_factory=dict)
    output_pickled: dict[str, frozenset[str]] = field(default_factory=dict)
    cached: list[DataFrame] = field(default_factory=list)
    first_malformed: Callable[[], MalformedRecordError | None] | None = None
    """The batch's first malformed record in the in-process order, read again by Spark (set
    when the sources have ranges whose tasks cannot tell: see ``native.first_malformed``)."""
    range_gone: Callable[[], TridentError | None] | None = None
    """The refusal of the batch's first range its source no longer holds (a Kafka range aged
    out), asked when an action fails (see ``native.range_gone``)."""
    inputs_here: bool = False
    """Whether this process read or held every tuple the batch's sources emitted (no range
    was read by Spark): its input fit in the driver's memory."""

    @property
    def records_in(self) -> int:
        """Tuples the spouts emitted."""
        return sum(sum(p.values()) for p in self.emitted.values())

    @property
    def stages(self) -> list[str]:
        """The stages run, upstream first."""
        return list(self.producers)

    def output(self, stage_id: str) -> DataFrame:
        """The output DataFrame of stage ``stage_id`` (its fields later steps read; every field
        for a last stage or one asked for with ``process(..., outputs=...)``)."""
        return self.producers[stage_id]()

    def frames(self) -> dict[str, tuple[str, Fields, DataFrame]]:
        """``(kind, fields, DataFrame)`` of each staged state (see :class:`SparkStagedState`
        for pickled columns)."""
        return {name: (s.kind, s.fields, s.frame) for name, s in self.staged.items()}

    def staged_here(self, name: str) -> dict[int, pa.Table] | None:
        """State ``name``'s staged rows collected to this process, by Spark partition (the
        non-empty ones; partition 0, empty, when there is no row: the files Spark's writer
        would write), when writing them here beats a Spark write job (~0.1 s per batch on
        ``local[2]``): the batch's input was read here (:attr:`inputs_here`), the state is an
        aggregate's (a row per group, no more than the input's tuples) without fixed commit
        partitions, and every column is of a type whose Parquet values read back alike from
        either writer (strings, integers, floating point, booleans, bytes). ``None``: write
        them with Spark's writer."""
        staged = self.staged[name]
        if not self.inputs_here or staged.partitions is not None or not staged.fields:
            return None
        if staged.kind not in ("combine", "reduce"):
            return None
        types = {f.name: f.dataType for f in staged.frame.schema.fields}  # one request at most
        if not all(isinstance(types.get(name), _SIMPLE_TYPES) for name in staged.fields):
            return None
        columns = [col(f) for f in staged.fields]
        frame = staged.frame.select(*columns, F.spark_partition_id().alias(_SPARK_PARTITION))
        table: pa.Table = self.run(frame.toArrow)
        return _by_partition(table)

    def run(self, action: Callable[[], R]) -> R:
        """Run a Spark action; a failure becomes the batch's error (``BatchFailedError``), a
        malformed record the one the in-process runtime names (:meth:`malformed`)."""
        try:
            return action()
        except TridentError as exc:
            if isinstance(exc, MalformedRecordError):
                raise self.malformed(exc) from exc
            raise
        except Exception as exc:
            gone = self._gone()
            if gone is not None:  # the in-process read's refusal, not the connector's error
                raise gone from exc
            error = batch_failure(exc, self.txid)
            if isinstance(error, MalformedRecordError):
                error = self.malformed(error)
            raise error from exc

    def _gone(self) -> TridentError | None:
        if self.range_gone is None:
            return None
        try:
            return self.range_gone()
        except Exception:  # the batch fails either way: with the error met
            log.warning("txid %d: could not ask whether its ranges are still held", self.txid,
                        exc_info=True)  # fmt: skip
            return None

    def malformed(self, error: MalformedRecordError) -> MalformedRecordError:
        """The batch's first malformed record's error for ``error`` (the one a task, or a
        driver-side sample, met first); ``error`` itself when the sources cannot tell."""
        if self.first_malformed is None:
            return error
        try:
            first = self.first_malformed()
        except Exception:  # the batch fails either way: with the error met
            log.warning("txid %d: could not look for the first malformed record", self.txid,
                        exc_info=True)  # fmt: skip
            return error
        return error if first is None else first

    def output_rows(self, stage_id: str) -> list[tuple[Any, ...]]:
        """The tuples stage ``stage_id`` output (an action)."""
        df = self.output(stage_id)
        fields = tuple(f for f in self.output_fields[stage_id] if f in df.columns)
        return self.run(lambda: frame_rows(df, fields, self.output_pickled[stage_id]))

    def collect(self, state: str) -> StagedState:
        """State ``state``'s staged rows as one partition (an action)."""
        s = self.staged[state]
        rows = self.run(lambda: frame_rows(s.frame, s.fields, s.pickled))
        return StagedState(state, s.kind, s.fields, [rows])

    def to_process_result(self) -> ProcessResult:
        """Everything staged, collected to the driver, as the local runtime returns it (for
        :class:`~airflow_trident.runtime.commit.StateCommitter` and the staging area)."""
        result = ProcessResult(self.txid)
        result.staged = {name: self.collect(name) for name in self.staged}
        result.emitted = {k: dict(v) for k, v in self.emitted.items()}
        return result

    def close(self) -> None:
        """Release cached stage outputs."""
        for df in self.cached:
            df.unpersist()
        self.cached.clear()

    def __enter__(self) -> SparkProcessResult:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _by_partition(table: pa.Table) -> dict[int, pa.Table]:
    """``table``'s rows by their :data:`_SPARK_PARTITION` (dropped), in partition order."""
    import pyarrow.compute as pc

    parts = table.column(_SPARK_PARTITION)
    rows = table.drop_columns([_SPARK_PARTITION])
    if table.num_rows == 0:
        return {0: rows}
    return {int(p): rows.filter(pc.equal(parts, p))
            for p in sorted(pc.unique(parts).to_pylist())}  # fmt: skip
