"""The batch lifecycle of a topology on ZooKeeper, a staging root and a state database.

One function builds it for every process a batch runs in — the Airflow tasks (through
:class:`~airflow_trident.hooks.trident.TridentHook`, which turns connection ids into these
arguments) and the Spark job of the process and commit steps
(:mod:`airflow_trident.batch.spark_job`, which receives them on its command line and, for
secrets, in its environment).
"""

from __future__ import annotations

from typing import Any

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.state.binding import StateBinding
from airflow_trident.topology import TridentTopology

__all__ = ["zookeeper_batch_steps"]


def zookeeper_batch_steps(
    topology: TridentTopology,
    client: Any,
    *,
    root: str,
    staging_root: str,
    state_url: str | None = None,
    keep_txids: int = 16,
) -> BatchSteps:
    """The lifecycle of ``topology``'s batches, coordinated under ``root`` through the connected
    kazoo ``client``, staged below ``staging_root``, its states (those made without a database
    of their own) and its commit ledger in ``state_url`` (no ledger without one).
    """
    return BatchSteps(
        topology,
        CoordinatorStore(client, CoordinatorPaths(root, topology.name)),
        StagingArea(staging_root, topology.name),
        keep_txids=keep_txids,
        ledger=CommitLedger(state_url) if state_url else None,
        states=StateBinding(state_url),
    )
