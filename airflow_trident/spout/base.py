"""Spout contracts (Trident's ``ITridentSpout``): a coordinator that plans batches and an emitter
that emits them.

The *coordinator* runs once per batch in the begin step: ``initialize_transaction`` returns the
batch metadata (JSON), which is stored in ZooKeeper. The *emitter* runs in the processing step:
given the attempt and that metadata, it emits the batch's tuples to a collector.

A partitioned or opaque partitioned spout (the object given to ``new_stream``) may have a
``batch_committed(topology, spout, txid, partitions)`` method: the success step calls it once
``txid`` committed, when it is the newest committed txid (never for a replay of an older one),
with ``partitions`` each partition's metadata once the txid committed (where its next batch
starts). It is told for information (the Kafka spouts commit their consumer group's offsets
there, :mod:`~airflow_trident.spout.kafka_offsets`); a failure is logged, never the batch's.

Examples
--------
>>> c = ListCollector()
>>> c.emit(("the cow",)); c.emit(("jumped",))
>>> c.tuples
[('the cow',), ('jumped',)]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.errors import SpoutEmitError, SpoutUnavailableError
from airflow_trident.spout.ranges import PartitionRows, SourceRange
from airflow_trident.state.base import StateType

__all__ = [
    "BatchCoordinator",
    "Collector",
    "Emitter",
    "ListCollector",
    "TridentSpout",
    "emit_error",
    "start_partition",
    "use_progress",
]


@runtime_checkable
class Collector(Protocol):
    """Receives the tuples of a batch (Trident's ``TridentCollector``)."""

    def emit(self, values: Sequence[Any]) -> None:
        """Emit one tuple, its values in the order of the spout's output fields."""


class ListCollector:
    """A :class:`Collector` keeping tuples in a list, and per source partition.

    Partitioned spouts call :meth:`start_partition` before each partition's tuples; tuples of a
    spout without partitions land in partition ``"0"``.
    """

    def __init__(self) -> None:
        self.partitions: dict[str, list[tuple[Any, ...]]] = {}
        """Tuples by source partition (each a :class:`~airflow_trident.spout.ranges.PartitionRows`:
        ranges a spout emitted with :func:`~airflow_trident.spout.ranges.emit_range` are read
        only when iterated, or natively by Spark)."""
        self.partition: str | None = None
        """The source partition being emitted (``None`` before any)."""
        self._current: PartitionRows | None = None

    @property
    def tuples(self) -> list[tuple[Any, ...]]:
        """Every tuple, partition after partition (ranges read here)."""
        return [row for part in self.partitions.values() for row in part]

    def start_partition(self, partition: str) -> None:
        """Tuples emitted from now on come from ``partition``."""
        self.partition = partition
        current = self.partitions.setdefault(partition, PartitionRows())
        assert isinstance(current, PartitionRows)
        self._current = current

    def _partition(self) -> PartitionRows:
        if self._current is None:
            self.start_partition("0")
        assert self._current is not None
        return self._current

    def emit(self, values: Sequence[Any]) -> None:
        self._partition().append(tuple(values))

    def add_range(self, source: SourceRange) -> None:
        """Emit ``source``'s records as a range (read when iterated, or by Spark)."""
        self._partition().add_range(source)


def emit_error(
    spout: str, attempt: TransactionAttempt, partition: str | None, exc: Exception
) -> SpoutEmitError:
    """The batch failure for ``exc``, raised by spout ``spout``'s emitter (raise it ``from exc``).

    A ``ConnectionError`` gives a :class:`~airflow_trident.errors.SpoutUnavailableError` (still
    a ``ConnectionError``); anything else a :class:`~airflow_trident.errors.SpoutEmitError`.

    >>> err = emit_error("words", TransactionAttempt(7, 2), "p1", ConnectionError("refused"))
    >>> isinstance(err, ConnectionError), str(err)[:78]
    (True, "spout 'words' failed to emit batch txid 7 (attempt 2), partition 'p1': Connect")
    """
    where = f"batch txid {attempt.txid} (attempt {attempt.attempt_id})"
    if partition is not None:
        where += f", partition {partition!r}"
    msg = (
        f"spout {spout!r} failed to emit {where}: {type(exc).__name__}: {exc}; the batch is not "
        f"committed and will be replayed (a new attempt of txid {attempt.txid}). Hint: check "
        f"that the spout's source is reachable and holds the batch's data"
    )
    cls = SpoutUnavailableError if isinstance(exc, ConnectionError) else SpoutEmitError
    return cls(msg)


def start_partition(collector: Collector, partition: str) -> None:
    """Tell ``collector`` which source partition the next tuples come from, if it tracks that."""
    start = getattr(collector, "start_partition", None)
    if callable(start):
        start(partition)


def use_progress(coordinator: Any, progress: Callable[[str, int], Any]) -> None:
    """Give a partitioned spout's ``coordinator`` the executor's ``progress(partition, txid)``
    (the metadata a partition's next batch for ``txid`` starts after), if it asks for it with a
    ``use_progress`` method (its ``is_ready`` can then say whether new data exists)."""
    use = getattr(coordinator, "use_progress", None)
    if callable(use):
        use(progress)


@runtime_checkable
class BatchCoordinator(Protocol):
    """Plans batches; runs in the begin step, one instance per topology."""

    def initialize_transaction(self, txid: int, prev_meta: Any, curr_meta: Any) -> Any:
        """Return the metadata of batch ``txid``.

        ``prev_meta`` is the stored metadata of the previous batch (``None`` for the first);
        ``curr_meta`` is this txid's stored metadata when the batch is re-emitted, else ``None``.
        A transactional spout returns ``curr_meta`` unchanged when it is given.
        """

    def is_ready(self, txid: int) -> bool:
        """Whether batch ``txid`` can start now (the readiness sensor polls this)."""

    def success(self, txid: int) -> None:
        """Batch ``txid`` committed."""

    def close(self) -> None:
        """Release resources."""


@runtime_checkable
class Emitter(Protocol):
    """Emits the tuples of a batch; runs in the processing step."""

    def emit_batch(self, attempt: TransactionAttempt, meta: Any, collector: Collector) -> None:
        """Emit batch ``attempt.txid`` as described by ``meta``."""

    def success(self, attempt: TransactionAttempt) -> None:
        """The batch of ``attempt`` committed."""

    def close(self) -> None:
        """Release resources."""


@runtime_checkable
class TridentSpout(Protocol):
    """A source of batches: its kind, its output fields, a coordinator and an emitter."""

    @property
    def kind(self) -> StateType:
        """The guarantee: transactional, opaque, or non-transactional."""

    @property
    def output_fields(self) -> tuple[str, ...]:
        """Names of the values of each emitted tuple."""

    def get_coordinator(self) -> BatchCoordinator:
        """A new coordinator."""

    def get_emitter(self) -> Emitter:
        """A new emitter."""
