"""Wrap any kind of user spout into a ``TridentSpout`` (coordinator + emitter).

>>> from airflow_trident.spout.memory import FixedBatchSpout
>>> from airflow_trident.spout.tx_state import MemoryPartitionState
>>> as_trident_spout(FixedBatchSpout(["w"], 1, ("a",)), MemoryPartitionState()).kind
<StateType.NON_TRANSACTIONAL: 'non_transactional'>
"""

from __future__ import annotations

from typing import Any

from airflow_trident.errors import ConfigurationError
from airflow_trident.graph import spout_shape
from airflow_trident.spout.base import TridentSpout
from airflow_trident.spout.batch import BatchSpoutExecutor
from airflow_trident.spout.opaque import OpaquePartitionedSpoutExecutor
from airflow_trident.spout.partitioned import PartitionedTransactionalSpoutExecutor
from airflow_trident.spout.tx_state import PartitionState

__all__ = ["as_trident_spout"]


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
