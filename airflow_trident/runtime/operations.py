"""The user operations of a plan step, and their ``prepare`` / ``cleanup`` around one partition
task (both runtimes use it: the in-process one per partition, Spark's Python steps per task).

Examples
--------
>>> from airflow_trident.graph import EachNode
>>> from airflow_trident.operation import Split
>>> split = Split()
>>> operations_of(EachNode("split", (), ("s", "w"), function=split)) == [split]
True
>>> with prepared(EachNode("split", (), ("s", "w"), function=split), "t", 3, 0, 1):
...     pass
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from airflow_trident.errors import BatchFailedError
from airflow_trident.graph import (
    AggregateNode,
    EachNode,
    FilterNode,
    MapNode,
    PeekNode,
    StateQueryNode,
    WindowNode,
)
from airflow_trident.operation.base import Operation, OperationContext
from airflow_trident.planner.plan import FinalAgg, Op, PartialAgg, PersistSink

__all__ = ["operations_of", "prepared", "type_sample"]

log = logging.getLogger(__name__)

_IN_TYPE_SAMPLE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "trident_type_sample", default=False
)


@contextlib.contextmanager
def type_sample() -> Iterator[None]:
    """Within the block, operations are prepared with ``OperationContext.type_sample`` set:
    Spark's driver runs them on a sample only to learn their output types.

    >>> from airflow_trident.operation import Split
    >>> class Seen(Split):
    ...     def prepare(self, context):
    ...         print("sample" if context.type_sample else "batch")
    >>> step = EachNode("split", (), ("s", "w"), function=Seen())
    >>> with type_sample(), prepared(step, "t", 3, 0, 1):
    ...     pass
    sample
    >>> with prepared(step, "t", 3, 0, 1):
    ...     pass
    batch
    """
    token = _IN_TYPE_SAMPLE.set(True)
    try:
        yield
    finally:
        _IN_TYPE_SAMPLE.reset(token)


def operations_of(op: Op) -> list[Operation]:
    """The user operations that ``op`` runs in the processing phase (each once)."""
    found: list[Any] = []
    if isinstance(op, EachNode | MapNode | StateQueryNode):
        found = [op.function]
    elif isinstance(op, FilterNode):
        found = [op.filter]
    elif isinstance(op, PeekNode):
        found = [op.consumer]
    elif isinstance(op, AggregateNode):
        found = [p.aggregator for p in op.parts]
    elif isinstance(op, WindowNode):
        found = [op.aggregator]
    elif isinstance(op, PartialAgg | FinalAgg | PersistSink):
        # a persist sink runs its aggregator only to combine partials; else it projects rows
        runs = not isinstance(op, PersistSink) or op.kind == "combine"
        found = [p.aggregator for p in op.node.parts] if runs else []
    return list({id(o): o for o in found if isinstance(o, Operation)}.values())


def _failure(step: str, txid: int, call: str, exc: BaseException) -> BatchFailedError:
    msg = (
        f"step {step!r} failed in batch txid {txid}: {call}() raised {type(exc).__name__}: "
        f"{exc}; the batch is not committed and will be replayed"
    )
    return BatchFailedError(msg)


def _cleanup(operations: Sequence[Operation], step: str, txid: int, *, failing: bool) -> None:
    """Clean every operation up; raise the first error, unless the batch already fails."""
    first: BaseException | None = None
    for operation in reversed(operations):
        try:
            operation.cleanup()
        except Exception as exc:
            if failing:  # keep the batch's own error; this one is only logged
                log.warning("step %r, txid %d: cleanup() raised %r", step, txid, exc)
            elif first is None:
                first = exc
    if first is not None:
        raise _failure(step, txid, "cleanup", first) from first


@contextlib.contextmanager
def prepared(
    op: Op, topology: str, txid: int, partition_index: int, num_partitions: int | None
) -> Iterator[None]:
    """Run the body between ``prepare`` and ``cleanup`` of ``op``'s operations.

    Cleanup runs even when the body raises (that error is kept).

    Raises
    ------
    BatchFailedError
        If a ``prepare`` or ``cleanup`` raises, naming the step and txid.
    """
    operations = operations_of(op)
    if not operations:
        yield
        return
    context = OperationContext(
        topology, op.id, txid, partition_index, num_partitions, _IN_TYPE_SAMPLE.get()
    )
    ready: list[Operation] = []
    try:
        for operation in operations:
            try:
                operation.prepare(context)
            except Exception as exc:
                raise _failure(op.id, txid, "prepare", exc) from exc
            ready.append(operation)
        yield
    except BaseException:
        _cleanup(ready, op.id, txid, failing=True)
        raise
    _cleanup(ready, op.id, txid, failing=False)
