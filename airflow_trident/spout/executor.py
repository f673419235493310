"""Wrap any kind of user spout into a ``TridentSpout`` (coordinator + emitter).

>>> from airflow_trident.spout.memory import FixedBatchSpout
>>> from airflow_trident.spout.tx_state import MemoryPartitionState
>>> as_trident_spout(FixedBatchSpout(["w"], 1, ("a",)), MemoryPartitionState()).kind
<StateType.NON_TRANSACTIONAL: 'non_transactional'>
"""

from __future__ import annotations

from typing import Any

from airflow_trident.errors import ConfigurationError
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
    if all(hasattr(spout, a) for a in ("get_coordinator", "get_emitter", "kind")):
        wrapped: TridentSpout = spout
        return wrapped
    if hasattr(spout, "get_partitioned_coordinator"):
        return PartitionedTransactionalSpoutExecutor(spout, state)
    if hasattr(spout, "get_opaque_coordinator"):
        return OpaquePartitionedSpoutExecutor(spout, state)
    if hasattr(spout, "emit_batch") and hasattr(spout, "output_fields"):
        return BatchSpoutExecutor(spout)
    msg = (
        f"{spout!r} is not a spout: implement a TridentSpout, a partitioned or opaque "
        f"partitioned spout, or a batch spout (emit_batch)"
    )
    raise ConfigurationError(msg)
