"""User Python operations on Spark: a run of fused steps as one ``mapInArrow`` function.

The function runs in Spark's Python workers. A run of ``each`` and filters goes column to
column (:mod:`~airflow_trident.runtime.spark.columnar`). Other steps (and a batch the column
path cannot take: a step reading a field the batch lacks) take the row path: each Arrow batch
becomes row tuples, the steps run with the local runtime's own code
(:class:`~airflow_trident.runtime.local.LocalBatchProcessor` on a one-step plan), and the rows
become an Arrow batch again. ``each`` and filters take a faster loop there with the same
semantics; a failing record's error is worded by the local runtime's own function
(:func:`~airflow_trident.runtime.local.user_error`). No path runs user code that raised again:
each record is called once per attempt.

A failure crosses the Spark worker boundary inside a marker (:func:`failure_text`); the driver
finds it in Spark's exception and raises the same error (:func:`batch_failure`).

Each task prepares the steps' operations once, before its first Arrow batch, and cleans them up
after its last (also when it fails); the driver-side sample brackets each sample partition, and
runs on copies of the operations (:func:`driver_copy`): the workers get them as they were.

>>> text = failure_text(BatchFailedError("step 'x' failed in batch txid 3"))
>>> err = batch_failure(RuntimeError(f"Traceback...\\n{text}\\n at org.apache..."), 3)
>>> type(err).__name__, str(err)
('BatchFailedError', "step 'x' failed in batch txid 3")
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import gc
import operator
import pickle
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext, cloudpickle

from airflow_trident import errors
from airflow_trident.errors import BatchFailedError, FailedException, TridentError, decode_error
from airflow_trident.graph import EachNode, FilterNode, PersistNode, SpoutNode
from airflow_trident.operation.base import ColumnFunction
from airflow_trident.operation.inline import (
    InlinedExecute,
    InlinedKeep,
    inline_execute,
    inline_is_keep,
    method_source,
)
from airflow_trident.planner.plan import ExecutionPlan, Op, Stage
from airflow_trident.runtime.commit import query_state
from airflow_trident.runtime.local import LocalBatchProcessor, each_rows, user_error, width_error
from airflow_trident.runtime.operations import prepared
from airflow_trident.runtime.reference import cached_topology
from airflow_trident.runtime.result import Partitions
from airflow_trident.runtime.spark.columnar import columnar_ops, run_columns
from airflow_trident.runtime.spark.columns import (
    ColumnConversionError,
    rows_from_batch,
    rows_to_batch,
)
from airflow_trident.state.binding import StateBinding
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import Fields, TridentCollector, tuple_type

__all__ = [
    "SENTINEL",
    "LocalStep",
    "PythonSegment",
    "StateResolver",
    "batch_failure",
    "driver_copy",
    "failure_text",
]

Row = tuple[Any, ...]
Step = Callable[[list[Row]], list[Row]]
_T = TypeVar("_T")

SENTINEL = "__trident_sentinel__"
_SOURCE = "__trident_in__"
_TAG = errors.FAILURE_TAG
_FAILURE = re.compile(rf"<{_TAG} type=(\w+)>(.*?)</{_TAG}>", re.DOTALL)
_BATCH_ROWS = 65536


def failure_text(exc: TridentError) -> str:
    """``exc`` wrapped in a marker that survives Spark's exception wrapping."""
    return errors.failure_text(exc)


def batch_failure(exc: BaseException, txid: int) -> TridentError:
    """The error to raise on the driver for a Spark failure ``exc`` of batch ``txid``: the
    worker's own error when it carried one, else a :class:`BatchFailedError`."""
    found = _FAILURE.search(str(exc))
    if found is not None:
        return decode_error({"type": found.group(1), "message": found.group(2)})
    first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    msg = (
        f"Spark failed processing batch txid {txid}: {first[:500]}; the batch is not "
        f"committed and will be replayed"
    )
    return BatchFailedError(msg)


def driver_copy(value: _T) -> _T:
    """A copy of ``value`` (operations) for the driver's type sample to run: what the workers
    get, a pickle round trip as Spark ships it, so that what the sample does to the operations
    (a count kept on ``self``) never reaches the workers. A deep copy when it does not pickle;
    ``value`` itself when it does not copy either (then Spark cannot ship it anyway).

    >>> ops = [{"calls": 0}]
    >>> copied = driver_copy(ops)
    >>> copied[0]["calls"] += 6
    >>> ops, copied
    ([{'calls': 0}], [{'calls': 6}])
    """
    try:
        return pickle.loads(cloudpickle.dumps(value))  # type: ignore[no-any-return,no-untyped-call]
    except Exception:
        try:
            return copy.deepcopy(value)
        except Exception:
            return value


class _WorkerFailure(Exception):
    """Raised in a Python worker; its message carries the marked error."""


@dataclass(frozen=True)
class StateResolver:
    """Opens the states that ``state_query`` steps read, in a Spark worker: from the topology
    imported by ``reference`` (``module:attribute``) when given, else from pickled persist steps.

    In-memory states live in one process: a worker sees an empty one. Query SQL states. The
    run's state database (``binding``) travels with it, inside the task closure.
    """

    topology: str
    persists: tuple[PersistNode, ...] = ()
    reference: str | None = None
    binding: StateBinding | None = None

    def __call__(self, name: str) -> Any:
        if self.reference is not None:
            return query_state(cached_topology(self.reference), name, self.binding)
        t = TridentTopology(self.topology)
        for node in self.persists:
            step = t.add_node(functools.partial(_orphan, node), kind="persist", name=node.id)
            t.register_state(node.state, step.id)
        return query_state(t, name, self.binding)


def _orphan(node: PersistNode, step: str) -> PersistNode:
    """``node`` without its upstream steps (the workers' topology holds only persist steps)."""
    return dataclasses.replace(node, id=step, parents=())


class LocalStep:
    """One op run by the local runtime on a partition's rows.

    It prepares and cleans up the op's operations around each partition, unless
    ``prepare_operations=False`` (a :class:`PythonSegment` does that once per task). A window
    step uses its store only given the ``window_partition`` its rows are in (a Spark task's);
    else (the driver's type sample) it runs without one.
    """

    def __init__(
        self,
        op: Op,
        in_fields: Fields,
        txid: int,
        states: Callable[[str], Any],
        *,
        prepare_operations: bool = True,
        topology: str | None = None,
        window_partition: int | None = None,
    ) -> None:
        self.txid = txid
        source = SpoutNode(_SOURCE, (), in_fields)
        stage = Stage("op", source, (), (op,), None, "process", in_fields)
        name = topology or getattr(states, "topology", None) or "spark_segment"
        self._processor = LocalBatchProcessor(
            TridentTopology(name),
            ExecutionPlan(name, (stage,)),
            states=states,
            prepare_operations=prepare_operations,
            window_partition=window_partition,
            dry_windows=window_partition is None,
        )

    def partitions(self, parts: Partitions) -> Partitions:
        """Run the op on every partition of ``parts``."""
        sources = {f"{i:08d}": rows for i, rows in enumerate(parts)}
        return self._processor.process(self.txid, {_SOURCE: sources}).outputs["op"]

    def __call__(self, rows: list[Row]) -> list[Row]:
        return self.partitions([rows])[0]


def _failed(op: Op, txid: int, row: Row | None, exc: Exception) -> NoReturn:
    """Raise the local runtime's error for user code of ``op`` that raised ``exc`` on ``row``
    (``None``: on no one record) — worded by the local runtime's own function, without calling
    the user's code again."""
    error = user_error(op.id, txid, row, exc)
    if error is exc:
        raise error
    raise error from exc


def _view(index: Sequence[int]) -> Callable[[Row], tuple[Any, ...]]:
    if len(index) == 1:
        (only,) = index
        return lambda r: (r[only],)
    if not index:
        return lambda r: ()
    getter = operator.itemgetter(*index)
    return lambda r: getter(r)


def _fast_each(op: EachNode, in_fields: Fields, txid: int) -> Step:
    """``each`` with one collector per partition (same rows and errors as the local loop); a
    column function runs the local runtime's own code on each batch."""
    if isinstance(op.function, ColumnFunction):
        return functools.partial(each_rows, op, fields=in_fields, txid=txid)
    view = tuple_type(op.input_fields)
    width = len(op.function_fields)
    execute = op.function.execute
    index = [in_fields.index(f) for f in op.input_fields]
    single = index[0] if len(index) == 1 else -1
    values = _view(index)

    def run(rows: list[Row]) -> list[Row]:
        out: list[Row] = []
        append = out.append
        collector = TridentCollector()
        emitted = collector.rows
        for row in rows:
            try:
                execute(view((row[single],) if single >= 0 else values(row)), collector)
            except Exception as exc:
                _failed(op, txid, row, exc)
            if emitted:
                for new in emitted:
                    if len(new) != width:
                        raise width_error(op.id, txid, row, new, op.function_fields)
                    append(row + new)
                emitted.clear()
        return out

    return run


def _fast_filter(op: FilterNode, in_fields: Fields, txid: int) -> Step:
    values = _view([in_fields.index(f) for f in op.input_fields])
    view = tuple_type(op.input_fields)
    keep = op.filter.is_keep

    def run(rows: list[Row]) -> list[Row]:
        kept: list[Row] = []
        try:
            for row in rows:
                try:
                    result = keep(view(values(row)))
                except Exception as exc:
                    _failed(op, txid, row, exc)
                if result:  # its truthiness failing names no record, as in the local runtime
                    kept.append(row)
        except TridentError:
            raise
        except Exception as exc:
            _failed(op, txid, None, exc)
        return kept

    return run


@dataclass(frozen=True)
class PythonSegment:
    """The ``mapInArrow`` function of fused Python steps (pickled to the workers).

    ``fields`` are the input rows' fields, ``in_fields`` each op's input fields, ``out_fields``
    the output rows' (with no ops: a pass that only re-encodes columns, e.g. pickles them).
    ``whole``: the steps need a partition at once (aggregations); else batches stream.
    ``sentinel``: input batches carry :data:`SENTINEL` rows that only make sure the function
    runs for every partition (Spark skips empty ones); they are dropped first.
    ``inline_sources``: the source of each per-tuple function's ``execute`` (a filter's
    ``is_keep``) on the column path, read where the segment is made (the driver, which has the
    DAG file), for the workers to inline it (:mod:`~airflow_trident.operation.inline`).
    ``inline=False``: nothing is inlined (each is called per tuple).
    """

    txid: int
    ops: tuple[Op, ...]
    in_fields: tuple[Fields, ...]
    fields: Fields
    out_fields: Fields
    out_schema: pa.Schema
    pickled_in: frozenset[str] = frozenset()
    pickled_out: frozenset[str] = frozenset()
    whole: bool = False
    sentinel: bool = False
    states: StateResolver = field(default_factory=lambda: StateResolver("spark_segment"))
    inline_sources: tuple[str | None, ...] = ()
    inline: bool = True

    def __post_init__(self) -> None:
        if not self.inline_sources and self.columnar and self.inline:
            sources = tuple(_inline_source(op) for op in self.ops)
            object.__setattr__(self, "inline_sources", sources)

    @property
    def step_ids(self) -> str:
        """The steps, for messages."""
        return ", ".join(repr(op.id) for op in self.ops) or "(re-encoding)"

    @property
    def topology(self) -> str:
        """The topology's name (for the operations' context)."""
        return self.states.topology

    @contextlib.contextmanager
    def prepared(self) -> Iterator[None]:
        """Every op's operations prepared for this Spark task (cleaned up on leaving)."""
        task = TaskContext.get()
        index = task.partitionId() if task is not None else 0
        with contextlib.ExitStack() as stack:
            for op in self.ops:
                stack.enter_context(prepared(op, self.topology, self.txid, index, None))
            yield

    def steps(self) -> list[Step]:
        """The per-partition functions of the ops, in order."""
        steps: list[Step] = []
        task = TaskContext.get()
        partition = task.partitionId() if task is not None else 0
        for op, fields in zip(self.ops, self.in_fields, strict=True):
            local = LocalStep(
                op,
                fields,
                self.txid,
                self.states,
                prepare_operations=False,
                topology=self.topology,
                window_partition=partition,
            )
            if isinstance(op, EachNode):
                steps.append(_fast_each(op, fields, self.txid))
            elif isinstance(op, FilterNode):
                steps.append(_fast_filter(op, fields, self.txid))
            else:
                steps.append(local)
        return steps

    def run_rows(self, rows: list[Row], steps: Sequence[Step]) -> list[Row]:
        """Run every step on one partition's (or batch's) rows."""
        for step in steps:
            rows = step(rows)
        return rows

    def _rows(self, batch: pa.RecordBatch) -> list[Row]:
        if self.sentinel:
            batch = batch.filter(pc.invert(batch.column(SENTINEL)))
        return rows_from_batch(batch, self.fields, self.pickled_in)

    def _batches(self, rows: list[Row]) -> Iterator[pa.RecordBatch]:
        for start in range(0, len(rows), _BATCH_ROWS):
            chunk = rows[start : start + _BATCH_ROWS]
            try:
                yield rows_to_batch(chunk, self.out_fields, self.out_schema, self.pickled_out)
            except ColumnConversionError as exc:
                raise self._conversion_error(exc) from exc

    def _conversion_error(self, exc: ColumnConversionError) -> BatchFailedError:
        msg = (
            f"step(s) {self.step_ids} failed in batch txid {self.txid}: {exc}; the "
            f"type was inferred from a sample of the batch (or declared) — declare it with "
            f"`output_types = {{{exc.column!r}: pyarrow.<type>()}}` on the operation, or "
            f"`object` for any value (pickled)"
        )
        return BatchFailedError(msg)

    @functools.cached_property
    def columnar(self) -> bool:
        """Every step is ``each`` or a filter: batches go column to column, with no row
        tuples (:mod:`~airflow_trident.runtime.spark.columnar`)."""
        return not self.whole and columnar_ops(self.ops)

    def _columns(
        self, batch: pa.RecordBatch, inlined: Sequence[InlinedExecute | InlinedKeep | None] = ()
    ) -> pa.RecordBatch | None:
        """``batch`` through the steps, column by column; ``None`` when a step reads a
        field the batch lacks (nothing ran: the row path then runs the batch). User code that
        raises fails the batch with the local runtime's error, naming the record."""
        if self.sentinel:
            batch = batch.filter(pc.invert(batch.column(SENTINEL)))
        try:
            return run_columns(
                batch, self.ops, self.out_schema, self.pickled_in, self.pickled_out, inlined,
                txid=self.txid, in_fields=self.in_fields,
            )  # fmt: skip
        except ColumnConversionError as exc:
            raise self._conversion_error(exc) from exc

    def inlined(self) -> tuple[InlinedExecute | InlinedKeep | None, ...]:
        """Each op's ``execute`` (``is_keep``) as a comprehension, where it inlines (made in
        each task, for the task's own instances of the operations; ~0.4 ms each)."""
        if not self.inline:
            return ()
        return tuple(
            _inlined(op, source) for op, source in zip(self.ops, self.inline_sources, strict=False)
        )

    def paths(self, inlined: Sequence[object] = ()) -> str:
        """Which path each step runs on, for the process log: column to column (``inlined``,
        ``per tuple`` or ``column function``, given what :meth:`inlined` made), or row by row
        (the local runtime's code on row tuples).

        >>> from airflow_trident.operation.builtin import Split
        >>> split = EachNode("split", (), ("s", "w"), None, Split(), ("s",), ("w",))
        >>> PythonSegment(1, (split,), (("s",),), ("s",), ("s", "w"), pa.schema([])).paths()
        "column to column: 'split' per tuple"
        """
        if not self.columnar:
            return "row by row: " + ", ".join(repr(op.id) for op in self.ops)
        described = []
        for i, op in enumerate(self.ops):
            if isinstance(op, EachNode) and isinstance(op.function, ColumnFunction):
                how = "column function"
            else:
                how = "inlined" if i < len(inlined) and inlined[i] is not None else "per tuple"
            described.append(f"{op.id!r} {how}")
        off = "" if self.inline else " (inlining off)"
        return "column to column: " + ", ".join(described) + off

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        try:
            steps = self.steps()
            with self.prepared():
                if self.whole:
                    with _no_cyclic_gc():
                        rows = [r for batch in batches for r in self._rows(batch)]
                        out = list(self._batches(self.run_rows(rows, steps)))
                    yield from out
                    return
                columnar = self.columnar
                inlined = self.inlined() if columnar else ()
                for batch in batches:
                    with _no_cyclic_gc():
                        fast = self._columns(batch, inlined) if columnar else None
                        if fast is not None:
                            out = [fast] if fast.num_rows else []
                        else:
                            out = list(self._batches(self.run_rows(self._rows(batch), steps)))
                    yield from out
        except TridentError as exc:
            raise _WorkerFailure(failure_text(exc)) from None


def _inline_source(op: Op) -> str | None:
    """The source of a per-tuple function's ``execute`` or a filter's ``is_keep``."""
    if isinstance(op, EachNode) and not isinstance(op.function, ColumnFunction):
        return method_source(op.function, "execute")
    if isinstance(op, FilterNode):
        return method_source(op.filter, "is_keep")
    return None


def _inlined(op: Op, source: str | None) -> InlinedExecute | InlinedKeep | None:
    if source is None:
        return None
    if isinstance(op, EachNode):
        return inline_execute(op.function, source, op.input_fields)
    if isinstance(op, FilterNode):
        return inline_is_keep(op.filter, source, op.input_fields)
    return None


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while a batch's rows are built and processed.

    Every row makes a few tuples; the collector would scan the live rows again and again (it
    doubled the cost of a simple function). Reference counting still frees them; cycles wait
    for the next collection, after the batch.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def partition_targets(
    partitioner: Callable[[Row, int], Sequence[int]], step: str, txid: int, n: int
) -> Callable[[list[Row]], list[tuple[Row, int]]]:
    """Each row with each partition a custom partitioner sends it to."""

    def run(rows: list[Row]) -> list[tuple[Row, int]]:
        out: list[tuple[Row, int]] = []
        for row in rows:
            try:
                targets = partitioner(row, n)
            except TridentError as exc:
                if not isinstance(exc, FailedException):  # a FailedException names no step
                    raise
                msg = (
                    f"step {step!r} failed in batch txid {txid} on record {repr(row)[:200]}: "
                    f"FailedException: {exc}; the batch is not committed and will be replayed"
                )
                raise BatchFailedError(msg) from exc
            except Exception as exc:
                msg = (
                    f"step {step!r} failed in batch txid {txid} on record {repr(row)[:200]}: "
                    f"{type(exc).__name__}: {exc}; the batch is not committed and will be "
                    f"replayed"
                )
                raise BatchFailedError(msg) from exc
            out.extend((row, int(t)) for t in targets)
        return out

    return run


@dataclass(frozen=True)
class PartitionerSegment:
    """The ``mapInArrow`` function of a custom partitioner: each row once per target, with
    its target in ``pid_column``."""

    txid: int
    step: str
    partitioner: Any
    n: int
    fields: Fields
    schema: pa.Schema
    pid_column: str
    pickled: frozenset[str] = frozenset()

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        targets = partition_targets(self.partitioner, self.step, self.txid, self.n)
        fields = (*self.fields, self.pid_column)
        try:
            for batch in batches:
                with _no_cyclic_gc():
                    pairs = targets(rows_from_batch(batch, self.fields, self.pickled))
                    rows = [(*row, pid) for row, pid in pairs]
                    out = rows_to_batch(rows, fields, self.schema, self.pickled) if rows else None
                if out is not None:
                    yield out
        except TridentError as exc:
            raise _WorkerFailure(failure_text(exc)) from None
