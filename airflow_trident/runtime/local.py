"""The in-process interpreter of a plan (the bolts of Trident's ``LocalCluster``), in Python.

:class:`LocalBatchProcessor` runs the processing phase of one batch from emitted tuples, and
:func:`run_commit_phase` the streams reading states' new values. Whole batches — begin, emit,
process, commit, success — run through the batch lifecycle
(:class:`~airflow_trident.batch.steps.BatchSteps`); :class:`~airflow_trident.batch.runner.
LocalRunner` does so in-process and answers state and DRPC queries.

Examples
--------
>>> from airflow_trident.operation import Count, Split
>>> from airflow_trident.topology import TridentTopology
>>> from airflow_trident.state.memory import memory_state
>>> from airflow_trident.spout.memory import MemoryTransactionalSpout
>>> t = TridentTopology("interp")
>>> spout = MemoryTransactionalSpout({"p0": [("the cow",), ("the moon",)]}, ["sentence"], 2)
>>> _ = (t.new_stream("sentences", spout).each(["sentence"], Split(), ["word"])
...      .group_by(["word"]).persistent_aggregate(memory_state("interp"), Count(), ["count"],
...                                                name="counts"))
>>> result = LocalBatchProcessor(t).process(1, {t.spouts["sentences"]: {"0": [("the cow",)]}})
>>> result.records_in, sorted(result.staged["counts"].partitions[0])
(1, [('cow', 1), ('the', 1)])
"""

from __future__ import annotations

import contextlib
import logging
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

from airflow_trident.coordination.coordinator import TransactionalCoordinator
from airflow_trident.errors import BatchFailedError, FailedException, TridentError
from airflow_trident.graph import (
    AggregateNode,
    EachNode,
    FilterNode,
    JoinNode,
    MapNode,
    MergeNode,
    NewValuesNode,
    PeekNode,
    ProjectNode,
    SpoutNode,
    StateQueryNode,
    WindowNode,
)
from airflow_trident.operation.base import ColumnFunction
from airflow_trident.planner.plan import ExecutionPlan, FinalAgg, Op, PartialAgg, PersistSink, Stage
from airflow_trident.planner.planner import build_plan
from airflow_trident.runtime.aggregate import aggregate_rows, combine_partials, partial_rows
from airflow_trident.runtime.commit import query_state
from airflow_trident.runtime.join import join_partitions
from airflow_trident.runtime.operations import prepared
from airflow_trident.runtime.repartition import repartition
from airflow_trident.runtime.result import Partitions, ProcessResult, StagedState
from airflow_trident.runtime.window import dry_window_results, window_results
from airflow_trident.spout.ranges import read_ahead
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import Fields, TridentCollector, TridentTuple, tuple_type

__all__ = [
    "LocalBatchProcessor",
    "column_function_error",
    "each_rows",
    "emit_partitions",
    "run_commit_phase",
    "user_error",
    "width_error",
]

log = logging.getLogger(__name__)

Row = tuple[Any, ...]
_MAX_RECORD = 200


def _fail(step: str, txid: int, row: Sequence[Any] | None, exc: BaseException) -> BatchFailedError:
    record = "" if row is None else f" on record {repr(tuple(row))[:_MAX_RECORD]}"
    msg = (
        f"step {step!r} failed in batch txid {txid}{record}: {type(exc).__name__}: {exc}; "
        f"the batch is not committed and will be replayed"
    )
    return BatchFailedError(msg)


def user_error(step: str, txid: int, row: Sequence[Any] | None, exc: Exception) -> TridentError:
    """The error this runtime fails the batch with when user code of ``step`` raised ``exc`` on
    ``row`` (``None``: on no one record, e.g. taking the truthiness of what a filter returned):
    a :class:`~airflow_trident.errors.TridentError` as it is (but a ``FailedException``), else a
    :class:`~airflow_trident.errors.BatchFailedError` naming the step, the txid and the record.
    The Spark runtime's paths word their errors with it.

    >>> str(user_error("s", 3, ("a", 1), StopIteration()))
    "step 's' failed in batch txid 3 on record ('a', 1): StopIteration: ; the batch is not committed and will be replayed"
    """  # noqa: E501
    if isinstance(exc, TridentError) and not isinstance(exc, FailedException):
        return exc
    return _fail(step, txid, row, exc)


def width_error(
    step: str, txid: int, row: Sequence[Any], emitted: Sequence[Any], declared: Fields
) -> BatchFailedError:
    """The error for a function of ``step`` that emitted ``emitted`` on ``row``, not as many
    values as its ``declared`` fields."""
    msg = f"emitted {len(emitted)} values {emitted!r}, declared {list(declared)}"
    return _fail(step, txid, row, ValueError(msg))


def _raise(error: TridentError, exc: BaseException) -> NoReturn:
    """Raise ``error`` caused by ``exc`` (unless it is ``exc`` itself)."""
    if error is exc:
        raise error
    raise error from exc


class LocalBatchProcessor:
    """Runs the stages of a plan in Python, partition by partition.

    Each step's operations are prepared before its first tuple of a partition and cleaned up
    after its last (``prepare_operations=False``: the caller does that, as Spark's Python steps
    do once per task). Window steps keep their tuples in their window store, partition by
    partition (``window_partition``: the partition every row given is in, e.g. a Spark task's);
    ``dry_windows`` runs them without a store, each partition as one window (a type sample).
    """

    def __init__(
        self,
        topology: TridentTopology,
        plan: ExecutionPlan | None = None,
        *,
        states: Callable[[str], Any] | None = None,
        prepare_operations: bool = True,
        window_partition: int | None = None,
        dry_windows: bool = False,
    ) -> None:
        self.topology = topology
        self._window_partition = window_partition
        self._dry_windows = dry_windows
        self._plan = plan
        self._planned_nodes = -1
        self._states = states or (lambda name: query_state(topology, name))
        self._prepare = prepare_operations

    @property
    def plan(self) -> ExecutionPlan:
        """The plan (re-planned if steps were added to the topology since)."""
        if self._plan is None or self._planned_nodes not in (-1, len(self.topology.nodes)):
            self._plan = build_plan(self.topology)
            self._planned_nodes = len(self.topology.nodes)
        return self._plan

    def process(
        self,
        txid: int,
        sources: Mapping[str, Mapping[str, list[Row]]],
        *,
        phase: str = "process",
        outputs: dict[str, Partitions] | None = None,
        on_sink: Callable[[StagedState], None] | None = None,
    ) -> ProcessResult:
        """Run the stages of ``phase``; ``sources`` maps source step ids to partitions of rows
        (read as each source's stage starts). ``on_sink`` is called with each state's staged
        rows as soon as its stage ran (the commit phase applies them there)."""
        result = ProcessResult(txid)
        done: dict[str, Partitions] = outputs if outputs is not None else {}
        for stage in self.plan.phase(phase):
            if stage.source is not None:
                emitted = sources.get(stage.source.id, {})
                read_ahead(emitted.values())
                if isinstance(stage.source, SpoutNode):
                    result.emitted[stage.source.id] = {p: len(r) for p, r in emitted.items()}
                parts: Partitions = [list(rows) for _, rows in sorted(emitted.items())] or [[]]
                inputs = [parts]
            else:
                inputs = [self._input(stage, i.stage, i.repartition, done) for i in stage.inputs]
            out = self._run_stage(stage, inputs, txid)
            done[stage.id] = out
            sink = stage.sink
            if sink is not None:
                staged = StagedState(sink.node.state, sink.kind, sink.fields, out)
                result.staged[sink.node.state] = staged
                if on_sink is not None:
                    on_sink(staged)
        result.outputs = done
        return result

    def _input(
        self, stage: Stage, upstream: str, how: Any, done: dict[str, Partitions]
    ) -> Partitions:
        parts = done[upstream]
        if how is None:
            return parts
        fields = self.plan.stage(upstream).fields
        keys = [fields.index(f) for f in how.key_fields]
        n = stage.parallelism or 1
        return repartition(parts, how.method, keys, n, how.partitioner)

    def _run_stage(self, stage: Stage, inputs: list[Partitions], txid: int) -> Partitions:
        if stage.ops and isinstance(stage.ops[0], MergeNode):
            parts = [p for inp in inputs for p in inp]
            ops = stage.ops[1:]
        elif stage.ops and isinstance(stage.ops[0], JoinNode):
            parts = join_partitions(stage.ops[0], inputs, self._input_fields(stage))
            ops = stage.ops[1:]
        else:
            parts = inputs[0]
            ops = stage.ops
        fields = self._stage_input_fields(stage)
        out = []
        for index, rows in enumerate(parts):
            current = rows
            current_fields = fields
            for op in ops:
                with self._prepared(op, txid, index, len(parts)):
                    current = self._run_op(op, current, current_fields, txid, index, len(parts))
                current_fields = op.fields
            out.append(current)
        return out

    def _prepared(self, op: Op, txid: int, index: int, n: int) -> Any:
        if not self._prepare:
            return contextlib.nullcontext()
        return prepared(op, self.topology.name, txid, index, n)

    def _input_fields(self, stage: Stage) -> list[Fields]:
        return [self.plan.stage(i.stage).fields for i in stage.inputs]

    @staticmethod
    def _stage_input_fields(stage: Stage) -> Fields:
        return stage.in_fields

    def _run_op(
        self, op: Op, rows: list[Row], fields: Fields, txid: int, index: int, n: int
    ) -> list[Row]:
        try:
            if isinstance(op, WindowNode):
                return self._window(op, rows, fields, txid, index)
            return self._dispatch(op, rows, fields, txid)
        except Exception as exc:  # user code: fail only this batch, naming step and txid
            _raise(user_error(op.id, txid, None, exc), exc)

    def _window(
        self, op: WindowNode, rows: list[Row], fields: Fields, txid: int, index: int
    ) -> list[Row]:
        if self._dry_windows:
            return dry_window_results(op, rows, fields, txid)
        partition = index if self._window_partition is None else self._window_partition
        return window_results(op, rows, fields, txid, partition, self._states(op.state))

    def _dispatch(self, op: Op, rows: list[Row], fields: Fields, txid: int) -> list[Row]:
        if isinstance(op, EachNode):
            return each_rows(op, rows, fields, txid)
        if isinstance(op, FilterNode):
            return _filter(op, rows, fields, txid)
        if isinstance(op, MapNode):
            return _map(op, rows, fields, txid)
        if isinstance(op, PeekNode):
            for r in rows:
                view = TridentTuple(r, fields)
                _guard(op.id, txid, r, op.consumer.accept, view)
            return rows
        if isinstance(op, ProjectNode):
            index = [fields.index(f) for f in op.fields]
            return [tuple(r[i] for i in index) for r in rows]
        if isinstance(op, AggregateNode):  # per-partition aggregation
            group = [fields.index(f) for f in op.group_fields]
            return aggregate_rows(rows, fields, op.parts, group_index=group, batch_id=txid)
        if isinstance(op, PartialAgg):
            group = [fields.index(f) for f in op.node.group_fields]
            return partial_rows(rows, fields, op.node.parts, group)
        if isinstance(op, FinalAgg):
            node = op.node
            if op.from_partials:
                return combine_partials(rows, node.parts, len(node.group_fields), emit_empty=True)
            group = [fields.index(f) for f in node.group_fields]
            return aggregate_rows(rows, fields, node.parts, group_index=group, batch_id=txid)
        if isinstance(op, PersistSink):
            return _persist_rows(op, rows, fields)
        if isinstance(op, StateQueryNode):
            return _state_query(op, rows, fields, txid, self._states(op.state))
        msg = f"step {op.id!r}: the local runtime cannot run {type(op).__name__}"
        raise TridentError(msg)


def _guard(step: str, txid: int, row: Row, call: Callable[..., Any], *args: Any) -> Any:
    try:
        return call(*args)
    except Exception as exc:
        _raise(user_error(step, txid, row, exc), exc)


def each_rows(op: EachNode, rows: list[Row], fields: Fields, txid: int) -> list[Row]:
    """``each``: every tuple of ``rows`` followed by each output its function emits for it (a
    :class:`~airflow_trident.operation.ColumnFunction` computes a whole list at once; Spark's
    Python steps run this same function on each Arrow batch)."""
    if isinstance(op.function, ColumnFunction):
        return _each_columns(op, op.function, rows, fields, txid)
    index = [fields.index(f) for f in op.input_fields]
    view = tuple_type(op.input_fields)
    width = len(op.function_fields)
    out: list[Row] = []
    for r in rows:
        collector = TridentCollector()
        _guard(op.id, txid, r, op.function.execute, view([r[i] for i in index]), collector)
        for emitted in collector.rows:
            if len(emitted) != width:
                raise width_error(op.id, txid, r, emitted, op.function_fields)
            out.append(r + emitted)
    return out


def _each_columns(
    op: EachNode, function: ColumnFunction, rows: list[Row], fields: Fields, txid: int
) -> list[Row]:
    """``each`` of a column function: one call for ``rows``; when it fails, each record alone
    (so the error names the record, as the per-tuple loop's does)."""
    if not rows:
        return []
    columns = [[r[i] for r in rows] for i in [fields.index(f) for f in op.input_fields]]
    try:
        out = function.execute_columns(columns)
        width, sizes = len(op.function_fields), [len(column) for column in out]
        if sizes != [len(rows)] * width:
            declared = list(op.function_fields)
            msg = f"execute_columns returned {sizes} values for {declared}, {len(rows)} tuples"
            raise ValueError(msg)
    except Exception as exc:
        _raise(column_function_error(op, rows, fields, txid, exc), exc)
    return list(map(operator.add, rows, zip(*out, strict=True)))


def column_function_error(
    op: EachNode, rows: list[Row], fields: Fields, txid: int, exc: Exception
) -> TridentError:
    """The error of a column function that raised ``exc`` (or returned columns of the wrong
    length) on ``rows``: each record is run alone, and the first failing one fails the batch,
    named (raised from here); when none does, the error of ``exc``, naming no record (or the
    one record)."""
    if len(rows) > 1:
        for r in rows:
            each_rows(op, [r], fields, txid)
    return user_error(op.id, txid, rows[0] if len(rows) == 1 else None, exc)


def _filter(op: FilterNode, rows: list[Row], fields: Fields, txid: int) -> list[Row]:
    index = [fields.index(f) for f in op.input_fields]
    view = tuple_type(op.input_fields)
    kept = []
    for r in rows:
        if _guard(op.id, txid, r, op.filter.is_keep, view([r[i] for i in index])):
            kept.append(r)
    return kept


def _map(op: MapNode, rows: list[Row], fields: Fields, txid: int) -> list[Row]:
    out: list[Row] = []
    view = tuple_type(fields)
    for r in rows:
        produced = _guard(op.id, txid, r, op.function.execute, view(r))
        for values in produced if op.flat else [produced]:
            values = tuple(values)
            if len(values) != len(op.fields):
                msg = f"returned {values!r} for fields {list(op.fields)}"
                raise _fail(op.id, txid, r, ValueError(msg))
            out.append(values)
    return out


def _persist_rows(op: PersistSink, rows: list[Row], fields: Fields) -> list[Row]:
    if op.kind == "combine":  # partials of every partition: one combined value per group
        parts = op.node.parts
        return combine_partials(rows, parts, len(op.node.group_fields), emit_empty=False)
    index = [fields.index(f) for f in op.fields]
    return [tuple(r[i] for i in index) for r in rows]


def _state_query(
    op: StateQueryNode, rows: list[Row], fields: Fields, txid: int, state: Any
) -> list[Row]:
    index = [fields.index(f) for f in op.input_fields]
    views = [TridentTuple([r[i] for i in index], op.input_fields) for r in rows]
    if not views:
        return []
    results = op.function.batch_retrieve(state, views)
    out: list[Row] = []
    for r, view, res in zip(rows, views, results, strict=True):
        collector = TridentCollector()
        _guard(op.id, txid, r, op.function.execute, view, res, collector)
        out.extend(r + e for e in collector.rows)
    return out


def emit_partitions(
    coordinator: TransactionalCoordinator, plan: Any, spout: str
) -> dict[str, list[Row]]:
    """Emit ``spout``'s part of a batch; tuples by source partition."""
    return coordinator.emit_partitions(plan, spout)


def run_commit_phase(
    processor: LocalBatchProcessor,
    txid: int,
    new_values: Mapping[str, Partitions],
    apply: Callable[[StagedState], Partitions],
) -> ProcessResult | None:
    """Run the streams reading states' new values (the commit phase), in-process.

    A state such a stream ends in (``partition_persist``, ``persistent_aggregate``) is applied
    by ``apply`` as soon as its stage ran (its staged rows -> its new values by partition), so a
    stream reading *that* state's new values, later in the phase, gets them. ``None`` when the
    topology has no commit phase.
    """
    stages = processor.plan.phase("commit")
    if not stages:
        return None
    values = dict(new_values)

    def applied(staged: StagedState) -> None:
        values[staged.state] = apply(staged)

    sources = _NewValues(stages, values)
    return processor.process(txid, sources, phase="commit", on_sink=applied)


class _NewValues(Mapping[str, Mapping[str, list[Row]]]):
    """The commit phase's sources: each new-values step's partitions of its state's new values,
    looked up when its stage starts (a state applied earlier in the phase has them by then).
    Partitions are named so that they sort in their order (``00000``, ``00001``, ...)."""

    def __init__(self, stages: Sequence[Stage], values: Mapping[str, Partitions]) -> None:
        self._state = {
            s.source.id: s.source.state for s in stages if isinstance(s.source, NewValuesNode)
        }
        self._values = values

    def __getitem__(self, step: str) -> Mapping[str, list[Row]]:
        parts = self._values.get(self._state[step], [])
        return {f"{i:05d}": rows for i, rows in enumerate(parts)}

    def __iter__(self) -> Iterator[str]:
        return iter(self._state)

    def __len__(self) -> int:
        return len(self._state)
