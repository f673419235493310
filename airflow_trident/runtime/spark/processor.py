"""``SparkBatchProcessor``: the processing phase of a batch as Spark DataFrames.

Stage after stage (upstream first), a stage's input frame is built (``inputs``), then its ops
run: runs of built-ins as Spark SQL (``compile``), runs of Python steps fused into one
``mapInArrow`` (``python_ops``). A stage output read by several stages is cached.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from airflow_trident.errors import ConfigurationError, MalformedRecordError, TridentError
from airflow_trident.graph import (
    AggregateNode,
    DrpcNode,
    EachNode,
    JoinNode,
    MergeNode,
    PersistNode,
    ProjectNode,
    SpoutNode,
    StateQueryNode,
    WindowNode,
)
from airflow_trident.operation.builtin import Count, Max, Min, Split, Sum
from airflow_trident.planner.plan import ExecutionPlan, FinalAgg, Op, PartialAgg, PersistSink, Stage
from airflow_trident.planner.planner import build_plan
from airflow_trident.runtime.commit import query_state
from airflow_trident.runtime.operations import type_sample
from airflow_trident.runtime.result import Partitions
from airflow_trident.runtime.spark import compile as C
from airflow_trident.runtime.spark import driver_read, inputs
from airflow_trident.runtime.spark.frames import (
    Frame,
    PendingAgg,
    Sample,
    output_schema,
    undeclared,
)
from airflow_trident.runtime.spark.liveness import (
    StageLiveness,
    analyze,
    fixed_commit_partitions,
    op_inputs,
)
from airflow_trident.runtime.spark.native import first_malformed, range_gone
from airflow_trident.runtime.spark.python_ops import (
    SENTINEL,
    LocalStep,
    PythonSegment,
    StateResolver,
    batch_failure,
    driver_copy,
)
from airflow_trident.runtime.spark.result import SparkProcessResult, SparkStagedState
from airflow_trident.spout.ranges import PartitionRows, emitted_counts
from airflow_trident.state.binding import StateBinding
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import Fields

__all__ = ["SparkBatchProcessor"]

log = logging.getLogger(__name__)

Row = tuple[Any, ...]
Sources = Mapping[str, Mapping[str, Sequence[Row]]]


class SparkBatchProcessor:
    """Runs the processing phase of a plan on Spark: the rows
    :class:`~airflow_trident.runtime.local.LocalBatchProcessor` would stage, as DataFrames.

    Parameters
    ----------
    topology:
        The topology.
    plan:
        Its plan (built when omitted).
    sample_rows:
        Tuples per source partition the driver runs through the local runtime to learn the
        output types of Python steps.
    reference:
        ``module:attribute`` of the topology: Spark's Python workers import it to open the
        states ``state_query`` reads (else the persist steps are pickled to them).
    states:
        The run's state database (what ``state_query`` reads, on the driver and the workers).
    read_here_bytes:
        A batch whose source ranges hold at most this many bytes (and say so: the file log's
        ranges) is read by this process, with the spout's own reader, and handed to Spark as
        one Arrow table; larger batches are read by Spark's tasks in parallel. ``0``: always
        by Spark. Default: :data:`~airflow_trident.runtime.spark.driver_read.READ_HERE_BYTES`
        (1 MiB).
    read_here_records:
        Likewise for ranges that know how many records they hold at most, not their bytes
        (Kafka offset ranges): at most this many together are read by this process with the
        spout's own consumer. ``0``: always by Spark's connector. Default:
        :data:`~airflow_trident.runtime.spark.driver_read.READ_HERE_RECORDS` (50,000).
    inline:
        ``False``: no per-tuple function or filter runs as one comprehension over the columns
        (``[trident] inline``); ``None`` (default) or ``True``: as the topology says
        (``TridentTopology(inline=...)``, default ``True``).
    """

    def __init__(
        self,
        topology: TridentTopology,
        plan: ExecutionPlan | None = None,
        *,
        sample_rows: int = 100,
        reference: str | None = None,
        states: StateBinding | None = None,
        read_here_bytes: int | None = None,
        read_here_records: int | None = None,
        inline: bool | None = None,
    ) -> None:
        self.topology = topology
        self.inline = inline is not False and getattr(topology, "inline", True)
        self.plan = plan or build_plan(topology)
        self.sample_rows = sample_rows
        here = driver_read.READ_HERE_BYTES if read_here_bytes is None else read_here_bytes
        self.read_here_bytes = here
        records = read_here_records
        self.read_here_records = driver_read.READ_HERE_RECORDS if records is None else records
        self.reference = reference
        self.states = states or StateBinding()

    def process(
        self,
        spark: SparkSession,
        txid: int,
        sources: Sources,
        *,
        phase: str = "process",
        outputs: Sequence[str] = (),
    ) -> SparkProcessResult:
        """Build batch ``txid``'s DataFrames; ``sources`` maps source step ids to partitions of
        rows, as for the local runtime. Nothing runs on Spark until the result is acted on.

        ``outputs`` names stages whose every field :meth:`SparkProcessResult.output` keeps
        (others keep the fields later steps read).

        Raises
        ------
        BatchFailedError
            If Spark rejects the plan. (User code failing on the driver-side type sample fails
            nothing: the sample is not the batch; the run of the batch decides.)
        """
        run = _Run(self, spark, txid, phase, frozenset(outputs))
        try:
            return run.execute(sources)
        except MalformedRecordError as exc:  # a driver-side sample's: the batch's first one
            run.result.close()
            raise run.result.malformed(exc) from exc
        except TridentError:
            run.result.close()
            raise
        except Exception as exc:
            run.result.close()
            raise batch_failure(exc, txid) from exc


def _output(frame: Frame) -> DataFrame:
    """A stage's output (a pending built-in partial aggregation is run on its own)."""
    if frame.pending is None:
        return frame.df
    node = frame.pending.node
    keys = [C.col(k) for k in node.group_fields]
    exprs = C.agg_exprs(node.parts, frame.fields[len(node.group_fields) :], frame.pending.pre.types)
    pre = frame.pending.pre.df
    return pre.groupBy(*keys).agg(*exprs) if keys else pre.agg(*exprs)


def _needs_sentinel(op: Op, pending: bool) -> bool:
    """Whether Python ``op`` emits for an empty partition (ungrouped aggregations do), or must
    run for every partition (a window records every txid, and processing time moves on)."""
    if isinstance(op, WindowNode):
        return True
    if isinstance(op, AggregateNode):
        return not op.group_fields
    if isinstance(op, FinalAgg) or (isinstance(op, PersistSink) and op.kind == "combine"):
        return not pending and not op.node.group_fields
    return False


def _maybe_native(op: Op) -> bool:
    """Whether ``op`` may run as Spark SQL (decided with the column types)."""
    if isinstance(op, ProjectNode):
        return True
    if isinstance(op, PersistSink):
        return op.kind != "combine"
    if isinstance(op, EachNode):
        return type(op.function) is Split
    if isinstance(op, PartialAgg):
        return all(type(p.aggregator) in (Count, Sum, Min, Max) for p in op.node.parts)
    return False


def _idle(stage: Stage, sources: Sources, idle: set[str]) -> bool:
    """Whether ``stage`` only serves DRPC requests that this call has none of: a DRPC source
    not given, or every input idle (a batch of the spouts runs no DRPC stream)."""
    if isinstance(stage.source, DrpcNode):
        return stage.source.id not in sources
    return bool(stage.inputs) and all(i.stage in idle for i in stage.inputs)


class _Run:
    """One ``process`` call."""

    def __init__(
        self,
        p: SparkBatchProcessor,
        spark: SparkSession,
        txid: int,
        phase: str,
        keep: frozenset[str],
    ) -> None:
        self.p, self.spark, self.txid = p, spark, txid
        self.stages = p.plan.phase(phase)
        self.live = analyze(p.plan, phase, keep)
        self.frames: dict[str, Frame] = {}
        self.result = SparkProcessResult(txid, inputs_here=True)
        self.uses: dict[str, int] = {}
        for stage in self.stages:
            for inp in stage.inputs:
                self.uses[inp.stage] = self.uses.get(inp.stage, 0) + 1
        self._tz: str | None = None
        topology, binding = p.topology, p.states
        self.states: Callable[[str], Any] = lambda name: query_state(topology, name, binding)

    def timezone(self) -> str:
        """The session time zone (Arrow timestamps carry it)."""
        if self._tz is None:
            self._tz = str(self.spark.conf.get("spark.sql.session.timeZone"))
        return self._tz

    def execute(self, sources: Sources) -> SparkProcessResult:
        idle: set[str] = set()  # DRPC branches no request feeds (a batch of the spouts)
        ranged = [  # the spouts' partitions in the in-process runtime's order of reading
            rows
            for stage in self.stages
            if isinstance(stage.source, SpoutNode)
            for rows in sources.get(stage.source.id, {}).values()
            if isinstance(rows, PartitionRows) and rows.ranges
        ]
        if ranged:
            self.result.first_malformed = functools.partial(first_malformed, self.spark, ranged)
            self.result.range_gone = functools.partial(range_gone, ranged)
        for stage in self.stages:
            if _idle(stage, sources, idle):
                idle.add(stage.id)
                continue
            emitted = sources.get(stage.source.id, {}) if stage.source is not None else {}
            if isinstance(stage.source, SpoutNode):
                self.result.emitted[stage.source.id] = emitted_counts(emitted)
            frame = self.stage(stage, emitted)
            if self.uses.get(stage.id, 0) > 1 and frame.pending is None:
                frame = frame.but(df=frame.df.persist())
                self.result.cached.append(frame.df)
            self.frames[stage.id] = frame
            self.result.producers[stage.id] = functools.partial(_output, frame)
            self.result.output_fields[stage.id] = frame.fields
            self.result.output_pickled[stage.id] = frame.pickled
            sink = stage.sink
            if sink is not None:
                same = frame.columns == sink.fields and not frame.sentinel
                df = frame.df if same else C.select(frame.df, sink.fields)
                pickled = frame.pickled & set(sink.fields)
                exact = frame.nparts if frame.exact else None
                if exact is None and fixed_commit_partitions(self.p.plan, stage):
                    msg = f"txid {self.txid}: state {sink.node.state!r} lost its exact partitions"
                    raise AssertionError(msg)
                self.result.staged[sink.node.state] = SparkStagedState(
                    sink.node.state, sink.kind, sink.fields, df, pickled, exact
                )
        return self.result

    # -- one stage --------------------------------------------------------------------------------

    def stage(self, stage: Stage, emitted: Mapping[str, Sequence[Row]]) -> Frame:
        live = self.live[stage.id]
        ops = list(stage.ops)
        fields = op_inputs(stage)
        first = ops[0] if ops else None
        pending = self._pending(stage)
        consumed = isinstance(first, MergeNode | JoinNode) or (
            pending is not None and isinstance(first, FinalAgg | PersistSink)
        )
        start = 1 if consumed else 0
        if isinstance(first, PersistSink) and first.kind == "combine" and pending is None:
            ops[0] = inputs.combined(first)
        needs = [i for i in range(start, len(ops)) if _needs_sentinel(ops[i], pending is not None)]
        forced = max(needs, default=-1)  # Python up to here: sentinel rows must reach it
        frame = self._entry(stage, first, pending, live, emitted, sentinel=forced >= 0)
        i = start
        while i < len(ops):
            if i > forced and _maybe_native(ops[i]):
                native = self._native(ops[i], fields[i], frame, live, i)
                if native is not None:
                    frame, i = native, i + 1
                    continue
            j = i + 1
            while j < len(ops) and (j <= forced or not _maybe_native(ops[j])):
                j += 1
            frame = self._python(ops[i:j], fields[i:j], frame, live, i, j)
            i = j
        return self._narrow(frame, live.after)

    def _pending(self, stage: Stage) -> PendingAgg | None:
        if stage.source is not None or len(stage.inputs) != 1:
            return None
        inp = stage.inputs[0]
        return self.frames[inp.stage].pending if inp.repartition is not None else None

    def _entry(
        self,
        stage: Stage,
        first: Op | None,
        pending: PendingAgg | None,
        live: StageLiveness,
        emitted: Mapping[str, Sequence[Row]],
        *,
        sentinel: bool,
    ) -> Frame:
        """The frame the stage's (remaining) ops start from."""
        if stage.source is not None:
            columns = tuple(f for f in stage.in_fields if f in live.entry)
            if inputs.read_by_spark(emitted, self.p.read_here_bytes, self.p.read_here_records):
                self.result.inputs_here = False
            return inputs.source(
                self.spark,
                stage.in_fields,
                emitted,
                columns,
                exact=live.exact,
                sentinel=sentinel,
                sample_rows=self.p.sample_rows,
                read_here_bytes=self.p.read_here_bytes,
                read_here_records=self.p.read_here_records,
            )
        ups = [self.frames[i.stage] for i in stage.inputs]
        if isinstance(first, MergeNode):
            frame = inputs.merged(ups, first, self.txid, self.timezone)
        elif isinstance(first, JoinNode):
            frame = inputs.joined(ups, first, stage.parallelism)
        elif pending is not None and isinstance(first, FinalAgg | PersistSink):
            frame = inputs.aggregated(
                stage, first, pending, ups[0], self.txid, self.states, exact=live.exact or sentinel
            )
        else:
            how = stage.inputs[0].repartition
            up = ups[0]
            if how is None:
                if not sentinel:
                    return up
                frame = up  # forwarded partitions are exact (liveness): add the sentinels
            else:
                return inputs.moved(
                    self.spark,
                    up,
                    how,
                    stage.parallelism,
                    exact=live.exact,
                    sentinel=sentinel,
                    txid=self.txid,
                    timezone=self.timezone,
                )
        return inputs.establish(self.spark, stage, frame, exact=live.exact, sentinel=sentinel)

    # -- steps ------------------------------------------------------------------------------------

    def _native(
        self, op: Op, in_fields: Fields, frame: Frame, live: StageLiveness, i: int
    ) -> Frame | None:
        """``op`` as Spark SQL, or ``None`` when the column types do not allow it."""

        def usable() -> dict[str, Any]:
            return {k: v for k, v in frame.types().items() if k not in frame.pickled}

        if isinstance(op, EachNode):
            source = op.input_fields[0] if op.input_fields else ""
            kind = usable().get(source)
            if not C.is_split(op.function, kind, len(op.function_fields)):
                return None
        if isinstance(op, PartialAgg) and not C.builtin_parts(op.node.parts, usable):
            return None
        after = live.before[i + 1] if i + 1 < len(live.before) else live.after
        step = LocalStep(op, in_fields, self.txid, self.states)
        sample = Sample(lambda: step.partitions(frame.sample.rows))
        if isinstance(op, PartialAgg):  # Spark's groupBy in the next stage does both halves
            pending = PendingAgg(op.node, frame)
            return Frame(frame.df, op.fields, op.fields, sample, pending=pending)
        columns = tuple(f for f in op.fields if f in after)
        assert not frame.sentinel, "sentinel rows go to Python steps only"
        known = frame.known_types
        if isinstance(op, EachNode):
            target = op.function_fields[0]
            keep = [c for c in columns if c != target]
            df = C.split_words(frame.df, op.input_fields[0], target, keep)
            if [*keep, target] != list(columns):
                df = C.select(df, columns)
            if known is not None:
                known = {**known, target: T.StringType()}
        else:
            df = C.select(frame.df, columns) if columns != frame.columns else frame.df
        if known is not None:
            known = {c: known[c] for c in columns if c in known}
        return frame.but(df=df, fields=op.fields, columns=columns, sample=sample, known_types=known)

    def _python(
        self,
        ops: Sequence[Op],
        fields: Sequence[Fields],
        frame: Frame,
        live: StageLiveness,
        i: int,
        j: int,
    ) -> Frame:
        """``ops`` fused into one ``mapInArrow``."""
        after = live.before[j] if j < len(live.before) else live.after
        in_columns = [f for f in fields[0] if f in live.before[i] and f in frame.columns]
        df = C.select(frame.df, [*in_columns, *([SENTINEL] if frame.sentinel else [])])
        out_fields = ops[-1].fields
        columns = tuple(f for f in out_fields if f in after)
        sample = Sample(functools.partial(self._sample, ops, fields, frame))
        # declared types (or no computed field) need no sample: user code runs on the driver
        # only when these or later steps have a type to learn (docs/api.md)
        learn = undeclared(ops, columns)
        schema = output_schema(ops, columns, frame, sample.rows if learn else [[]], self.timezone)
        fn = PythonSegment(
            self.txid,
            tuple(ops),
            tuple(fields),
            fields[0],
            out_fields,
            schema.arrow,
            frame.pickled & set(in_columns),
            schema.pickled,
            whole=any(
                isinstance(op, AggregateNode | PartialAgg | FinalAgg | WindowNode) for op in ops
            ),
            sentinel=frame.sentinel,
            states=self._worker_states(ops),
            inline=self.p.inline,
        )
        log.info(
            "txid %d: Python step(s) on Spark's workers, %s (docs/api.md)",
            self.txid, fn.paths(fn.inlined() if fn.columnar else ()),
        )  # fmt: skip
        return frame.but(
            df=df.mapInArrow(fn, schema.spark),
            fields=out_fields,
            columns=columns,
            sample=sample,
            pickled=schema.pickled,
            sentinel=False,
        )

    def _sample(self, ops: Sequence[Op], fields: Sequence[Fields], frame: Frame) -> Partitions:
        """``ops`` run by the local runtime on ``frame``'s sample, only to learn types: the
        workers' run of the real batch decides every error."""
        try:
            sample = frame.sample.rows
            with type_sample():
                for op, in_fields in zip(driver_copy(tuple(ops)), fields, strict=True):
                    # a copy, not shipped: what the sample does to self never reaches workers
                    sample = LocalStep(op, in_fields, self.txid, self.states).partitions(sample)
        except TridentError as exc:
            # the sample is not the batch (an aggregation of its first tuples, a filter of that
            # total): user code may fail on it where the batch does not, or fail otherwise
            log.info(
                "txid %d: the driver's type sample of step(s) %s failed (%s); their computed "
                "fields travel pickled unless declared (output_types)",
                self.txid, ", ".join(repr(op.id) for op in ops), exc,
            )  # fmt: skip
            return [[]]
        return sample

    def _worker_states(self, ops: Sequence[Op]) -> StateResolver:
        """What the workers need to open the states ``ops`` query."""
        t = self.p.topology
        names = sorted({op.state for op in ops if isinstance(op, StateQueryNode | WindowNode)})
        if not names or self.p.reference is not None:
            return StateResolver(
                t.name, reference=self.p.reference if names else None, binding=self.p.states
            )
        persists = []
        for name in names:
            node = t.nodes[t.states[name]]
            assert isinstance(node, PersistNode)
            persists.append(node)
        try:
            cloudpickle.dumps(persists)  # type: ignore[no-untyped-call]
        except Exception as exc:
            msg = (
                f"state(s) {names} cannot be shipped to Spark's Python workers for "
                f"state_query ({type(exc).__name__}: {exc}); hint: pass "
                f"SparkBatchProcessor(..., reference='module:attribute') so that the workers "
                f"import the topology instead"
            )
            raise ConfigurationError(msg) from exc
        return StateResolver(t.name, tuple(persists), binding=self.p.states)

    @staticmethod
    def _narrow(frame: Frame, columns: frozenset[str]) -> Frame:
        """Only ``columns`` (and no sentinel rows) leave the stage."""
        wanted = tuple(f for f in frame.fields if f in columns)
        if frame.pending is not None or (wanted == frame.columns and not frame.sentinel):
            return frame
        df = frame.df.where(~C.col(SENTINEL)) if frame.sentinel else frame.df
        df = C.select(df, wanted)
        return frame.but(df=df, columns=wanted, sentinel=False)
