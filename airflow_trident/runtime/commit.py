"""The commit phase: apply staged rows to states with their exactly-once rules.

Both runtimes stage the same rows (see :class:`~airflow_trident.runtime.result.StagedState`);
this module applies them, partition by partition, each partition with its own state object (so a
SQL state commits one database transaction per partition). States are made through the run's
:class:`~airflow_trident.state.binding.StateBinding` (its state database).

Before an opaque state takes a batch, the keys an earlier, failed attempt of the same txid wrote
and this attempt does not write are put back to their value before the txid
(:meth:`StateCommitter.revert_unwritten`): an opaque replay may read less (an unreadable
partition) and those tuples come again in a later txid, so leaving the failed attempt's
contribution would count them twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from airflow_trident.graph import NewValuesNode, PersistNode
from airflow_trident.operation.base import CombinerAggregator, ReducerAggregator
from airflow_trident.runtime.aggregate import group_rows
from airflow_trident.runtime.result import Partitions, StagedState
from airflow_trident.state.base import Key, State, StateType
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.bracket import StateUpdate, apply_in_commit
from airflow_trident.state.map.snapshot import GLOBAL_KEY, SnapshottableMap
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentCollector, TridentTuple

__all__ = ["StateCommitter", "query_state"]

log = logging.getLogger(__name__)


def query_state(topology: TridentTopology, name: str, states: StateBinding | None = None) -> Any:
    """The state called ``name`` for reading committed values (``state_query``, DRPC, users),
    in the run's state database (``states``).

    A grouped state is its map state (``multi_get``); an ungrouped persistent aggregate is a
    :class:`SnapshottableMap` (``get()``).
    """
    node = _persist_node(topology, name)
    state: Any = (states or StateBinding()).make_state(node.factory, 0, 1)
    if node.mode == "aggregate" and not node.group_fields:
        return SnapshottableMap(state)
    return state


def _persist_node(topology: TridentTopology, name: str) -> PersistNode:
    node = topology.nodes[topology.states[name]]
    assert isinstance(node, PersistNode)
    return node


def _combiner_updater(aggregator: CombinerAggregator[Any], value: Any) -> Callable[[Any], Any]:
    def update(old: Any) -> Any:
        return value if old is None else aggregator.combine(old, value)

    return update


def _reducer_updater(
    aggregator: ReducerAggregator[Any], views: Sequence[TridentTuple]
) -> Callable[[Any], Any]:
    def update(old: Any) -> Any:
        acc = aggregator.init() if old is None else old
        for view in views:
            acc = aggregator.reduce(acc, view)
        return acc

    return update


def _state_is_opaque(state: Any) -> bool:
    """Whether ``state`` applies the opaque rule: its ``state_type`` (an ``OpaqueMap``), or
    that of the map under it (``map_state``: a snapshottable value over a map); a state that
    declares no rule but can revert (``revert_txid``) is asked to."""
    for candidate in (state, getattr(state, "map_state", None)):
        declared = getattr(candidate, "state_type", None)
        if declared is not None:
            return bool(declared is StateType.OPAQUE)
    return callable(getattr(state, "revert_txid", None))


class StateCommitter:
    """Makes each persist step's per-partition states (in the run's state database,
    ``states``) and applies staged rows to them."""

    def __init__(self, topology: TridentTopology, states: StateBinding | None = None) -> None:
        self.topology = topology
        self.states = states or StateBinding()

    def make_states(self, staged: Mapping[str, StagedState]) -> dict[str, list[State]]:
        """One state object per staged partition of each state."""
        states: dict[str, list[State]] = {}
        for name, stage in staged.items():
            node = _persist_node(self.topology, name)
            n = max(1, len(stage.partitions))
            states[name] = [self.states.make_state(node.factory, i, n) for i in range(n)]
        return states

    def written_keys(self, stage: StagedState) -> list[Key] | None:
        """The state keys staged rows of ``stage`` write (``None`` for a user's state updater,
        whose keys only it knows)."""
        if stage.kind == "update":
            return None
        g = len(_persist_node(self.topology, stage.state).group_fields)
        if not g:
            return [GLOBAL_KEY] if any(stage.partitions) else []
        return [tuple(r[:g]) for part in stage.partitions for r in part]

    def is_opaque(self, name: str) -> bool:
        """Whether state ``name`` applies the opaque rule (it then reverts unwritten keys).

        The factory's ``state_type`` says so when it declares one; otherwise the state it makes
        does (a user's wrapper or custom factory over an ``OpaqueMap``, Trident's
        ``IBackingMap`` use case): its ``state_type``, or that of the map it stores in."""
        factory = _persist_node(self.topology, name).factory
        declared = getattr(factory, "state_type", None)
        if declared is not None:
            return bool(declared is StateType.OPAQUE)
        return _state_is_opaque(self.states.make_state(factory, 0, 1))

    def revert_unwritten(self, txid: int, name: str, keys: Iterable[Key] | None) -> int:
        """Put the keys of opaque state ``name`` that an earlier attempt of ``txid`` wrote and
        ``keys`` (this attempt's) do not contain back to their value before ``txid``, in one
        state commit; return how many. Other states, and ``keys=None``, revert nothing.
        """
        if keys is None or not self.is_opaque(name):
            return 0
        node = _persist_node(self.topology, name)
        state = self.states.make_state(node.factory, 0, 1)
        revert = getattr(state, "revert_txid", None)
        if not callable(revert):
            return 0
        keep = {tuple(k) for k in keys}
        reverted: list[int] = []
        apply_in_commit(
            txid, state, lambda: reverted.append(revert(txid, keep))
        )
        count = reverted[0] if reverted else 0
        if count:
            log.warning(
                "txid %d: state %s: %d keys written by an earlier attempt of this txid and not by "
                "this one were put back to their value before txid %d",
                txid, name, count, txid,
            )  # fmt: skip
        return count

    def wants_new_values(self, name: str) -> bool:
        """Whether a stream reads the new values of state ``name``."""
        node_id = self.topology.states[name]
        return any(
            isinstance(self.topology.nodes[c], NewValuesNode)
            for c in self.topology.children[node_id]
        )

    def updates(
        self,
        staged: Mapping[str, StagedState],
        states: Mapping[str, Sequence[State]],
        new_values: dict[str, Partitions],
    ) -> list[StateUpdate]:
        """One ``(state, apply)`` per staged partition of each state, for the coordinator's
        commit; applying fills ``new_values`` (state -> partitions of new-values tuples)."""
        result: list[StateUpdate] = []
        for name, stage in staged.items():
            node = _persist_node(self.topology, name)
            partitions = stage.partitions or [[]]
            new_values[name] = [[] for _ in partitions]
            for index, (rows, state) in enumerate(zip(partitions, states[name], strict=True)):
                result.append(
                    (state, self._applier(node, stage, rows, state, new_values[name], index))
                )
        return result

    def apply_partition(
        self,
        stage: StagedState,
        rows: list[tuple[Any, ...]],
        index: int,
        num_partitions: int,
        txid: int,
    ) -> list[tuple[Any, ...]]:
        """Apply staged partition ``index`` of ``num_partitions`` of ``stage.state`` to that
        partition's state in its own state commit (what a Spark executor runs for its
        partition); return the new-values tuples (empty unless a stream reads them).

        Raises whatever the state raises (e.g. ``StateBehindError``), after rolling it back.
        """
        node = _persist_node(self.topology, stage.state)
        state = self.states.make_state(node.factory, index, num_partitions)
        new_values: list[tuple[Any, ...]] = []

        def apply() -> None:
            new_values.extend(self._apply_partition(node, stage, rows, state))

        apply_in_commit(txid, state, apply)
        return new_values

    def _applier(
        self,
        node: PersistNode,
        stage: StagedState,
        rows: list[tuple[Any, ...]],
        state: Any,
        sink: Partitions,
        index: int,
    ) -> Callable[[], None]:
        def apply() -> None:
            sink[index] = self._apply_partition(node, stage, rows, state)

        return apply

    def _apply_partition(
        self, node: PersistNode, stage: StagedState, rows: list[tuple[Any, ...]], state: Any
    ) -> list[tuple[Any, ...]]:
        if stage.kind == "update":
            collector = TridentCollector()
            views = [TridentTuple(r, stage.fields) for r in rows]
            node.updater.update_state(state, views, collector)
            return collector.rows
        g = len(node.group_fields)
        if stage.kind == "reduce":
            inputs = node.input_fields
            groups = group_rows(rows, range(g))
            keys = [k if g else GLOBAL_KEY for k in groups]
            updaters = [
                _reducer_updater(
                    node.parts[0].aggregator, [TridentTuple(r[g:], inputs) for r in members]
                )
                for members in groups.values()
            ]
            new = state.multi_update(keys, updaters) if keys else []
            return [(*k, v) for k, v in zip(groups, new, strict=True)]
        aggregator: CombinerAggregator[Any] = node.parts[0].aggregator
        keys = [r[:g] if g else GLOBAL_KEY for r in rows]
        values = [r[g] for r in rows]
        op = type(aggregator).combine_op
        if op is not None and not self.wants_new_values(node.state):
            kept = [(k, v) for k, v in zip(keys, values, strict=True) if v is not None]
            if kept:
                state.multi_combine([k for k, _ in kept], [v for _, v in kept], op)
            return []
        updaters = [_combiner_updater(aggregator, v) for v in values]
        new = state.multi_update(keys, updaters) if keys else []
        return [(*r[:g], v) for r, v in zip(rows, new, strict=True)]
