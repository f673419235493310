"""Which fields each step still needs, and which stages need Trident's exact partitions.

*Liveness*: a field no later step reads is not shipped (to Spark's Python workers, or through a
shuffle). Steps still run — only columns are dropped — so row counts never change. A step that
sees the whole tuple (``map``, ``peek``, a custom partitioner, joins and merges) keeps every field.

*Exact partitions*: ``partition_aggregate`` sees one partition at a time, so where it runs the
Spark partitions must be the batch's partitions (one per source partition, or the repartition's
count). So must a state's commit partitions where they are part of the txid's shape
(:func:`fixed_commit_partitions`): a ``partition_persist`` (the updater gets partition ``i`` of
``n``; the lakehouse sinks keep their txids per partition) and a state whose new values feed a
lakehouse sink (its partitions are that stream's). Elsewhere Spark may choose (adaptive shuffle
partitions, no extra shuffles): a ``persistent_aggregate`` keeps a txid per key, whatever the
partition a key was applied in.

>>> from airflow_trident.operation import Count, Split
>>> from airflow_trident.planner.planner import build_plan
>>> from airflow_trident.spout.memory import MemoryTransactionalSpout
>>> from airflow_trident.state.memory import memory_state
>>> from airflow_trident.topology import TridentTopology
>>> t = TridentTopology("wc")
>>> _ = (t.new_stream("s", MemoryTransactionalSpout({"p": [("a b", 1)]}, ["sentence", "n"], 2))
...       .each(["sentence"], Split(), ["word"]).group_by(["word"])
...       .persistent_aggregate(memory_state("c"), Count(), ["count"], name="counts"))
>>> live = analyze(build_plan(t), "process", frozenset())
>>> [sorted(s) for s in live["stage_1"].before]
[['sentence'], ['word']]
>>> sorted(live["stage_1"].after), live["stage_1"].exact
(['_partial_0', 'word'], False)
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass

from airflow_trident.graph import (
    AggPart,
    AggregateNode,
    EachNode,
    FilterNode,
    JoinNode,
    MergeNode,
    ProjectNode,
    StateQueryNode,
    WindowNode,
)
from airflow_trident.operation.builtin import Count, Max, Min, Sum
from airflow_trident.planner.plan import ExecutionPlan, FinalAgg, Op, PartialAgg, PersistSink, Stage
from airflow_trident.runtime.shape import shape_bound_states
from airflow_trident.tuple import Fields

__all__ = [
    "StageLiveness",
    "analyze",
    "fixed_commit_partitions",
    "op_inputs",
    "partition_sensitive",
]


@dataclass(frozen=True)
class StageLiveness:
    """``before[i]``: fields needed on entry to ``ops[i]``; ``after``: at the stage's end.

    ``exact``: the stage's partitions must be the batch's partitions (see module doc).
    """

    before: tuple[frozenset[str], ...]
    after: frozenset[str]
    exact: bool

    @property
    def entry(self) -> frozenset[str]:
        """Fields needed where the stage starts."""
        return self.before[0] if self.before else self.after


def partition_sensitive(op: Op) -> bool:
    """Whether ``op``'s output depends on how tuples are spread over partitions (windows keep
    each partition's tuples across batches)."""
    return isinstance(op, WindowNode) or (isinstance(op, AggregateNode) and op.scope == "partition")


def fixed_commit_partitions(plan: ExecutionPlan, stage: Stage) -> bool:
    """Whether ``stage``'s sink must stage exactly the batch's partitions (the in-process
    runtime's count, whatever Spark's settings and the batch's size): a ``partition_persist``,
    or a state whose new values feed a state keeping its txids per commit partition (an
    Iceberg or Delta sink after ``new_values_stream()``: its partitions are that stream's)."""
    sink = stage.sink
    if sink is None:
        return False
    return sink.kind == "update" or sink.node.state in shape_bound_states(plan)


def op_inputs(stage: Stage) -> list[Fields]:
    """The fields each op of ``stage`` receives."""
    return [stage.in_fields, *(op.fields for op in stage.ops[:-1])][: len(stage.ops)]


def _parts_inputs(parts: tuple[AggPart, ...], group: Fields) -> set[str]:
    """Fields the aggregators read: ``Count`` none, ``Sum``/``Min``/``Max`` their first."""
    needed = set(group)
    for part in parts:
        kind = type(part.aggregator)
        if kind is Count:
            continue
        needed.update(part.input_fields[:1] if kind in (Sum, Min, Max) else part.input_fields)
    return needed


def _before(op: Op, after: Set[str], in_fields: Fields) -> frozenset[str]:
    """Fields needed before ``op`` when ``after`` are needed after it."""
    needed: set[str]
    if isinstance(op, EachNode | StateQueryNode):
        needed = (set(after) - set(op.function_fields)) | set(op.input_fields)
    elif isinstance(op, FilterNode):
        needed = set(after) | set(op.input_fields)
    elif isinstance(op, ProjectNode):
        needed = set(after) & set(op.fields)
    elif isinstance(op, AggregateNode):
        needed = _parts_inputs(op.parts, op.group_fields)
    elif isinstance(op, WindowNode):
        stamp = getattr(op.config, "timestamp_field", None)
        needed = set(op.window_inputs) | ({stamp} if stamp else set())
    elif isinstance(op, PartialAgg) or (isinstance(op, FinalAgg) and not op.from_partials):
        needed = _parts_inputs(op.node.parts, op.node.group_fields)
    elif isinstance(op, PersistSink) and op.kind != "combine":
        needed = set(op.fields)
    else:  # map, peek, merge, join, combined partials: positional or whole tuples
        needed = set(in_fields)
    return frozenset(needed)


def _input_needs(consumer: Stage, index: int, live: StageLiveness, fields: Fields) -> set[str]:
    """Fields of an upstream stage (with output ``fields``) that ``consumer``'s input
    ``index`` needs."""
    first = consumer.ops[0] if consumer.ops else None
    if isinstance(first, MergeNode | JoinNode):
        return set(fields)
    how = consumer.inputs[index].repartition
    if how is not None and how.method == "custom":
        return set(fields)
    needed = set(live.entry)
    if how is not None:
        needed.update(how.key_fields)
    return needed


def analyze(plan: ExecutionPlan, phase: str, keep: frozenset[str]) -> dict[str, StageLiveness]:
    """Liveness and exactness of every stage of ``phase``; ``keep`` names stages whose every
    field is wanted (outputs asked for). Stages without a consumer or sink keep every field."""
    stages = plan.phase(phase)
    consumers: dict[str, list[tuple[Stage, int]]] = {s.id: [] for s in stages}
    for stage in stages:
        for index, inp in enumerate(stage.inputs):
            consumers.setdefault(inp.stage, []).append((stage, index))
    result: dict[str, StageLiveness] = {}
    for stage in reversed(stages):
        uses = consumers[stage.id]
        after: set[str] = set()
        if stage.sink is not None or not uses or stage.id in keep:
            after = set(stage.fields)
        for consumer, index in uses:
            after |= _input_needs(consumer, index, result[consumer.id], stage.fields)
        after &= set(stage.fields)
        before: list[frozenset[str]] = []
        needed: frozenset[str] = frozenset(after)
        for op, in_fields in reversed(list(zip(stage.ops, op_inputs(stage), strict=True))):
            needed = _before(op, needed, in_fields)
            before.append(needed)
        exact = (
            any(partition_sensitive(op) for op in stage.ops)
            or fixed_commit_partitions(plan, stage)
            or any(result[c.id].exact and c.inputs[i].repartition is None for c, i in uses)
        )
        result[stage.id] = StageLiveness(tuple(reversed(before)), frozenset(after), exact)
    return result
