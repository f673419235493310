"""The topology graph: frozen nodes. Building a topology only adds nodes; nothing runs.

Each node has a stable id (a step name), its parents' ids, and the fields it outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_trident.tuple import Fields

__all__ = [
    "AggPart",
    "AggregateNode",
    "DrpcNode",
    "EachNode",
    "FilterNode",
    "JoinNode",
    "MapNode",
    "MergeNode",
    "NewValuesNode",
    "Node",
    "PeekNode",
    "PersistNode",
    "ProjectNode",
    "RepartitionNode",
    "SpoutNode",
    "StateQueryNode",
]

RepartitionMethod = Literal[
    "shuffle", "partition_by", "global", "batch_global", "broadcast", "custom"
]
JoinType = Literal["inner", "outer"]


@dataclass(frozen=True, eq=False)
class Node:
    """A step of the topology."""

    id: str
    parents: tuple[str, ...]
    fields: Fields
    parallelism: int | None = None

    @property
    def kind(self) -> str:
        """A short name of the node's type (``each``, ``aggregate``, ...)."""
        return type(self).__name__.removesuffix("Node").lower()


@dataclass(frozen=True, eq=False)
class SpoutNode(Node):
    """Where a stream starts: a spout's batch."""

    spout: Any = None


@dataclass(frozen=True, eq=False)
class DrpcNode(Node):
    """Where a DRPC stream starts: one ``("args",)`` tuple per request."""

    function: str = ""


@dataclass(frozen=True, eq=False)
class NewValuesNode(Node):
    """The values a persist step wrote, as a stream (runs in the commit phase)."""

    state: str = ""


@dataclass(frozen=True, eq=False)
class EachNode(Node):
    """A :class:`~airflow_trident.operation.Function`; its output fields are appended."""

    function: Any = None
    input_fields: Fields = ()
    function_fields: Fields = ()


@dataclass(frozen=True, eq=False)
class FilterNode(Node):
    """A :class:`~airflow_trident.operation.Filter`."""

    filter: Any = None
    input_fields: Fields = ()


@dataclass(frozen=True, eq=False)
class MapNode(Node):
    """A map (one out per tuple) or flat map (any number); output fields replace the input."""

    function: Any = None
    flat: bool = False


@dataclass(frozen=True, eq=False)
class PeekNode(Node):
    """A consumer that sees every tuple."""

    consumer: Any = None


@dataclass(frozen=True, eq=False)
class ProjectNode(Node):
    """Keeps only some fields."""


@dataclass(frozen=True, eq=False)
class RepartitionNode(Node):
    """Moves tuples between partitions."""

    method: RepartitionMethod = "shuffle"
    key_fields: Fields = ()
    partitioner: Any = None


@dataclass(frozen=True)
class AggPart:
    """One aggregator of an aggregation (several when chained)."""

    aggregator: Any
    input_fields: Fields
    output_fields: Fields


@dataclass(frozen=True, eq=False)
class AggregateNode(Node):
    """Aggregation per partition (``scope="partition"``) or over the whole batch."""

    parts: tuple[AggPart, ...] = ()
    group_fields: Fields = ()
    scope: Literal["partition", "batch"] = "batch"


@dataclass(frozen=True, eq=False)
class PersistNode(Node):
    """Applies the batch to a state in the commit phase.

    ``mode`` is ``"aggregate"`` (a persistent aggregate; ``parts`` holds its aggregator) or
    ``"update"`` (a ``partition_persist`` with a state updater).
    """

    state: str = ""
    factory: Any = None
    mode: Literal["aggregate", "update"] = "aggregate"
    parts: tuple[AggPart, ...] = ()
    group_fields: Fields = ()
    updater: Any = None
    input_fields: Fields = ()
    new_values_fields: Fields = ()


@dataclass(frozen=True, eq=False)
class StateQueryNode(Node):
    """Reads a state for each tuple; output fields are appended."""

    state: str = ""
    function: Any = None
    input_fields: Fields = ()
    function_fields: Fields = ()


@dataclass(frozen=True, eq=False)
class MergeNode(Node):
    """The union of streams with the same number of fields (names of the first)."""


@dataclass(frozen=True, eq=False)
class JoinNode(Node):
    """Joins streams within a batch on key fields (one list per parent)."""

    join_fields: tuple[Fields, ...] = ()
    join_types: tuple[JoinType, ...] = ()
    other_fields: tuple[Fields, ...] = field(default_factory=tuple)
