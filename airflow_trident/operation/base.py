"""The operation contracts users implement (Trident's ``operation`` package).

Each is a small abstract class of one to three methods. A batch fails (and is replayed) when an
operation raises; raise :class:`~airflow_trident.errors.FailedException` to say so on purpose.

Examples
--------
>>> class Upper(Function):
...     def execute(self, tuple_, collector):
...         collector.emit((tuple_[0].upper(),))
>>> from airflow_trident.tuple import TridentCollector, TridentTuple
>>> c = TridentCollector(); Upper().execute(TridentTuple(("cow",), ("w",)), c); c.rows
[('COW',)]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from airflow_trident.state.combine import CombineOp
from airflow_trident.tuple import TridentCollector, TridentTuple

__all__ = [
    "Aggregator",
    "CombinerAggregator",
    "Consumer",
    "Filter",
    "FlatMapFunction",
    "Function",
    "MapFunction",
    "Operation",
    "QueryFunction",
    "ReducerAggregator",
    "StateUpdater",
]

T = TypeVar("T")
S = TypeVar("S")


class Operation:
    """Base of every operation; ``prepare``/``cleanup`` bracket a batch's use of it."""

    def prepare(self, partition_index: int, num_partitions: int) -> None:
        """Called before the operation first runs in a partition."""

    def cleanup(self) -> None:
        """Called when the operation is done."""


class Function(Operation, ABC):
    """Emits zero or more tuples per input tuple; ``each`` appends them to the input."""

    @abstractmethod
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        """Emit the values of the output fields for ``tuple_`` (any number of times)."""


class Filter(Operation, ABC):
    """Keeps the tuples for which :meth:`is_keep` is true."""

    @abstractmethod
    def is_keep(self, tuple_: TridentTuple) -> bool:
        """Whether ``tuple_`` stays in the stream."""


class MapFunction(Operation, ABC):
    """Replaces each tuple by exactly one tuple."""

    @abstractmethod
    def execute(self, tuple_: TridentTuple) -> Sequence[Any]:
        """The new tuple's values."""


class FlatMapFunction(Operation, ABC):
    """Replaces each tuple by zero or more tuples."""

    @abstractmethod
    def execute(self, tuple_: TridentTuple) -> Iterable[Sequence[Any]]:
        """The new tuples' values."""


class Consumer(Operation, ABC):
    """Sees each tuple (``peek``) without changing the stream."""

    @abstractmethod
    def accept(self, tuple_: TridentTuple) -> None:
        """Look at ``tuple_``."""


class CombinerAggregator(Operation, ABC, Generic[T]):
    """``init`` maps a tuple to a value, ``combine`` merges two, ``zero`` is the empty value.

    Combiners aggregate partially before a repartition, so ``combine`` must be associative
    and commutative. ``combine_op`` names a built-in the stores and Spark can run themselves.
    """

    combine_op: ClassVar[CombineOp | None] = None

    @abstractmethod
    def init(self, tuple_: TridentTuple) -> T:
        """The value of one tuple."""

    @abstractmethod
    def combine(self, val1: T, val2: T) -> T:
        """Merge two values."""

    @abstractmethod
    def zero(self) -> T:
        """The value of no tuples."""


class ReducerAggregator(Operation, ABC, Generic[T]):
    """Folds tuples one by one into a value, from ``init()``."""

    @abstractmethod
    def init(self) -> T:
        """The starting value."""

    @abstractmethod
    def reduce(self, curr: T, tuple_: TridentTuple) -> T:
        """Fold ``tuple_`` into ``curr``."""


class Aggregator(Operation, ABC, Generic[S]):
    """The general aggregator: keeps a state per batch (per group) and emits any tuples."""

    @abstractmethod
    def init(self, batch_id: int, collector: TridentCollector) -> S:
        """The state at the start of the batch (or group)."""

    @abstractmethod
    def aggregate(self, state: S, tuple_: TridentTuple, collector: TridentCollector) -> S:
        """Fold ``tuple_`` into ``state``; return the state (it may be the same object)."""

    @abstractmethod
    def complete(self, state: S, collector: TridentCollector) -> None:
        """Emit the result for the batch (or group)."""


class QueryFunction(Operation, ABC, Generic[S, T]):
    """Reads a state for a batch of tuples, then emits per tuple (``state_query``)."""

    @abstractmethod
    def batch_retrieve(self, state: S, args: Sequence[TridentTuple]) -> list[T]:
        """One result per tuple in ``args``, read from ``state`` in one batched call."""

    @abstractmethod
    def execute(self, tuple_: TridentTuple, result: T, collector: TridentCollector) -> None:
        """Emit output values for ``tuple_`` given its ``result``."""


class StateUpdater(Operation, ABC, Generic[S]):
    """Applies a partition's tuples to a state in the commit phase (``partition_persist``)."""

    @abstractmethod
    def update_state(
        self, state: S, tuples: Sequence[TridentTuple], collector: TridentCollector
    ) -> None:
        """Update ``state`` with ``tuples``; emitted tuples form the new-values stream."""
