"""``Stream``, ``GroupedStream``, ``TridentState``: Trident's operations in snake_case.

Every method adds a node to the topology and returns a new handle; nothing runs. Fields follow
Trident: ``each`` appends its output fields, aggregations replace the fields with (group fields
and) their outputs, ``project`` keeps some. Unknown fields fail at once, naming the step.

This module is long on purpose: it is the whole handle side of Trident's stream API, whose three
handles return each other (a ``Stream`` groups into a ``GroupedStream``, which aggregates back
into a ``Stream`` or persists into a ``TridentState``); split, they would import each other in a
circle. The graph they grow is reached through :class:`~airflow_trident.graph.GraphBuilder`.

Examples
--------
>>> from airflow_trident.operation import Count, Split, Sum
>>> from airflow_trident.spout.memory import FixedBatchSpout
>>> from airflow_trident.topology import TridentTopology
>>> t = TridentTopology("scores")
>>> s = t.new_stream("plays", FixedBatchSpout(["user", "score"], 2, ("ann", 3), ("bob", 4)))
>>> s.each(["user"], Split(), ["user"])
Traceback (most recent call last):
...
airflow_trident.errors.TopologyError: step 'Split': duplicate output field(s) ['user']; ...
>>> s.group_by(["name"])
Traceback (most recent call last):
...
airflow_trident.errors.TopologyError: step 'group_by': unknown field(s) ['name']; ...
>>> s.group_by(["user"]).aggregate(["score"], Sum(), ["total"]).fields
('user', 'total')
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from airflow_trident.errors import TopologyError
from airflow_trident.graph import (
    AggPart,
    AggregateNode,
    DrpcNode,
    EachNode,
    FilterNode,
    GraphBuilder,
    MapNode,
    NewValuesNode,
    PeekNode,
    PersistNode,
    ProjectNode,
    RepartitionNode,
    StateQueryNode,
    WindowNode,
)
from airflow_trident.names import validate_name
from airflow_trident.operation.base import (
    Aggregator,
    CombinerAggregator,
    Consumer,
    Filter,
    FlatMapFunction,
    Function,
    MapFunction,
    QueryFunction,
    ReducerAggregator,
    StateUpdater,
)
from airflow_trident.operation.builtin import FirstN
from airflow_trident.operation.window import (
    DurationLike,
    SlidingCountWindow,
    SlidingDurationWindow,
    TumblingCountWindow,
    TumblingDurationWindow,
    WindowConfig,
    WindowStoreCommit,
)
from airflow_trident.tuple import Fields, as_fields

__all__ = ["ChainedAggregatorDeclarer", "GroupedStream", "Stream", "TridentState"]

FieldsLike = str | Sequence[str]


@dataclass(frozen=True)
class Stream:
    """A stream of tuples within each batch, ending at step :attr:`node_id`."""

    topology: GraphBuilder
    node_id: str

    @property
    def fields(self) -> Fields:
        """The fields of the stream's tuples."""
        return self.topology.nodes[self.node_id].fields

    def check_fields(self, step: str, wanted: Sequence[str]) -> Fields:
        """Return ``wanted`` if every field is in the stream, else raise naming ``step``."""
        missing = [f for f in wanted if f not in self.fields]
        if missing:
            msg = f"step {step!r}: unknown field(s) {missing}; available: {list(self.fields)}"
            raise TopologyError(msg)
        return tuple(wanted)

    def _add(self, kind: str, make: Callable[[str], Any], name: str | None = None) -> Stream:
        node = self.topology.add_node(make, kind=kind, name=name)
        return Stream(self.topology, node.id)

    # -- per-tuple operations -------------------------------------------------------------------

    def each(
        self,
        input_fields: FieldsLike,
        operation: Function | Filter,
        output_fields: FieldsLike | None = None,
        *,
        name: str | None = None,
    ) -> Stream:
        """Apply a function (its output fields are appended) or a filter to each tuple."""
        inputs = as_fields(input_fields)
        if isinstance(operation, Filter):
            if output_fields:
                msg = "each(filter) takes no output fields: a filter only keeps or drops tuples"
                raise TopologyError(msg)
            return self.filter(inputs, operation, name=name)
        if not isinstance(operation, Function):
            msg = f"each: {operation!r} is neither a Function nor a Filter"
            raise TopologyError(msg)
        outputs = as_fields(output_fields or ())
        if not outputs:
            msg = "each(function) needs output fields: the names of the values it emits"
            raise TopologyError(msg)
        self.check_fields(name or "each", inputs)
        fields = self.fields + outputs
        return self._add(
            "each",
            lambda s: EachNode(
                s,
                (self.node_id,),
                fields,
                function=operation,
                input_fields=inputs,
                function_fields=outputs,
            ),
            name,
        )

    def filter(
        self,
        input_fields: FieldsLike | Filter,
        filter_: Filter | None = None,
        *,
        name: str | None = None,
    ) -> Stream:
        """Keep the tuples a filter accepts: ``filter(f)`` or ``filter(input_fields, f)``."""
        if isinstance(input_fields, Filter):
            filter_, inputs = input_fields, self.fields
        else:
            inputs = self.check_fields(name or "filter", as_fields(input_fields))
        if not isinstance(filter_, Filter):
            msg = f"filter: {filter_!r} is not a Filter"
            raise TopologyError(msg)
        op = filter_
        return self._add(
            "filter",
            lambda s: FilterNode(s, (self.node_id,), self.fields, filter=op, input_fields=inputs),
            name,
        )

    def map(
        self,
        function: MapFunction,
        output_fields: FieldsLike | None = None,
        *,
        name: str | None = None,
    ) -> Stream:
        """Replace each tuple by one tuple (same fields unless ``output_fields`` is given)."""
        fields = as_fields(output_fields) if output_fields else self.fields
        return self._add(
            "map", lambda s: MapNode(s, (self.node_id,), fields, function=function), name
        )

    def flat_map(
        self,
        function: FlatMapFunction,
        output_fields: FieldsLike | None = None,
        *,
        name: str | None = None,
    ) -> Stream:
        """Replace each tuple by any number of tuples."""
        fields = as_fields(output_fields) if output_fields else self.fields
        return self._add(
            "flat_map",
            lambda s: MapNode(s, (self.node_id,), fields, function=function, flat=True),
            name,
        )

    def peek(self, consumer: Consumer, *, name: str | None = None) -> Stream:
        """Let ``consumer`` see each tuple; the stream is unchanged."""
        return self._add(
            "peek", lambda s: PeekNode(s, (self.node_id,), self.fields, consumer=consumer), name
        )

    def project(self, fields: FieldsLike, *, name: str | None = None) -> Stream:
        """Keep only ``fields``, in that order."""
        kept = self.check_fields(name or "project", as_fields(fields))
        return self._add("project", lambda s: ProjectNode(s, (self.node_id,), kept), name)

    # -- repartitioning -------------------------------------------------------------------------

    def _repartition(
        self, method: Any, keys: Fields = (), partitioner: Any = None, name: str | None = None
    ) -> Stream:
        return self._add(
            method,
            lambda s: RepartitionNode(
                s,
                (self.node_id,),
                self.fields,
                method=method,
                key_fields=keys,
                partitioner=partitioner,
            ),
            name,
        )

    def partition_by(self, fields: FieldsLike, *, name: str | None = None) -> Stream:
        """Send tuples with equal values of ``fields`` to the same partition."""
        keys = self.check_fields(name or "partition_by", as_fields(fields))
        return self._repartition("partition_by", keys, name=name)

    def global_(self, *, name: str | None = None) -> Stream:
        """Send every tuple to one partition."""
        return self._repartition("global", name=name)

    def batch_global(self, *, name: str | None = None) -> Stream:
        """Send every tuple of a batch to one partition (the same as ``global_`` here)."""
        return self._repartition("batch_global", name=name)

    def shuffle(self, *, name: str | None = None) -> Stream:
        """Spread tuples evenly over the partitions."""
        return self._repartition("shuffle", name=name)

    def broadcast(self, *, name: str | None = None) -> Stream:
        """Send every tuple to every partition."""
        return self._repartition("broadcast", name=name)

    def partition(
        self,
        partitioner: Callable[[tuple[Any, ...], int], Sequence[int]],
        *,
        name: str | None = None,
    ) -> Stream:
        """Send each tuple to the partitions ``partitioner(values, num_partitions)`` returns."""
        return self._repartition("custom", partitioner=partitioner, name=name)

    def parallelism_hint(self, n: int) -> Stream:
        """Run the steps since the last repartition in ``n`` partitions."""
        if n < 1:
            msg = f"parallelism_hint must be >= 1, got {n}"
            raise TopologyError(msg)
        node = self.topology.nodes[self.node_id]
        self.topology.replace_node(replace(node, parallelism=n))
        return self

    def name(self, name: str) -> Stream:
        """Give the last step the step name ``name`` (shown in plans, logs and errors)."""
        node = self.topology.rename_node(self.node_id, name)
        if isinstance(node, WindowNode):  # a window's store and state are named after it
            node = _renamed_window(self.topology, node)
        return Stream(self.topology, node.id)

    # -- aggregation ----------------------------------------------------------------------------

    def _aggregate(
        self,
        parts: Sequence[AggPart],
        scope: str,
        group: Fields = (),
        name: str | None = None,
    ) -> Stream:
        step = name or ("partition_aggregate" if scope == "partition" else "aggregate")
        for part in parts:
            self.check_fields(step, part.input_fields)
            _check_aggregator(step, part.aggregator)
        fields = group + tuple(f for p in parts for f in p.output_fields)
        return self._add(
            "aggregate" if scope == "batch" else "partition_aggregate",
            lambda s: AggregateNode(
                s,
                (self.node_id,),
                fields,
                parts=tuple(parts),
                group_fields=group,
                scope=scope,  # type: ignore[arg-type]
            ),
            name,
        )

    def partition_aggregate(
        self,
        input_fields: FieldsLike,
        aggregator: Any,
        output_fields: FieldsLike,
        *,
        name: str | None = None,
    ) -> Stream:
        """Aggregate each partition of the batch separately."""
        part = AggPart(aggregator, as_fields(input_fields), as_fields(output_fields))
        return self._aggregate([part], "partition", name=name)

    def aggregate(
        self,
        input_fields: FieldsLike,
        aggregator: Any,
        output_fields: FieldsLike,
        *,
        name: str | None = None,
    ) -> Stream:
        """Aggregate the whole batch (combiners aggregate per partition first)."""
        part = AggPart(aggregator, as_fields(input_fields), as_fields(output_fields))
        return self._aggregate([part], "batch", name=name)

    def chained_agg(self) -> ChainedAggregatorDeclarer:
        """Start several aggregations over the same tuples; finish with ``chain_end()``."""
        return ChainedAggregatorDeclarer(self, ())

    def group_by(self, fields: FieldsLike) -> GroupedStream:
        """Group by ``fields`` for the next aggregation, persistent aggregation or query."""
        return GroupedStream(self, self.check_fields("group_by", as_fields(fields)))

    def min_by(self, field: str, *, name: str | None = None) -> Stream:
        """The tuple of the batch with the smallest ``field``."""
        self.check_fields(name or "min_by", [field])
        return self.aggregate(self.fields, FirstN(1, field, reverse=False), self.fields, name=name)

    def max_by(self, field: str, *, name: str | None = None) -> Stream:
        """The tuple of the batch with the largest ``field``."""
        self.check_fields(name or "max_by", [field])
        return self.aggregate(self.fields, FirstN(1, field, reverse=True), self.fields, name=name)

    def min(self, key: Callable[[tuple[Any, ...]], Any], *, name: str | None = None) -> Stream:
        """The tuple of the batch with the smallest ``key(values)``."""
        return self.aggregate(self.fields, _KeyedFirst(key, False), self.fields, name=name)

    def max(self, key: Callable[[tuple[Any, ...]], Any], *, name: str | None = None) -> Stream:
        """The tuple of the batch with the largest ``key(values)``."""
        return self.aggregate(self.fields, _KeyedFirst(key, True), self.fields, name=name)

    # -- windows (across batches) ---------------------------------------------------------------

    def tumbling_window(
        self,
        window: int | datetime.timedelta,
        store_factory: Any,
        input_fields: FieldsLike,
        aggregator: Any,
        output_fields: FieldsLike,
        *,
        name: str | None = None,
        timestamp_field: str | None = None,
        lag: DurationLike = 0,
        clock: Callable[[], float] | None = None,
    ) -> Stream:
        """Aggregate back-to-back windows of ``window`` tuples (an ``int``) or of a duration (a
        ``timedelta``) across batches, per partition; output: ``output_fields``.

        ``timestamp_field``, ``lag`` and ``clock`` choose event or processing time for duration
        windows (see :mod:`airflow_trident.operation.window`); the window's tuples and results
        live in ``store_factory`` (``sql_window_store(None)``: the run's state database).
        """
        if isinstance(window, datetime.timedelta):
            config: WindowConfig = TumblingDurationWindow.of(
                window, timestamp_field=timestamp_field, lag=lag, clock=clock
            )
        else:
            _count_only(window, timestamp_field, clock, "tumbling_window")
            config = TumblingCountWindow.of(window)
        return self.window(
            config, store_factory, input_fields, aggregator, output_fields, name=name
        )

    def sliding_window(
        self,
        window: int | datetime.timedelta,
        slide: int | datetime.timedelta,
        store_factory: Any,
        input_fields: FieldsLike,
        aggregator: Any,
        output_fields: FieldsLike,
        *,
        name: str | None = None,
        timestamp_field: str | None = None,
        lag: DurationLike = 0,
        clock: Callable[[], float] | None = None,
    ) -> Stream:
        """Every ``slide``, aggregate the last ``window`` (tuple counts as ``int`` s, or
        durations as ``timedelta`` s) across batches, per partition (see
        :meth:`tumbling_window`)."""
        if isinstance(window, datetime.timedelta) and isinstance(slide, datetime.timedelta):
            config: WindowConfig = SlidingDurationWindow.of(
                window, slide, timestamp_field=timestamp_field, lag=lag, clock=clock
            )
        elif isinstance(window, datetime.timedelta) or isinstance(slide, datetime.timedelta):
            msg = "sliding_window: give the window and the slide both as counts or as durations"
            raise TopologyError(msg)
        else:
            _count_only(window, timestamp_field, clock, "sliding_window")
            config = SlidingCountWindow.of(window, slide)
        return self.window(
            config, store_factory, input_fields, aggregator, output_fields, name=name
        )

    def window(
        self,
        config: WindowConfig,
        store_factory: Any,
        input_fields: FieldsLike,
        aggregator: Any,
        output_fields: FieldsLike,
        *,
        name: str | None = None,
    ) -> Stream:
        """Aggregate the windows ``config`` describes (``TumblingCountWindow``,
        ``SlidingCountWindow``, ``TumblingDurationWindow``, ``SlidingDurationWindow``) across
        batches, per partition, with ``aggregator`` over ``input_fields``; output:
        ``output_fields`` of each window that fired in the batch (Trident's ``window``).

        Raises
        ------
        TopologyError
            If a field is unknown, the aggregator or store is not one, or the stream is a DRPC
            stream or a state's new values (windows span the spouts' batches).
        """
        return _add_window(self, config, store_factory, input_fields, aggregator, output_fields,
                           name)  # fmt: skip

    # -- state ----------------------------------------------------------------------------------

    def persistent_aggregate(
        self,
        state_factory: Any,
        input_fields: FieldsLike | Any,
        aggregator: Any = None,
        output_fields: FieldsLike | None = None,
        *,
        name: str | None = None,
        at_least_once: bool = False,
    ) -> TridentState:
        """Aggregate every batch into a state holding one value (a ``Snapshottable``).

        ``persistent_aggregate(factory, agg, out)`` or
        ``persistent_aggregate(factory, input_fields, agg, out)``.

        Raises
        ------
        NotExactlyOnceError
            If the stream's spouts and the state are not exactly-once together (see
            ``docs/concepts.md``), unless ``at_least_once=True`` accepts that.
        """
        return _persist_aggregate(
            self, (), state_factory, input_fields, aggregator, output_fields, name, at_least_once
        )

    def partition_persist(
        self,
        state_factory: Any,
        input_fields: FieldsLike,
        updater: StateUpdater[Any],
        output_fields: FieldsLike | None = None,
        *,
        name: str | None = None,
        at_least_once: bool = False,
    ) -> TridentState:
        """Apply each partition's tuples to a state with ``updater`` in the commit phase.

        Raises
        ------
        NotExactlyOnceError
            If the stream's spouts and the state are not exactly-once together, unless
            ``at_least_once=True`` accepts that.
        """
        inputs = self.check_fields(name or "partition_persist", as_fields(input_fields))
        if not isinstance(updater, StateUpdater):
            msg = f"partition_persist: {updater!r} is not a StateUpdater"
            raise TopologyError(msg)
        state = validate_name(name or f"state_{len(self.topology.nodes) + 1}", kind="state")
        self.topology.check_exactly_once(
            self.node_id,
            state,
            state_factory,
            at_least_once=at_least_once,
            call="partition_persist",
        )
        outputs = as_fields(output_fields or ())
        node = self.topology.add_node(
            lambda s: PersistNode(
                s,
                (self.node_id,),
                self.fields,
                state=state,
                factory=state_factory,
                mode="update",
                updater=updater,
                input_fields=inputs,
                new_values_fields=outputs,
                at_least_once=at_least_once,
            ),
            kind="persist",
            name=name,
        )
        self.topology.register_state(state, node.id)
        return TridentState(self.topology, state)

    def state_query(
        self,
        state: TridentState,
        input_fields: FieldsLike,
        function: QueryFunction[Any, Any],
        output_fields: FieldsLike,
        *,
        name: str | None = None,
    ) -> Stream:
        """Read ``state`` for each tuple (batched); the function's outputs are appended."""
        inputs = self.check_fields(name or "state_query", as_fields(input_fields))
        if not isinstance(function, QueryFunction):
            msg = f"state_query: {function!r} is not a QueryFunction"
            raise TopologyError(msg)
        outputs = as_fields(output_fields)
        fields = self.fields + outputs
        return self._add(
            "state_query",
            lambda s: StateQueryNode(
                s,
                (self.node_id,),
                fields,
                state=state.name,
                function=function,
                input_fields=inputs,
                function_fields=outputs,
            ),
            name,
        )


def _count_only(window: object, timestamp_field: Any, clock: Any, call: str) -> None:
    if timestamp_field is not None or clock is not None:
        msg = (
            f"{call}: timestamp_field and clock apply to duration windows; give the window as a "
            f"datetime.timedelta, or drop them for a count window of {window!r} tuples"
        )
        raise TopologyError(msg)


def _add_window(
    stream: Stream,
    config: WindowConfig,
    store_factory: Any,
    input_fields: FieldsLike,
    aggregator: Any,
    output_fields: FieldsLike,
    name: str | None,
) -> Stream:
    topology = stream.topology
    step = name if name is not None else _free_step(topology, "window")
    validate_name(step, kind="step")
    inputs = stream.check_fields(step, as_fields(input_fields))
    if not isinstance(config, WindowConfig):
        msg = f"step {step!r}: {config!r} is not a window config (e.g. TumblingCountWindow.of(10))"
        raise TopologyError(msg)
    stamp = getattr(config, "timestamp_field", None)
    if stamp is not None:
        stream.check_fields(step, [stamp])
    _check_aggregator(step, aggregator)
    if not callable(getattr(store_factory, "for_window", None)):
        msg = (
            f"step {step!r}: {store_factory!r} is not a window store factory; hint: "
            f"sql_window_store(None) keeps windows in the run's state database"
        )
        raise TopologyError(msg)
    outputs = as_fields(output_fields)
    if not outputs:
        msg = f"step {step!r}: a window needs output fields (its aggregator's)"
        raise TopologyError(msg)
    _check_batch_stream(topology, stream.node_id, step)
    node = topology.add_node(
        lambda s: WindowNode(
            s,
            (stream.node_id,),
            outputs,
            state=s,
            factory=store_factory.for_window(topology.name, s),
            mode="update",
            updater=WindowStoreCommit(),
            input_fields=outputs,
            config=config,
            aggregator=aggregator,
            window_inputs=inputs,
            window_store=store_factory,
        ),
        kind="window",
        name=step,
    )
    topology.register_state(node.id, node.id)
    return Stream(topology, node.id)


def _free_step(topology: GraphBuilder, label: str) -> str:
    step, n = label, 2
    while step in topology.nodes or step in topology.states:
        step, n = f"{label}_{n}", n + 1
    return step


def _check_batch_stream(topology: GraphBuilder, node_id: str, step: str) -> None:
    """Refuse a window fed by a DRPC request or a state's new values (no batches to span)."""
    todo, seen = [node_id], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        node = topology.nodes[current]
        if isinstance(node, DrpcNode | NewValuesNode):
            what = "a DRPC stream" if isinstance(node, DrpcNode) else "a state's new values"
            msg = (
                f"step {step!r}: a window spans the spouts' batches and cannot follow {what} "
                f"(step {current!r})"
            )
            raise TopologyError(msg)
        todo.extend(node.parents)


def _renamed_window(topology: GraphBuilder, node: WindowNode) -> WindowNode:
    """``node`` (just renamed) with its state and store named after its new step id."""
    if node.state in topology.states and topology.states[node.state] == node.id:
        del topology.states[node.state]
    renamed = replace(
        node, state=node.id, factory=node.window_store.for_window(topology.name, node.id)
    )
    topology.replace_node(renamed)
    topology.register_state(renamed.id, renamed.id)
    return renamed


def _check_aggregator(step: str, aggregator: Any) -> None:
    if not isinstance(aggregator, CombinerAggregator | ReducerAggregator | Aggregator):
        msg = (
            f"step {step!r}: {aggregator!r} is not a CombinerAggregator, ReducerAggregator "
            f"or Aggregator"
        )
        raise TopologyError(msg)


def _persist_aggregate(
    stream: Stream,
    group: Fields,
    factory: Any,
    input_fields: Any,
    aggregator: Any,
    output_fields: Any,
    name: str | None,
    at_least_once: bool,
) -> TridentState:
    if output_fields is None:  # (factory, agg, out): every field is an input
        input_fields, aggregator, output_fields = stream.fields, input_fields, aggregator
    step = name or "persistent_aggregate"
    inputs = stream.check_fields(step, as_fields(input_fields))
    if not isinstance(aggregator, CombinerAggregator | ReducerAggregator):
        msg = (
            f"step {step!r}: persistent_aggregate needs a CombinerAggregator or "
            f"ReducerAggregator, got {aggregator!r}"
        )
        raise TopologyError(msg)
    outputs = as_fields(output_fields)
    if len(outputs) != 1:
        msg = f"step {step!r}: persistent_aggregate has one output field, got {list(outputs)}"
        raise TopologyError(msg)
    topology = stream.topology
    state = validate_name(name or f"state_{len(topology.nodes) + 1}", kind="state")
    topology.check_exactly_once(
        stream.node_id, state, factory, at_least_once=at_least_once, call="persistent_aggregate"
    )
    part = AggPart(aggregator, inputs, outputs)
    node = topology.add_node(
        lambda s: PersistNode(
            s,
            (stream.node_id,),
            stream.fields,
            state=state,
            factory=factory,
            mode="aggregate",
            parts=(part,),
            group_fields=group,
            input_fields=inputs,
            new_values_fields=group + outputs,
            at_least_once=at_least_once,
        ),
        kind="persist",
        name=name,
    )
    topology.register_state(state, node.id)
    return TridentState(topology, state)


@dataclass(frozen=True)
class GroupedStream:
    """A stream grouped by :attr:`group_fields` for the next aggregation."""

    stream: Stream
    group_fields: Fields

    def aggregate(
        self,
        input_fields: FieldsLike,
        aggregator: Any,
        output_fields: FieldsLike,
        *,
        name: str | None = None,
    ) -> Stream:
        """Aggregate each group over the whole batch; output: group fields + outputs."""
        part = AggPart(aggregator, as_fields(input_fields), as_fields(output_fields))
        return self.stream._aggregate([part], "batch", self.group_fields, name)

    def partition_aggregate(
        self,
        input_fields: FieldsLike,
        aggregator: Any,
        output_fields: FieldsLike,
        *,
        name: str | None = None,
    ) -> Stream:
        """Aggregate each group within each partition."""
        part = AggPart(aggregator, as_fields(input_fields), as_fields(output_fields))
        return self.stream._aggregate([part], "partition", self.group_fields, name)

    def chained_agg(self) -> ChainedAggregatorDeclarer:
        """Several aggregations per group; finish with ``chain_end()``."""
        return ChainedAggregatorDeclarer(self.stream, self.group_fields)

    def persistent_aggregate(
        self,
        state_factory: Any,
        input_fields: FieldsLike | Any,
        aggregator: Any = None,
        output_fields: FieldsLike | None = None,
        *,
        name: str | None = None,
        at_least_once: bool = False,
    ) -> TridentState:
        """Aggregate every batch into a map state keyed by the group fields.

        Raises
        ------
        NotExactlyOnceError
            If the stream's spouts and the state are not exactly-once together (see
            ``docs/concepts.md``), unless ``at_least_once=True`` accepts that.
        """
        return _persist_aggregate(
            self.stream,
            self.group_fields,
            state_factory,
            input_fields,
            aggregator,
            output_fields,
            name,
            at_least_once,
        )

    def state_query(
        self,
        state: TridentState,
        input_fields: FieldsLike,
        function: QueryFunction[Any, Any],
        output_fields: FieldsLike,
        *,
        name: str | None = None,
    ) -> Stream:
        """Partition by the group fields, then query ``state`` for each tuple."""
        return self.stream.partition_by(self.group_fields).state_query(
            state, input_fields, function, output_fields, name=name
        )


@dataclass(frozen=True)
class ChainedAggregatorDeclarer:
    """Collects aggregators applied to the same tuples (``chained_agg() ... chain_end()``)."""

    stream: Stream
    group_fields: Fields
    parts: tuple[AggPart, ...] = ()
    scope: str = ""

    def _with(self, scope: str, part: AggPart) -> ChainedAggregatorDeclarer:
        if self.scope and self.scope != scope:
            msg = "chained_agg: use either aggregate or partition_aggregate, not both"
            raise TopologyError(msg)
        return replace(self, parts=(*self.parts, part), scope=scope)

    def aggregate(
        self, input_fields: FieldsLike, aggregator: Any, output_fields: FieldsLike
    ) -> ChainedAggregatorDeclarer:
        """Add a whole-batch aggregation to the chain."""
        part = AggPart(aggregator, as_fields(input_fields), as_fields(output_fields))
        return self._with("batch", part)

    def partition_aggregate(
        self, input_fields: FieldsLike, aggregator: Any, output_fields: FieldsLike
    ) -> ChainedAggregatorDeclarer:
        """Add a per-partition aggregation to the chain."""
        part = AggPart(aggregator, as_fields(input_fields), as_fields(output_fields))
        return self._with("partition", part)

    def chain_end(self, *, name: str | None = None) -> Stream:
        """Finish the chain: one tuple per batch (per group) with every aggregator's outputs."""
        if not self.parts:
            msg = "chained_agg: add at least one aggregation before chain_end()"
            raise TopologyError(msg)
        return self.stream._aggregate(self.parts, self.scope, self.group_fields, name)


@dataclass(frozen=True)
class TridentState:
    """A state of the topology, created by a persist step."""

    topology: GraphBuilder
    name: str

    @property
    def node(self) -> PersistNode:
        """The persist step that writes the state."""
        node = self.topology.nodes[self.topology.states[self.name]]
        assert isinstance(node, PersistNode)
        return node

    def new_values_stream(self, *, name: str | None = None) -> Stream:
        """The values each batch wrote to the state (runs in the commit phase)."""
        persist = self.node
        fields = persist.new_values_fields
        if not fields:
            msg = f"state {self.name!r}: its updater declared no output fields"
            raise TopologyError(msg)
        node = self.topology.add_node(
            lambda s: NewValuesNode(s, (persist.id,), fields, state=self.name),
            kind="new_values",
            name=name,
        )
        return Stream(self.topology, node.id)


class _KeyedFirst(Aggregator[list[Any]]):
    """The tuple with the smallest (or largest) key of the batch."""

    def __init__(self, key: Callable[[tuple[Any, ...]], Any], largest: bool) -> None:
        self.key = key
        self.largest = largest

    def init(self, batch_id: int, collector: Any) -> list[Any]:
        return []

    def aggregate(self, state: list[Any], tuple_: Any, collector: Any) -> list[Any]:
        values = tuple_.values
        if not state:
            state.append(values)
        else:
            better = self.key(values) > self.key(state[0])
            if better == self.largest and self.key(values) != self.key(state[0]):
                state[0] = values
        return state

    def complete(self, state: list[Any], collector: Any) -> None:
        if state:
            collector.emit(state[0])
