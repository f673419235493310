"""The topology graph: frozen nodes. Building a topology only adds nodes; nothing runs.

Each node has a stable id (a step name), its parents' ids, and the fields it outputs.

It also knows Trident's exactly-once table, so a persist step can be checked when it is added:
which guarantee a spout gives (:func:`spout_kind`), which rule a state applies
(:func:`state_kind`), and whether the pair is exactly-once (:func:`not_exactly_once`).

>>> from airflow_trident.spout.memory import FixedBatchSpout, MemoryOpaqueSpout
>>> spout_kind(FixedBatchSpout(["w"], 1)), spout_kind(MemoryOpaqueSpout({"p": []}, ["w"], 1))
('non_transactional', 'opaque')
>>> [not_exactly_once("transactional", s) is None for s in GUARANTEES]
[True, True, False]
>>> not_exactly_once("opaque", "transactional")[:52]
'an opaque spout may re-emit a txid with other tuples'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from airflow_trident.tuple import Fields

__all__ = [
    "GUARANTEES",
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
    "WindowNode",
    "exactly_once_fix",
    "not_exactly_once",
    "spout_kind",
    "spout_shape",
    "state_kind",
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
    ``"update"`` (a ``partition_persist`` with a state updater). ``at_least_once``: the user
    accepted a spout and state that together are not exactly-once.
    """

    state: str = ""
    factory: Any = None
    mode: Literal["aggregate", "update"] = "aggregate"
    parts: tuple[AggPart, ...] = ()
    group_fields: Fields = ()
    updater: Any = None
    input_fields: Fields = ()
    new_values_fields: Fields = ()
    at_least_once: bool = False


@dataclass(frozen=True, eq=False)
class WindowNode(PersistNode):
    """A window across batches (``tumbling_window``, ``sliding_window``, ``window``).

    Its output is the aggregator's ``output_fields`` for each window that fired in the batch.
    It is also the persist step of its window store (state ``state``, ``mode="update"``): the
    window's results of a batch are staged, and the store's commit removes what the committed
    txid no longer needs. ``window_inputs`` are the fields the aggregator reads.
    """

    config: Any = None
    aggregator: Any = None
    window_inputs: Fields = ()
    window_store: Any = None


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


# -- Trident's exactly-once table ---------------------------------------------------------------

GUARANTEES = ("transactional", "opaque", "non_transactional")
"""Spout kinds and state types, strongest first."""

SpoutShape = Literal["trident", "partitioned", "opaque", "batch"]


def spout_shape(spout: Any) -> SpoutShape | None:
    """Which spout contract ``spout`` implements (``None``: none of them).

    ``"trident"``: a ``TridentSpout`` (coordinator, emitter, ``kind``); ``"partitioned"`` /
    ``"opaque"``: a (opaque) partitioned transactional spout; ``"batch"``: a batch spout
    (``emit_batch``). :func:`~airflow_trident.spout.executor.as_trident_spout` wraps by it.
    """
    if all(hasattr(spout, a) for a in ("get_coordinator", "get_emitter", "kind")):
        return "trident"
    if hasattr(spout, "get_partitioned_coordinator"):
        return "partitioned"
    if hasattr(spout, "get_opaque_coordinator"):
        return "opaque"
    if hasattr(spout, "emit_batch") and hasattr(spout, "output_fields"):
        return "batch"
    return None


def _guarantee(kind: Any) -> str | None:
    value = getattr(kind, "value", kind)  # a StateType, or its value
    return value if isinstance(value, str) and value in GUARANTEES else None


def spout_kind(spout: Any) -> str | None:
    """The guarantee ``spout`` gives: ``"transactional"``, ``"opaque"``, ``"non_transactional"``
    (a batch spout), or ``None`` when unknown."""
    shape = spout_shape(spout)
    if shape == "trident":
        return _guarantee(spout.kind)
    return {"partitioned": "transactional", "opaque": "opaque", "batch": "non_transactional"}.get(
        shape or ""
    )


def state_kind(factory: Any) -> str | None:
    """The rule of the states ``factory`` makes (its ``state_type``), or ``None`` when unknown."""
    return _guarantee(getattr(factory, "state_type", None))


_WHY_SPOUT = (
    "a non-transactional spout does not promise to re-emit a failed batch's tuples (nor only "
    "them), so a replay can lose tuples or count them twice"
)
_WHY_STATE = "a non-transactional state stores no txid, so a replayed batch is applied again"
_WHY_OPAQUE = (
    "an opaque spout may re-emit a txid with other tuples, and a transactional state skips a "
    "txid it already holds, so tuples can be lost or counted twice"
)


def not_exactly_once(spout: str, state: str) -> str | None:
    """Why a spout of kind ``spout`` into a state of type ``state`` is not exactly-once, or
    ``None`` when it is (Trident: a transactional spout with a transactional or opaque state, an
    opaque spout with an opaque state)."""
    why = []
    if spout == "non_transactional":
        why.append(_WHY_SPOUT)
    if state == "non_transactional":
        why.append(_WHY_STATE)
    if spout == "opaque" and state == "transactional":
        why.append(_WHY_OPAQUE)
    return "; and ".join(why) or None


def exactly_once_fix(spout: str, state: str) -> str:
    """How to make a spout of kind ``spout`` and a state of type ``state`` exactly-once."""
    fixes = []
    if spout == "non_transactional":
        fixes.append("use a transactional or opaque spout")
    if state == "non_transactional":
        fixes.append("use a transactional or opaque state")
    if spout == "opaque" and state == "transactional":
        fixes.append("use an opaque state (state_type='opaque') or a transactional spout")
    return " and ".join(fixes)


N = TypeVar("N", bound=Node)


class GraphBuilder(Protocol):
    """The seam between the stream handles and the graph they grow: what a
    :class:`~airflow_trident.stream.Stream` asks of its topology.

    :class:`~airflow_trident.topology.TridentTopology` implements it and hands out the handles
    (``topology`` imports ``stream``); ``stream`` knows only this Protocol, so the two modules
    do not import each other.
    """

    name: str
    nodes: dict[str, Node]
    states: dict[str, str]

    def add_node(self, make: Callable[[str], N], *, kind: str, name: str | None = None) -> N:
        """Add the node ``make(step_id)`` below its parents and return it."""
        ...

    def replace_node(self, node: Node) -> None:
        """Replace a node that has no downstream steps yet."""
        ...

    def rename_node(self, old: str, new: str) -> Node:
        """Give a node with no downstream steps a user's name."""
        ...

    def check_exactly_once(
        self, node_id: str, state: str, factory: Any, *, at_least_once: bool, call: str
    ) -> None:
        """Refuse a spout/state pair that is not exactly-once (Trident's table)."""
        ...

    def register_state(self, name: str, node_id: str) -> None:
        """Record that step ``node_id`` persists state ``name``."""
        ...
