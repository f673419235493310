"""Wrap any kind of user spout into a ``TridentSpout`` (coordinator + emitter).

>>> from airflow_trident.spout.memory import FixedBatchSpout
>>> from airflow_trident.spout.tx_state import MemoryPartitionState
>>> as_trident_spout(FixedBatchSpout(["w"], 1, ("a",)), MemoryPartitionState()).kind
<StateType.NON_TRANSACTIONAL: 'non_transactional'>
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from airflow_trident.errors import ConfigurationError
from airflow_trident.graph import spout_shape
from airflow_trident.spout.base import TridentSpout
from airflow_trident.spout.batch import BatchSpoutExecutor
from airflow_trident.spout.opaque import OpaquePartitionedSpoutExecutor
from airflow_trident.spout.partitioned import PartitionedTransactionalSpoutExecutor
from airflow_trident.spout.tx_state import PartitionState

__all__ = ["EmitsInTxidOrder", "OpaqueBatches", "PartitionedBatches", "as_trident_spout"]


@runtime_checkable
class PartitionedBatches(Protocol):
    """A spout whose batch is per-partition metadata (the partitioned kinds): each commit
    archives it in the ledger, and a rebuild restores it before re-emitting the batch."""

    def batch_partitions(self, txid: int, meta: Any) -> dict[str, Any]:
        """Each partition's metadata of batch ``txid``."""
        ...

    def restore_batch(self, txid: int, partitions: Mapping[str, Any]) -> None:
        """Put archived per-partition metadata back, so that ``txid`` emits as it did."""
        ...


@runtime_checkable
class EmitsInTxidOrder(Protocol):
    """A spout whose new batch starts where txid-1's ended (transactional partitioned): txid N
    is emitted only after N-1 was."""

    def emitted(self, txid: int) -> bool:
        """Whether batch ``txid`` was emitted (its partitions' ranges are fixed)."""
        ...


@runtime_checkable
class OpaqueBatches(Protocol):
    """An opaque partitioned spout: its commit checks the batch still starts where the last
    committed one ended and writes each partition's committed metadata with the txid."""

    state: PartitionState

    def check_not_stale(self, txid: int, meta: Any) -> None:
        """Raise ``StaleBatchError`` if batch ``txid`` was built on a re-emitted batch."""
        ...

    def committed_metas(self, txid: int, meta: Any) -> dict[str, Any]:
        """Each partition's committed metadata once ``txid`` commits."""
        ...


def as_trident_spout(spout: Any, state: PartitionState) -> TridentSpout:
    """The ``TridentSpout`` for ``spout``; partitioned spouts keep their metadata in ``state``.

    Raises
    ------
    ConfigurationError
        If ``spout`` is none of the spout kinds.
    """
    shape = spout_shape(spout)  # the same test that gives a spout its kind at build time
    if shape == "trident":
        wrapped: TridentSpout = spout
        return wrapped
    if shape == "partitioned":
        return PartitionedTransactionalSpoutExecutor(spout, state)
    if shape == "opaque":
        return OpaquePartitionedSpoutExecutor(spout, state)
    if shape == "batch":
        return BatchSpoutExecutor(spout)
    msg = (
        f"{spout!r} is not a spout: implement a TridentSpout, a partitioned or opaque "
        f"partitioned spout, or a batch spout (emit_batch)"
    )
    raise ConfigurationError(msg)
