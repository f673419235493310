"""The batch plan: stages of fused per-partition operations, linked by repartitions.

A *stage* starts at a source (a spout, a DRPC request, a state's new values) or at a repartition
of earlier stages, runs its operations partition by partition without moving tuples, and may end
in a *sink* that stages results for the commit phase. Stages of the ``commit`` phase run after the
states they read from were updated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from airflow_trident.graph import AggregateNode, Node, PersistNode, RepartitionNode
from airflow_trident.tuple import Fields

__all__ = ["ExecutionPlan", "FinalAgg", "PartialAgg", "PersistSink", "Stage", "StageInput"]


@dataclass(frozen=True, eq=False)
class PartialAgg:
    """The per-partition half of a combiner aggregation: one partial value per group."""

    node: AggregateNode | PersistNode
    fields: Fields

    @property
    def id(self) -> str:
        """Step id."""
        return f"{self.node.id}.partial"


@dataclass(frozen=True, eq=False)
class FinalAgg:
    """The after-repartition half: combine the partials (or aggregate the tuples) per group."""

    node: AggregateNode
    from_partials: bool
    fields: Fields

    @property
    def id(self) -> str:
        """Step id."""
        return self.node.id


@dataclass(frozen=True, eq=False)
class PersistSink:
    """Rows staged for a state's commit.

    ``kind`` is ``combine`` (group fields + one combined value per group), ``reduce`` (group
    fields + input fields, reduced into state at commit) or ``update`` (input fields for a
    state updater).
    """

    node: PersistNode
    kind: Literal["combine", "reduce", "update"]
    fields: Fields

    @property
    def id(self) -> str:
        """Step id."""
        return self.node.id


Op = Node | PartialAgg | FinalAgg | PersistSink


@dataclass(frozen=True, eq=False)
class StageInput:
    """Where a stage's tuples come from: an upstream stage, moved by ``repartition`` (or kept
    in their partitions when ``None``)."""

    stage: str
    repartition: RepartitionNode | None = None


@dataclass(frozen=True, eq=False)
class Stage:
    """Operations fused between repartitions, run partition by partition."""

    id: str
    source: Node | None
    inputs: tuple[StageInput, ...]
    ops: tuple[Op, ...]
    parallelism: int | None
    phase: Literal["process", "commit"]
    in_fields: Fields = ()

    @property
    def fields(self) -> Fields:
        """Fields of the stage's output tuples."""
        return self.ops[-1].fields if self.ops else self.in_fields

    @property
    def sink(self) -> PersistSink | None:
        """The persist sink the stage ends in, if any."""
        last = self.ops[-1] if self.ops else None
        return last if isinstance(last, PersistSink) else None


@dataclass(frozen=True)
class ExecutionPlan:
    """Every stage of a topology, upstream before downstream."""

    topology: str
    stages: tuple[Stage, ...]

    def stage(self, stage_id: str) -> Stage:
        """The stage called ``stage_id``."""
        for stage in self.stages:
            if stage.id == stage_id:
                return stage
        raise KeyError(stage_id)

    def phase(self, phase: str) -> tuple[Stage, ...]:
        """The stages of ``phase`` (``process`` or ``commit``)."""
        return tuple(s for s in self.stages if s.phase == phase)

    def describe(self) -> str:
        """One line per stage: inputs, fused operations, parallelism (for logs and docs)."""
        lines = []
        for s in self.stages:
            src = (
                s.source.id
                if s.source is not None
                else " + ".join(
                    f"{i.stage}{'' if i.repartition is None else ' ' + i.repartition.method}"
                    for i in s.inputs
                )
            )
            ops = " -> ".join(op.id for op in s.ops) or "(emit)"
            lines.append(f"{s.id} [{s.phase}, x{s.parallelism or 1}] {src}: {ops}")
        return "\n".join(lines)
