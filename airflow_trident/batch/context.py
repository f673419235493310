"""What every step of a batch shares: the topology, its coordinator store, staging, states.

:class:`BatchContext` is what the phases (:mod:`~airflow_trident.batch.begin`,
:mod:`~airflow_trident.batch.process`, :mod:`~airflow_trident.batch.commit`) share: each holds
it, and :class:`~airflow_trident.batch.steps.BatchSteps` composes them over one. It
builds the spouts' coordinator at once (every step needs it) and the state committer and the
in-process interpreter only when a step first uses them, so that a sensor poke or a trigger
poll that only asks whether spouts are ready pays for neither.
"""

from __future__ import annotations

import functools
from typing import Any

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.coordination.coordinator import TransactionalCoordinator
from airflow_trident.coordination.protocol import CoordinatorStoreProtocol
from airflow_trident.errors import ConfigurationError
from airflow_trident.graph import SpoutNode
from airflow_trident.runtime.commit import StateCommitter, query_state
from airflow_trident.runtime.local import LocalBatchProcessor
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.base import TridentSpout
from airflow_trident.spout.executor import as_trident_spout
from airflow_trident.state.binding import StateBinding
from airflow_trident.topology import TridentTopology

__all__ = ["BatchContext", "Row", "topology_spouts"]

Row = tuple[Any, ...]


def topology_spouts(
    topology: TridentTopology, store: CoordinatorStoreProtocol
) -> dict[str, TridentSpout]:
    """Every spout of ``topology`` as a ``TridentSpout``; partitioned spouts keep their
    per-partition metadata beside the coordinator's (``store.partition_state``)."""
    spouts: dict[str, TridentSpout] = {}
    for name, node_id in topology.spouts.items():
        node = topology.nodes[node_id]
        assert isinstance(node, SpoutNode)
        spouts[name] = as_trident_spout(node.spout, store.partition_state(name))
    return spouts


class BatchContext:
    """One topology's batches: its coordinator store, staging area, ledger and states.

    Parameters
    ----------
    topology:
        The topology.
    store:
        Its coordinator store (ZooKeeper in production, memory in-process).
    staging:
        Where processed batches are staged for their commit (not needed to run batches
        in-process with ``run_batch``).
    keep_txids:
        How many recent txids keep their metadata and staging.
    ledger:
        Where committed batches are recorded (the state database), if anywhere.
    states:
        The run's state database (default: each state factory's own).
    """

    def __init__(
        self,
        topology: TridentTopology,
        store: CoordinatorStoreProtocol,
        staging: StagingArea | None = None,
        *,
        keep_txids: int = 16,
        ledger: CommitLedger | None = None,
        states: StateBinding | None = None,
    ) -> None:
        self.topology = topology
        self.ledger = ledger
        self.store = store
        self._staging = staging
        self.keep_txids = keep_txids
        self.states = states or StateBinding()
        spouts = topology_spouts(topology, store)
        self.coordinator = TransactionalCoordinator(store, spouts, keep_txids=keep_txids)

    @functools.cached_property
    def committer(self) -> StateCommitter:
        """Applies staged rows to the states (built on first use)."""
        return StateCommitter(self.topology, self.states)

    @functools.cached_property
    def processor(self) -> LocalBatchProcessor:
        """The in-process interpreter of the topology's plan (built on first use)."""
        return LocalBatchProcessor(self.topology, states=self.query_state)

    def is_committed(self, txid: int) -> bool:
        """Whether ``txid`` is committed (its replays, clears and backfills change nothing)."""
        return bool(self.store.commits.committed_txid() >= txid)

    @property
    def has_staging(self) -> bool:
        """Whether these batches have a staging area."""
        return self._staging is not None

    @property
    def staging(self) -> StagingArea:
        """The staging area (steps that run in separate processes need one)."""
        if self._staging is None:
            msg = (
                f"topology {self.topology.name!r}: this step stages the batch for a separate "
                f"commit, and these BatchSteps have no staging area; hint: pass staging="
                f"StagingArea(root, topology.name), or run the batch whole with run_batch()"
            )
            raise ConfigurationError(msg)
        return self._staging

    def query_state(self, name: str) -> Any:
        """The committed state ``name`` in the run's state database (for reading)."""
        return query_state(self.topology, name, self.states)
