"""Graph -> batch plan, fusing the operations between repartitions as Trident's planner does.

Combiner aggregations are split around their repartition: a partial aggregation per partition,
then a repartition (by the group fields, or to one partition), then the final combine.

>>> from airflow_trident.operation import Count, Split
>>> from airflow_trident.spout.memory import MemoryTransactionalSpout
>>> from airflow_trident.state.memory import memory_state
>>> from airflow_trident.topology import TridentTopology
>>> t = TridentTopology("wc")
>>> _ = (t.new_stream("sentences", MemoryTransactionalSpout({"p0": [("a b",)]}, ["sentence"], 2))
...       .each(["sentence"], Split(), ["word"]).group_by(["word"])
...       .persistent_aggregate(memory_state("c"), Count(), ["count"], name="counts"))
>>> print(build_plan(t).describe())
stage_1 [process, x1] sentences: Split -> counts.partial
stage_2 [process, x1] stage_1 partition_by: counts
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from airflow_trident.errors import TopologyError
from airflow_trident.graph import (
    AggregateNode,
    DrpcNode,
    JoinNode,
    MergeNode,
    NewValuesNode,
    Node,
    PersistNode,
    RepartitionNode,
    SpoutNode,
    WindowNode,
)
from airflow_trident.operation.base import CombinerAggregator, ReducerAggregator
from airflow_trident.planner.plan import (
    ExecutionPlan,
    FinalAgg,
    Op,
    PartialAgg,
    PersistSink,
    Stage,
    StageInput,
)
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import Fields

__all__ = ["build_plan"]


@dataclass
class _Draft:
    id: str
    source: Node | None
    inputs: tuple[StageInput, ...]
    phase: Literal["process", "commit"]
    in_fields: Fields
    last: str  # id of the step whose tuples the stage outputs
    ops: list[Op] = field(default_factory=list)
    parallelism: int | None = None

    def append(self, op: Op, step: str) -> None:
        self.ops.append(op)
        self.last = step


class _Planner:
    def __init__(self, topology: TridentTopology) -> None:
        self.t = topology
        self.drafts: list[_Draft] = []
        self.stage_of: dict[str, _Draft] = {}  # step id -> the stage that computes it

    def new_stage(
        self,
        source: Node | None,
        inputs: tuple[StageInput, ...],
        phase: Literal["process", "commit"],
        in_fields: Fields,
        last: str,
    ) -> _Draft:
        draft = _Draft(f"stage_{len(self.drafts) + 1}", source, inputs, phase, in_fields, last)
        self.drafts.append(draft)
        return draft

    def open_stage_after(self, parent: str) -> _Draft:
        """The stage a per-partition op on ``parent`` joins: ``parent``'s own stage when it
        ends there and feeds nothing else, else a new stage forwarding its partitions."""
        stage = self.stage_of[parent]
        if stage.last == parent and len(self.t.children[parent]) == 1:
            return stage
        return self._forward(parent)

    def _forward(self, parent: str) -> _Draft:
        """A new stage taking ``parent``'s tuples in their partitions."""
        stage = self.stage_of[parent]
        fields = self.t.nodes[parent].fields
        return self.new_stage(None, (StageInput(stage.id),), stage.phase, fields, parent)

    def _upstream(self, parent: str) -> _Draft:
        """The stage whose output is ``parent``'s tuples (splitting off a forward if needed)."""
        stage = self.stage_of[parent]
        return stage if stage.last == parent else self._forward(parent)

    def _after(self, up: _Draft, repartition: RepartitionNode) -> _Draft:
        inputs = (StageInput(up.id, repartition),)
        return self.new_stage(None, inputs, up.phase, repartition.fields, repartition.id)

    def hint(self, stage: _Draft, node: Node) -> None:
        if node.parallelism is not None:
            stage.parallelism = max(stage.parallelism or 1, node.parallelism)

    def plan(self) -> ExecutionPlan:
        for node in self.t.nodes.values():
            self.add(node)
        stages = tuple(
            Stage(d.id, d.source, d.inputs, tuple(d.ops), d.parallelism, d.phase, d.in_fields)
            for d in self.drafts
        )
        return ExecutionPlan(self.t.name, stages)

    def add(self, node: Node) -> None:
        if isinstance(node, SpoutNode | DrpcNode):
            stage = self.new_stage(node, (), "process", node.fields, node.id)
        elif isinstance(node, NewValuesNode):
            stage = self.new_stage(node, (), "commit", node.fields, node.id)
        elif isinstance(node, RepartitionNode):
            stage = self._after(self._upstream(node.parents[0]), node)
        elif isinstance(node, MergeNode | JoinNode):
            stage = self._multi_input(node)
        elif isinstance(node, AggregateNode) and node.scope == "batch":
            stage = self._batch_aggregate(node)
        elif isinstance(node, WindowNode):
            stage = self._window(node)
        elif isinstance(node, PersistNode):
            stage = self._persist(node)
        else:
            stage = self.open_stage_after(node.parents[0])
            stage.append(node, node.id)
        self.hint(stage, node)
        self.stage_of[node.id] = stage

    def _multi_input(self, node: MergeNode | JoinNode) -> _Draft:
        inputs = []
        phases = set()
        for i, parent in enumerate(node.parents):
            up = self._upstream(parent)
            phases.add(up.phase)
            repartition = None
            if isinstance(node, JoinNode):
                repartition = RepartitionNode(
                    f"{node.id}.by_key_{i}",
                    (parent,),
                    self.t.nodes[parent].fields,
                    method="partition_by",
                    key_fields=node.join_fields[i],
                )
            inputs.append(StageInput(up.id, repartition))
        phase: Literal["process", "commit"] = "commit" if "commit" in phases else "process"
        stage = self.new_stage(None, tuple(inputs), phase, node.fields, node.id)
        stage.append(node, node.id)
        return stage

    def _split(
        self, node: AggregateNode | PersistNode, combiner: bool, parent: str
    ) -> tuple[_Draft, RepartitionNode]:
        """Partial aggregation (for combiners) at the end of the parent's stage, then the
        repartition by group fields (or to one partition)."""
        up = self.open_stage_after(parent)
        group = node.group_fields
        fields = self.t.nodes[parent].fields
        if combiner:
            fields = group + tuple(f"_partial_{i}" for i in range(len(node.parts)))
            up.append(PartialAgg(node, fields), f"{node.id}.partial")
        method: Literal["partition_by", "global"] = "partition_by" if group else "global"
        repartition = RepartitionNode(
            f"{node.id}.{method}", (parent,), fields, method=method, key_fields=group
        )
        return up, repartition

    def _batch_aggregate(self, node: AggregateNode) -> _Draft:
        combiner = all(isinstance(p.aggregator, CombinerAggregator) for p in node.parts)
        up, repartition = self._split(node, combiner, node.parents[0])
        stage = self._after(up, repartition)
        stage.append(FinalAgg(node, combiner, node.fields), node.id)
        if not node.group_fields:
            stage.parallelism = 1
        return stage

    def _window(self, node: WindowNode) -> _Draft:
        """The window at the end of its parent's stage; its results go, in their partitions, to
        the sink of its window store and to the later steps (stages forwarding them)."""
        stage = self.open_stage_after(node.parents[0])
        stage.append(node, node.id)
        self.stage_of[node.id] = stage
        store = self._forward(node.id)
        store.append(PersistSink(node, "update", node.fields), f"{node.id}.store")
        stage.last = f"{node.id}.closed"  # later steps forward from the window's output too
        return stage

    def _persist(self, node: PersistNode) -> _Draft:
        if node.mode == "update":
            stage = self.open_stage_after(node.parents[0])
            stage.append(PersistSink(node, "update", node.input_fields), node.id)
            return stage
        aggregator = node.parts[0].aggregator
        combiner = isinstance(aggregator, CombinerAggregator)
        if not combiner and not isinstance(aggregator, ReducerAggregator):  # pragma: no cover
            msg = f"step {node.id!r}: persistent_aggregate needs a combiner or reducer"
            raise TopologyError(msg)
        up, repartition = self._split(node, combiner, node.parents[0])
        stage = self._after(up, repartition)
        kind: Literal["combine", "reduce"] = "combine" if combiner else "reduce"
        outputs = node.parts[0].output_fields if combiner else node.input_fields
        stage.append(PersistSink(node, kind, node.group_fields + outputs), node.id)
        if not node.group_fields:
            stage.parallelism = 1
        return stage


def build_plan(topology: TridentTopology) -> ExecutionPlan:
    """Plan ``topology``'s batches: stages of fused operations between repartitions."""
    return _Planner(topology).plan()
