"""Running aggregators over tuples: whole, partial (combiners) and final, grouped or not.

>>> from airflow_trident.operation import Count, Sum
>>> from airflow_trident.graph import AggPart
>>> rows = [("a", 2), ("b", 3), ("a", 5)]
>>> parts = (AggPart(Count(), (), ("n",)), AggPart(Sum(), ("v",), ("total",)))
>>> aggregate_rows(rows, ("k", "v"), parts, group_index=(0,), batch_id=1)
[('a', 2, 7), ('b', 1, 3)]
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from airflow_trident.graph import AggPart
from airflow_trident.operation.base import Aggregator, CombinerAggregator, ReducerAggregator
from airflow_trident.tuple import Fields, TridentCollector, TridentTuple, tuple_type

__all__ = [
    "aggregate_rows",
    "combine_partials",
    "group_key",
    "group_rows",
    "group_value",
    "partial_rows",
    "run_aggregator",
]


_NAN = float("nan")


def group_value(value: Any) -> Any:
    """``value`` as a group key holds it: every NaN is one NaN (NaN is not equal to itself, so
    each would be a group of its own) and ``-0.0`` is ``0.0`` (equal, so whichever came first
    keyed the group), as Spark SQL groups them.

    >>> group_value(float("nan")) is group_value(float("nan")), group_value(-0.0), group_value("a")
    (True, 0.0, 'a')
    """
    if isinstance(value, float) and (value != value or value == 0.0):
        return _NAN if value != value else 0.0
    return value


def group_key(row: Sequence[Any], group_index: Sequence[int]) -> tuple[Any, ...]:
    """The group key of ``row`` (see :func:`group_value`)."""
    return tuple(group_value(row[i]) for i in group_index)


def group_rows(
    rows: Iterable[tuple[Any, ...]], group_index: Sequence[int]
) -> dict[tuple[Any, ...], list[tuple[Any, ...]]]:
    """Rows by group key (:func:`group_key`), groups in order of first appearance."""
    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for row in rows:
        groups.setdefault(group_key(row, group_index), []).append(row)
    return groups


def _views(rows: Sequence[tuple[Any, ...]], fields: Fields, inputs: Fields) -> list[TridentTuple]:
    index = [fields.index(f) for f in inputs]
    view = tuple_type(inputs)
    return [view([r[i] for i in index]) for r in rows]


def run_aggregator(
    aggregator: Any,
    views: Sequence[TridentTuple],
    batch_id: int,
    declared: Fields | None = None,
) -> list[tuple[Any, ...]]:
    """The tuples ``aggregator`` emits for ``views`` (combiners and reducers emit one).

    ``declared``: the aggregator's output fields; an :class:`Aggregator` that emits another
    number of values raises ``ValueError`` (the runtime fails the batch naming the step and
    txid), as a ``Function`` does.

    >>> from airflow_trident.operation.base import Aggregator
    >>> class Pair(Aggregator):
    ...     def init(self, batch_id, collector): return None
    ...     def aggregate(self, state, tuple_, collector): return None
    ...     def complete(self, state, collector): collector.emit(("a", "b"))
    >>> run_aggregator(Pair(), [], 1, ("x",))
    Traceback (most recent call last):
    ...
    ValueError: aggregator Pair emitted 2 values ('a', 'b'), declared ['x']
    """
    if isinstance(aggregator, CombinerAggregator):
        value = aggregator.zero()
        for view in views:
            value = aggregator.combine(value, aggregator.init(view))
        return [(value,)]
    if isinstance(aggregator, ReducerAggregator):
        acc = aggregator.init()
        for view in views:
            acc = aggregator.reduce(acc, view)
        return [(acc,)]
    assert isinstance(aggregator, Aggregator)
    collector = TridentCollector()
    state = aggregator.init(batch_id, collector)
    for view in views:
        returned = aggregator.aggregate(state, view, collector)
        state = state if returned is None else returned
    aggregator.complete(state, collector)
    if declared is not None:
        width = len(declared)
        for emitted in collector.rows:
            if len(emitted) != width:
                name = type(aggregator).__name__
                msg = (
                    f"aggregator {name} emitted {len(emitted)} values {emitted!r}, declared "
                    f"{list(declared)}"
                )
                raise ValueError(msg)
    return collector.rows


def _chain(results: Sequence[list[tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
    """Chained aggregators: every combination of their outputs, concatenated."""
    return [tuple(v for part in combo for v in part) for combo in itertools.product(*results)]


def aggregate_rows(
    rows: Sequence[tuple[Any, ...]],
    fields: Fields,
    parts: Sequence[AggPart],
    *,
    group_index: Sequence[int] = (),
    batch_id: int,
) -> list[tuple[Any, ...]]:
    """Aggregate ``rows`` with every part; grouped rows start with their group values."""
    if not group_index:
        return _chain(
            [
                run_aggregator(
                    p.aggregator, _views(rows, fields, p.input_fields), batch_id, p.output_fields
                )
                for p in parts
            ]
        )
    out: list[tuple[Any, ...]] = []
    for key, members in group_rows(rows, group_index).items():
        results = [
            run_aggregator(
                p.aggregator, _views(members, fields, p.input_fields), batch_id, p.output_fields
            )
            for p in parts
        ]
        out.extend(key + row for row in _chain(results))
    return out


def partial_rows(
    rows: Sequence[tuple[Any, ...]],
    fields: Fields,
    parts: Sequence[AggPart],
    group_index: Sequence[int],
) -> list[tuple[Any, ...]]:
    """Combiners' per-partition half: group values + one partial per part.

    Ungrouped, a partition always emits one row (``zero()`` when empty), as Trident does.
    """
    groups = group_rows(rows, group_index) if group_index else {(): list(rows)}
    out = []
    for key, members in groups.items():
        partials = []
        for part in parts:
            agg: CombinerAggregator[Any] = part.aggregator
            value = agg.zero()
            for view in _views(members, fields, part.input_fields):
                value = agg.combine(value, agg.init(view))
            partials.append(value)
        out.append(key + tuple(partials))
    return out


def combine_partials(
    rows: Sequence[tuple[Any, ...]], parts: Sequence[AggPart], n_group: int, *, emit_empty: bool
) -> list[tuple[Any, ...]]:
    """Combiners' final half: combine the partials of each group.

    ``emit_empty`` makes an ungrouped aggregation of no partials emit ``zero()`` (once).
    """
    merged: dict[tuple[Any, ...], list[Any]] = {}
    for row in rows:
        key, values = group_key(row, range(n_group)), row[n_group:]
        if key not in merged:
            merged[key] = list(values)
            continue
        acc = merged[key]
        for i, part in enumerate(parts):
            acc[i] = part.aggregator.combine(acc[i], values[i])
    if not merged and emit_empty and n_group == 0:
        merged[()] = [p.aggregator.zero() for p in parts]
    return [key + tuple(values) for key, values in merged.items()]
