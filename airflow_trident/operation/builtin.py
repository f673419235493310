"""Built-in operations. ``Count``, ``Sum``, ``Min``, ``Max`` and ``Split`` compile to Spark SQL
and, in state, to one SQL statement; the others run as Python.

Examples
--------
>>> from airflow_trident.tuple import TridentCollector, TridentTuple
>>> c = TridentCollector(); Split().execute(TridentTuple(("the cow  jumped",), ("s",)), c)
>>> c.rows
[('the',), ('cow',), ('jumped',)]
>>> Count().combine(Count().init(TridentTuple((), ())), 4)
5
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from airflow_trident.operation.base import (
    Aggregator,
    CombinerAggregator,
    Filter,
    Function,
    QueryFunction,
)
from airflow_trident.operation.combine import CombineOp
from airflow_trident.tuple import TridentCollector, TridentTuple

__all__ = [
    "Count",
    "Debug",
    "Equals",
    "FilterNull",
    "FirstN",
    "MapGet",
    "Max",
    "Min",
    "Split",
    "Sum",
    "TupleCollectionGet",
]

log = logging.getLogger(__name__)


class Count(CombinerAggregator[int]):
    """Counts tuples."""

    combine_op: ClassVar[CombineOp | None] = CombineOp.SUM

    def init(self, tuple_: TridentTuple) -> int:
        return 1

    def combine(self, val1: int, val2: int) -> int:
        return val1 + val2

    def zero(self) -> int:
        return 0


class Sum(CombinerAggregator[Any]):
    """Sums the first input field (``None`` values are skipped)."""

    combine_op: ClassVar[CombineOp | None] = CombineOp.SUM

    def init(self, tuple_: TridentTuple) -> Any:
        return 0 if tuple_[0] is None else tuple_[0]

    def combine(self, val1: Any, val2: Any) -> Any:
        return val1 + val2

    def zero(self) -> Any:
        return 0


class Min(CombinerAggregator[Any]):
    """The smallest value of the first input field; ``None`` when there is none."""

    combine_op: ClassVar[CombineOp | None] = CombineOp.MIN

    def init(self, tuple_: TridentTuple) -> Any:
        return tuple_[0]

    def combine(self, val1: Any, val2: Any) -> Any:
        return CombineOp.MIN.combine(val1, val2)

    def zero(self) -> Any:
        return None


class Max(CombinerAggregator[Any]):
    """The largest value of the first input field; ``None`` when there is none."""

    combine_op: ClassVar[CombineOp | None] = CombineOp.MAX

    def init(self, tuple_: TridentTuple) -> Any:
        return tuple_[0]

    def combine(self, val1: Any, val2: Any) -> Any:
        return CombineOp.MAX.combine(val1, val2)

    def zero(self) -> Any:
        return None


class Split(Function):
    """Splits the first input field on whitespace; emits one tuple per word (none for
    ``None``, as Spark's ``split`` of a null)."""

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        if tuple_[0] is None:
            return
        for word in str(tuple_[0]).split():
            collector.emit((word,))


class FilterNull(Filter):
    """Drops tuples in which any input field is ``None``."""

    def is_keep(self, tuple_: TridentTuple) -> bool:
        return all(v is not None for v in tuple_.values)


class Equals(Filter):
    """Keeps tuples whose input fields are all equal to each other."""

    def is_keep(self, tuple_: TridentTuple) -> bool:
        return len(set(map(repr, tuple_.values))) <= 1


class Debug(Filter):
    """Logs every tuple (with an optional prefix) and keeps it."""

    def __init__(self, prefix: str = "DEBUG") -> None:
        self.prefix = prefix

    def is_keep(self, tuple_: TridentTuple) -> bool:
        log.info("%s: %r", self.prefix, tuple_)
        return True


class FirstN(Aggregator[list[tuple[Any, ...]]]):
    """Emits the first ``n`` tuples of the batch, or the ``n`` largest by ``sort_field``.

    The input fields are emitted as they are (declare the same names as output fields).
    """

    def __init__(self, n: int, sort_field: str | None = None, *, reverse: bool = True) -> None:
        self.n = n
        self.sort_field = sort_field
        self.reverse = reverse

    def init(self, batch_id: int, collector: TridentCollector) -> list[tuple[Any, ...]]:
        self._fields: tuple[str, ...] = ()
        return []

    def aggregate(
        self, state: list[tuple[Any, ...]], tuple_: TridentTuple, collector: TridentCollector
    ) -> list[tuple[Any, ...]]:
        self._fields = tuple_.fields
        if self.sort_field is None and len(state) >= self.n:
            return state
        state.append(tuple_.values)
        return state

    def complete(self, state: list[tuple[Any, ...]], collector: TridentCollector) -> None:
        rows = state
        if self.sort_field is not None and self._fields:
            index = self._fields.index(self.sort_field)
            rows = sorted(state, key=lambda r: r[index], reverse=self.reverse)
        for row in rows[: self.n]:
            collector.emit(row)


class MapGet(QueryFunction[Any, Any]):
    """Reads the value of each tuple's key (its input fields) from a map state."""

    def batch_retrieve(self, state: Any, args: Sequence[TridentTuple]) -> list[Any]:
        return list(state.multi_get([t.values for t in args]))

    def execute(self, tuple_: TridentTuple, result: Any, collector: TridentCollector) -> None:
        collector.emit((result,))


class TupleCollectionGet(QueryFunction[Any, Any]):
    """Emits every tuple of a state that holds a collection of tuples (``state.tuples()``)."""

    def batch_retrieve(self, state: Any, args: Sequence[TridentTuple]) -> list[Any]:
        tuples: Callable[[], Any] = state.tuples
        everything = list(tuples())
        return [everything for _ in args]

    def execute(self, tuple_: TridentTuple, result: Any, collector: TridentCollector) -> None:
        for row in result:
            collector.emit(tuple(row))
