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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from airflow_trident.operation.combine import CombineOp
from airflow_trident.tuple import TridentCollector, TridentTuple

__all__ = [
    "Aggregator",
    "ColumnFunction",
    "CombinerAggregator",
    "Consumer",
    "Filter",
    "FlatMapFunction",
    "Function",
    "MapFunction",
    "Operation",
    "OperationContext",
    "QueryFunction",
    "ReducerAggregator",
    "StateUpdater",
]

T = TypeVar("T")
S = TypeVar("S")


@dataclass(frozen=True)
class OperationContext:
    """Where an operation is about to run (Trident's ``TridentOperationContext``).

    ``partition_index`` / ``num_partitions``: the partition of the step's stage (on Spark: the
    Spark partition, and ``num_partitions`` is ``None``, as a Python worker does not know it).

    ``type_sample``: ``True`` when Spark's driver runs the operation on the first tuples of each
    partition only to learn the types of its output fields (its results and its errors are
    thrown away; the workers' run of the batch decides). An operation with effects outside
    itself (a file written, a call to a service) can skip them there.
    """

    topology: str
    step: str
    txid: int
    partition_index: int
    num_partitions: int | None
    type_sample: bool = False


class Operation:
    """Base of every operation; :meth:`prepare` and :meth:`cleanup` bracket its use by one
    partition task of a batch.

    Trident calls ``prepare(conf, context)``; there is no topology conf here, so the
    :class:`OperationContext` is the one argument. Open connections or caches in ``prepare``
    and release them in ``cleanup``.

    ``output_types`` (optional) declares the types of the fields the operation computes, for
    Spark: output field name -> ``pyarrow.DataType``, or ``object`` for any Python value
    (pickled). When every computed field a step keeps is declared, Spark's driver does not run
    the step on a sample to infer them (docs/api.md, "Output types on Spark").

    Examples
    --------
    >>> class Lookup(Function):
    ...     def prepare(self, context):
    ...         self.table = {"ann": "Oslo"}  # e.g. open a connection
    ...     def execute(self, tuple_, collector):
    ...         collector.emit((self.table.get(tuple_[0]),))
    ...     def cleanup(self):
    ...         del self.table
    >>> from airflow_trident.runtime.local import LocalBatchProcessor
    >>> from airflow_trident.spout.memory import MemoryTransactionalSpout
    >>> from airflow_trident.topology import TridentTopology
    >>> t = TridentTopology("lookups")
    >>> s = t.new_stream("users", MemoryTransactionalSpout({"p0": []}, ["user"], 1))
    >>> _ = s.each(["user"], Lookup(), ["city"])
    >>> result = LocalBatchProcessor(t).process(1, {"users": {"p0": [("ann",), ("bob",)]}})
    >>> result.outputs["stage_1"]
    [[('ann', 'Oslo'), ('bob', None)]]
    """

    output_types: ClassVar[Mapping[str, Any] | None] = None

    def prepare(self, context: OperationContext) -> None:
        """Called once per partition task of a batch, before the operation's first tuple
        (also for an empty partition). An exception fails the batch, naming the step."""

    def cleanup(self) -> None:
        """Called after the operation's last tuple in that partition task — also when the
        batch failed. An exception fails the batch (unless it already failed)."""


class Function(Operation, ABC):
    """Emits zero or more tuples per input tuple; ``each`` appends them to the input.

    On Spark, an :meth:`execute` made of assignments and one ``collector.emit`` of values read
    from the tuple (``tuple_[i]``, ``tuple_.get("field")``) runs as one comprehension over the
    batch's columns, not once per tuple (:mod:`~airflow_trident.operation.inline`).
    """

    @abstractmethod
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        """Emit the values of the output fields for ``tuple_`` (any number of times)."""


class ColumnFunction(Function):
    """A :class:`Function` that emits exactly one tuple per input tuple and computes many at
    once: :meth:`execute_columns` gets the input fields as columns (one Python list each) and
    returns the output fields' columns, each as long as the input.

    The fast way to run per-record Python: both runtimes call :meth:`execute_columns` on whole
    batches (Spark: each Arrow batch of a partition; in-process: each partition), so there is
    no per-tuple call, tuple or collector — the same per-record work as a pandas UDF, without
    pandas. A record's output must depend on that record only (batches have no fixed size).
    :meth:`execute` (one tuple) runs the same code on a batch of one. When a batch fails, the
    failing record is found by running each record alone and named in the error.

    Examples
    --------
    >>> class Lower(ColumnFunction):
    ...     def execute_columns(self, columns):
    ...         (words,) = columns
    ...         return ([w.lower() for w in words],)
    >>> Lower().execute_columns([["The", "COW"]])
    (['the', 'cow'],)
    >>> c = TridentCollector(); Lower().execute(TridentTuple(("Moon",), ("w",)), c); c.rows
    [('moon',)]
    """

    @abstractmethod
    def execute_columns(self, columns: Sequence[list[Any]]) -> Sequence[Sequence[Any]]:
        """The output fields' columns for the input fields' ``columns`` (same order as
        declared in ``each``; every column as long as the input's)."""

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        """The tuple's output: :meth:`execute_columns` on a batch of one."""
        out = self.execute_columns([[value] for value in tuple_])
        collector.emit([column[0] for column in out])


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
