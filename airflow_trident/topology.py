"""``TridentTopology``: the entry point of the stream API.

Building a topology only adds frozen nodes to a graph and validates them (fields, names); nothing
runs until a runtime executes a batch.

Examples
--------
>>> from airflow_trident.operation import Count, Split
>>> from airflow_trident.spout.memory import MemoryTransactionalSpout
>>> from airflow_trident.state.memory import memory_state
>>> topology = TridentTopology("word_count")
>>> spout = MemoryTransactionalSpout({"p0": [("the cow jumped over the moon",)]}, ["sentence"], 3)
>>> counts = (
...     topology.new_stream("sentences", spout)
...     .each(["sentence"], Split(), ["word"])
...     .group_by(["word"])
...     .persistent_aggregate(memory_state("counts"), Count(), ["count"], name="word_counts")
... )
>>> [node.kind for node in topology.nodes.values()]
['spout', 'each', 'persist']
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from types import FunctionType
from typing import Any

from airflow_trident.errors import NotExactlyOnceError, TopologyError
from airflow_trident.graph import (
    GUARANTEES,
    DrpcNode,
    JoinNode,
    MergeNode,
    N,
    Node,
    PersistNode,
    SpoutNode,
    exactly_once_fix,
    not_exactly_once,
    spout_kind,
    state_kind,
)
from airflow_trident.names import validate_name
from airflow_trident.stream import Stream, TridentState
from airflow_trident.tuple import Fields, as_fields

__all__ = ["TridentTopology"]


# room for a "_<n>" suffix within the 63 characters of a name
_LABEL = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,55}$")


def step_label(node: Node, kind: str) -> str:
    """The name users recognise for an unnamed step: its operation's class (or function) name,
    the state a persist step writes, else the step's kind.

    >>> from airflow_trident.graph import EachNode
    >>> from airflow_trident.operation import Split
    >>> step_label(EachNode("_", (), (), function=Split()), "each")
    'Split'
    >>> step_label(EachNode("_", (), (), function=None), "each")
    'each'
    """
    if isinstance(node, PersistNode):
        return node.state
    parts = getattr(node, "parts", ())
    op = next(
        (
            getattr(node, attr)
            for attr in ("function", "filter", "consumer", "partitioner", "updater")
            if getattr(node, attr, None) is not None and not isinstance(getattr(node, attr), str)
        ),
        parts[0].aggregator if parts else None,
    )
    if op is None:
        return kind
    label = op.__name__ if isinstance(op, FunctionType) else type(op).__name__
    return label if _LABEL.match(label) else kind  # a lambda or a private helper class


class TridentTopology:
    """A named graph of streams, states and spouts (Trident's ``TridentTopology``).

    ``inline=False``: the Spark runtime calls every per-tuple ``execute`` and ``is_keep`` once
    per tuple, never as one comprehension over the columns (``operation/inline.py``; also
    ``[trident] inline`` for every topology). The values, their order and the errors are the
    same either way (docs/api.md); only the frames user code sees differ.
    """

    def __init__(self, name: str, *, inline: bool = True) -> None:
        self.name = validate_name(name, kind="topology")
        self.inline = inline
        self.nodes: dict[str, Node] = {}
        self.children: dict[str, list[str]] = {}
        self.states: dict[str, str] = {}  # state name -> node id of its persist step
        self.spouts: dict[str, str] = {}  # spout name -> node id
        self.drpc_functions: dict[str, str] = {}

    # -- graph building (used by Stream) --------------------------------------------------------

    def add_node(self, make: Callable[[str], N], *, kind: str, name: str | None = None) -> N:
        """Add the node ``make(step_id)``; ``name`` is the step id (default: :func:`step_label`).

        Raises
        ------
        TopologyError
            If the step name is taken, or a parent is unknown.
        """
        step = validate_name(name, kind="step") if name is not None else self._step_id(make, kind)
        if step in self.nodes:
            msg = f"step {step!r} already exists in topology {self.name!r}; give it another name"
            raise TopologyError(msg)
        node = make(step)
        for parent in node.parents:
            if parent not in self.nodes:
                msg = f"step {step!r}: parent step {parent!r} is not in topology {self.name!r}"
                raise TopologyError(msg)
        if len(set(node.fields)) != len(node.fields):
            dupes = sorted({f for f in node.fields if node.fields.count(f) > 1})
            msg = (
                f"step {step!r}: duplicate output field(s) {dupes}; fields would be "
                f"{list(node.fields)}. Hint: name the new fields differently or project first"
            )
            raise TopologyError(msg)
        self.nodes[step] = node
        self.children[step] = []
        for parent in node.parents:
            self.children[parent].append(step)
        return node

    def _step_id(self, make: Callable[[str], Node], kind: str) -> str:
        """The default step id: the operation's name (see :func:`step_label`), numbered from
        ``_2`` only when repeated."""
        label = step_label(make("_"), kind)
        step, n = label, 2
        while step in self.nodes:
            step, n = f"{label}_{n}", n + 1
        return step

    def replace_node(self, node: Node) -> None:
        """Replace a node that has no children yet (used by ``name``/``parallelism_hint``)."""
        if self.children.get(node.id):
            msg = f"step {node.id!r} already has downstream steps; set it before adding them"
            raise TopologyError(msg)
        self.nodes[node.id] = node

    def rename_node(self, old: str, new: str) -> Node:
        """Give the childless step ``old`` the step name ``new``."""
        from dataclasses import replace

        validate_name(new, kind="step")
        if new in self.nodes:
            msg = f"step {new!r} already exists in topology {self.name!r}; give it another name"
            raise TopologyError(msg)
        if self.children.get(old):
            msg = f"step {old!r} already has downstream steps; name it before adding them"
            raise TopologyError(msg)
        node = replace(self.nodes.pop(old), id=new)
        del self.children[old]
        self.nodes[new] = node
        self.children[new] = []
        for parent in node.parents:
            self.children[parent] = [new if c == old else c for c in self.children[parent]]
        for registry in (self.states, self.spouts, self.drpc_functions):
            for key, value in registry.items():
                if value == old:
                    registry[key] = new
        return node

    # -- public API -----------------------------------------------------------------------------

    def new_stream(self, name: str, spout: Any) -> Stream:
        """A stream of ``spout``'s batches; ``name`` names the spout (its ZooKeeper node)."""
        validate_name(name, kind="spout")
        if name in self.spouts:
            msg = f"spout {name!r} already exists in topology {self.name!r}"
            raise TopologyError(msg)
        fields = as_fields(spout.output_fields)
        node = self.add_node(
            lambda step: SpoutNode(step, (), fields, spout=spout), kind="spout", name=name
        )
        self.spouts[name] = node.id
        return Stream(self, node.id)

    def new_drpc_stream(self, function: str) -> Stream:
        """A stream of DRPC requests to ``function``: one ``("args",)`` tuple per request."""
        validate_name(function, kind="DRPC function")
        if function in self.drpc_functions:
            msg = f"DRPC function {function!r} already exists in topology {self.name!r}"
            raise TopologyError(msg)
        node = self.add_node(
            lambda step: DrpcNode(step, (), ("args",), function=function), kind="drpc"
        )
        self.drpc_functions[function] = node.id
        return Stream(self, node.id)

    def merge(self, *streams: Stream, name: str | None = None) -> Stream:
        """The union of ``streams``; they need the same number of fields (the first's names)."""
        if len(streams) < 2:
            msg = "merge needs at least two streams"
            raise TopologyError(msg)
        fields = streams[0].fields
        for s in streams[1:]:
            if len(s.fields) != len(fields):
                msg = (
                    f"merge: stream {s.node_id!r} has fields {list(s.fields)}, but "
                    f"{streams[0].node_id!r} has {list(fields)}; project them to the same arity"
                )
                raise TopologyError(msg)
        self.check_drpc_apart(streams, "merge")
        parents = tuple(s.node_id for s in streams)
        node = self.add_node(lambda step: MergeNode(step, parents, fields), kind="merge", name=name)
        return Stream(self, node.id)

    def join(
        self,
        streams: Sequence[Stream],
        join_fields: Sequence[Sequence[str]],
        output_fields: Sequence[str],
        *,
        join_types: Sequence[str] | str = "inner",
        name: str | None = None,
    ) -> Stream:
        """Join ``streams`` within each batch on ``join_fields`` (one list per stream).

        Output: the join fields, then each stream's other fields, renamed to ``output_fields``.
        ``join_types`` is ``"inner"``/``"outer"`` for all sides or one per stream, as in
        Trident: an ``outer`` side may be missing for a key (its fields are then ``None``).
        """
        keys = tuple(as_fields(f) for f in join_fields)
        types = (join_types,) * len(streams) if isinstance(join_types, str) else tuple(join_types)
        if len(streams) < 2 or len(keys) != len(streams) or len(types) != len(streams):
            msg = "join: give at least two streams, and one key list and join type per stream"
            raise TopologyError(msg)
        if len({len(k) for k in keys}) != 1:
            msg = f"join: every stream needs the same number of join fields, got {keys}"
            raise TopologyError(msg)
        for t in types:
            if t not in ("inner", "outer"):
                msg = f"join: join type {t!r} is not 'inner' or 'outer'"
                raise TopologyError(msg)
        others: list[Fields] = []
        for s, k in zip(streams, keys, strict=True):
            s.check_fields("join", k)
            others.append(tuple(f for f in s.fields if f not in k))
        self.check_drpc_apart(streams, "join")
        out = as_fields(output_fields)
        width = len(keys[0]) + sum(len(o) for o in others)
        if len(out) != width:
            msg = (
                f"join: output fields {list(out)} must name {width} values: the join fields "
                f"{list(keys[0])} then {[list(o) for o in others]}"
            )
            raise TopologyError(msg)
        parents = tuple(s.node_id for s in streams)
        node = self.add_node(
            lambda step: JoinNode(
                step,
                parents,
                out,
                join_fields=keys,
                join_types=types,  # type: ignore[arg-type]
                other_fields=tuple(others),
            ),
            kind="join",
            name=name,
        )
        return Stream(self, node.id)

    def drpc_sources(self, node_id: str) -> tuple[set[str], bool]:
        """The DRPC functions feeding step ``node_id``, and whether a batch source (a spout, a
        state's new values) feeds it too."""
        functions: set[str] = set()
        batch = False
        seen: set[str] = set()
        todo = [node_id]
        while todo:
            step = todo.pop()
            if step in seen:
                continue
            seen.add(step)
            node = self.nodes[step]
            if isinstance(node, DrpcNode):
                functions.add(node.function)
            elif not node.parents:
                batch = True
            todo.extend(node.parents)
        return functions, batch

    def check_drpc_apart(self, streams: Sequence[Stream], call: str) -> None:
        """Refuse to ``call`` (merge or join) a DRPC stream with a batch stream, or the streams
        of two DRPC functions: a request is its own batch, with no txid (as in Trident).

        Raises
        ------
        TopologyError
            Naming the streams and why.
        """
        kinds = [(s.node_id, *self.drpc_sources(s.node_id)) for s in streams]
        functions = {f for _, fs, _ in kinds for f in fs}
        batch = [step for step, _, is_batch in kinds if is_batch]
        drpc = [step for step, fs, _ in kinds if fs]
        if functions and (batch or len(functions) > 1):
            what = (
                f"the DRPC stream(s) {drpc} (function(s) {sorted(functions)}) with the batch "
                f"stream(s) {batch}"
                if batch
                else f"the streams of DRPC functions {sorted(functions)}"
            )
            msg = (
                f"{call}: cannot {call} {what} in topology {self.name!r}: each DRPC request is "
                f"its own batch with no txid, so it never meets a spout's batch. Hint: read "
                f"what the batch stream computes through its state, with state_query on the "
                f"DRPC stream"
            )
            raise TopologyError(msg)

    def state(self, name: str) -> TridentState:
        """The state called ``name`` (created by a persist step of this topology)."""
        from airflow_trident.stream import TridentState

        if name not in self.states:
            msg = f"topology {self.name!r} has no state {name!r}; states: {sorted(self.states)}"
            raise TopologyError(msg)
        return TridentState(self, name)

    def source_spouts(self, node_id: str) -> dict[str, str | None]:
        """The spouts feeding step ``node_id`` (through merges and joins): name -> kind."""
        names = {step: name for name, step in self.spouts.items()}
        found: dict[str, str | None] = {}
        seen: set[str] = set()
        todo = [node_id]
        while todo:
            step = todo.pop()
            if step in seen:
                continue
            seen.add(step)
            node = self.nodes[step]
            if isinstance(node, SpoutNode):
                found[names.get(step, step)] = spout_kind(node.spout)
            todo.extend(node.parents)
        return dict(sorted(found.items()))

    def check_exactly_once(
        self, node_id: str, state: str, factory: Any, *, at_least_once: bool, call: str
    ) -> None:
        """Refuse persisting the stream ending at ``node_id`` into ``state`` (made by
        ``factory``) when its weakest spout and the state are not exactly-once (Trident's
        table), unless ``at_least_once``. Unknown spout kinds or state types are not refused.

        Raises
        ------
        NotExactlyOnceError
            Naming the state, the spout and its kind, why, and the fixes.
        """
        state_type = state_kind(factory)
        spouts = {n: k for n, k in self.source_spouts(node_id).items() if k is not None}
        if at_least_once or state_type is None or not spouts:
            return
        weakest = max(spouts.values(), key=GUARANTEES.index)
        why = not_exactly_once(weakest, state_type)
        if why is None:
            return
        named = ", ".join(repr(n) for n, k in spouts.items() if k == weakest)
        spout = f"spout {named}" if "," not in named else f"spouts {named}"
        msg = (
            f"state {state!r} ({state_type} state) fed by {spout} ({weakest} spout) in "
            f"topology {self.name!r} is not exactly-once: {why}. Hint: "
            f"{exactly_once_fix(weakest, state_type)}, or pass at_least_once=True to {call} "
            f"to accept at-least-once"
        )
        raise NotExactlyOnceError(msg)

    def register_state(self, name: str, node_id: str) -> None:
        """Record that step ``node_id`` persists state ``name``."""
        if name in self.states:
            msg = f"state {name!r} already exists in topology {self.name!r}; name it differently"
            raise TopologyError(msg)
        self.states[name] = node_id
