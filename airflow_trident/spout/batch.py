"""Non-transactional batch spouts (Trident's ``IBatchSpout``): no metadata, no replay promise.

Use them with non-transactional state (at-least-once), or with a spout that happens to re-emit a
batch id identically, like :class:`~airflow_trident.spout.memory.FixedBatchSpout`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.spout.base import BatchCoordinator, Collector, Emitter
from airflow_trident.state.base import StateType

__all__ = ["BatchSpout", "BatchSpoutExecutor"]


@runtime_checkable
class BatchSpout(Protocol):
    """Emits a batch for a batch id; told when it committed."""

    @property
    def output_fields(self) -> tuple[str, ...]:
        """Names of the values of each emitted tuple."""

    def emit_batch(self, batch_id: int, collector: Collector) -> None:
        """Emit the batch called ``batch_id``."""

    def ack(self, batch_id: int) -> None:
        """Batch ``batch_id`` committed."""

    def close(self) -> None:
        """Release resources."""


class _Coordinator:
    def initialize_transaction(self, txid: int, prev_meta: Any, curr_meta: Any) -> Any:
        return None

    def is_ready(self, txid: int) -> bool:
        return True

    def success(self, txid: int) -> None:
        return None

    def close(self) -> None:
        return None


class _Emitter:
    def __init__(self, spout: BatchSpout) -> None:
        self._spout = spout

    def emit_batch(self, attempt: TransactionAttempt, meta: Any, collector: Collector) -> None:
        self._spout.emit_batch(attempt.txid, collector)

    def success(self, attempt: TransactionAttempt) -> None:
        self._spout.ack(attempt.txid)

    def close(self) -> None:
        self._spout.close()


class BatchSpoutExecutor:
    """Turns a :class:`BatchSpout` into a non-transactional ``TridentSpout``."""

    kind = StateType.NON_TRANSACTIONAL

    def __init__(self, spout: BatchSpout) -> None:
        self.spout = spout

    @property
    def output_fields(self) -> tuple[str, ...]:
        return tuple(self.spout.output_fields)

    def get_coordinator(self) -> BatchCoordinator:
        return _Coordinator()

    def get_emitter(self) -> Emitter:
        return _Emitter(self.spout)
