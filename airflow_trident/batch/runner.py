"""Running a topology in-process (Trident's ``LocalCluster``): :class:`LocalRunner`.

Each batch goes through the batch lifecycle (:class:`~airflow_trident.batch.steps.BatchSteps`)
— begin, emit, process, commit, success — on an in-memory coordinator or the real ZooKeeper one.
A batch that fails stays uncommitted, and the next :meth:`LocalRunner.run_batch` retries that
txid (as Trident's coordinator does) before any new one; :meth:`LocalRunner.replay` runs an
allocated txid again.

Examples
--------
>>> from airflow_trident.operation import Count, MapGet, Split
>>> from airflow_trident.spout.memory import MemoryTransactionalSpout
>>> from airflow_trident.state.memory import memory_state
>>> from airflow_trident.topology import TridentTopology
>>> t = TridentTopology("wc")
>>> sentences = [("the cow",), ("the moon",), ("a cow",)]
>>> spout = MemoryTransactionalSpout({"p0": sentences}, ["sentence"], take_per_batch=2)
>>> words = t.new_stream("sentences", spout).each(["sentence"], Split(), ["word"])
>>> counts = words.group_by(["word"]).persistent_aggregate(
...     memory_state("wc_counts"), Count(), ["count"], name="counts")
>>> _ = (t.new_drpc_stream("words").each(["args"], Split(), ["word"])
...       .state_query(counts, ["word"], MapGet(), ["count"]).project(["word", "count"]))
>>> runner = LocalRunner(t)
>>> [r.txid for r in runner.run(3)]
[1, 2, 3]
>>> runner.drpc("words", "the cow dog")
[('the', 2), ('cow', 2), ('dog', None)]
>>> runner.replay(2).committed  # already committed: nothing changes
False
>>> runner.drpc("words", "the cow")
[('the', 2), ('cow', 2)]
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.steps import BatchReport, BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.coordination.protocol import CoordinatorStoreProtocol
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.state.binding import StateBinding
from airflow_trident.topology import TridentTopology

__all__ = ["BatchReport", "LocalRunner"]

log = logging.getLogger(__name__)

Row = tuple[Any, ...]


class LocalRunner:
    """Runs a topology's batches in-process, like Trident's ``LocalCluster``.

    Parameters
    ----------
    topology:
        The topology.
    store:
        A ZooKeeper :class:`~airflow_trident.coordination.store.CoordinatorStore` for the real
        coordinator, or ``None`` for an in-memory one.
    states:
        The state database of the run (default: each state factory's own).
    ledger:
        Where committed batches are recorded, if anywhere.
    staging:
        A staging area, for :meth:`steps` used one step at a time.
    """

    def __init__(
        self,
        topology: TridentTopology,
        *,
        store: CoordinatorStoreProtocol | None = None,
        states: StateBinding | None = None,
        ledger: CommitLedger | None = None,
        staging: StagingArea | None = None,
    ) -> None:
        self.topology = topology
        self.steps = BatchSteps(
            topology,
            store or MemoryCoordinatorStore(topology.name),
            staging,
            ledger=ledger,
            states=states,
        )

    @property
    def store(self) -> CoordinatorStoreProtocol:
        """The coordinator store."""
        return self.steps.store

    def run_batch(self, run_id: str | None = None) -> BatchReport:
        """Run one batch: the oldest failed (uncommitted) txid again if there is one, else a
        new one; a ``run_id`` re-binds that run's txid (see :meth:`BatchSteps.run_batch`)."""
        return self.steps.run_batch(run_id)

    def replay(self, txid: int) -> BatchReport:
        """Run allocated txid ``txid`` again (a committed one changes nothing)."""
        return self.steps.replay(txid)

    def run(self, batches: int) -> list[BatchReport]:
        """Run ``batches`` batches in txid order."""
        return [self.run_batch() for _ in range(batches)]

    def state(self, name: str) -> Any:
        """The committed state ``name`` (``multi_get`` for grouped, ``get()`` for global)."""
        return self.steps.query_state(name)

    def drpc(self, function: str, args: str) -> list[Row]:
        """Run the DRPC stream of ``function`` for one request against committed state; return
        its final tuples (see :class:`~airflow_trident.drpc.DRPCExecutor`)."""
        from airflow_trident.drpc import DRPCExecutor

        return DRPCExecutor(self.topology, store=self.store, states=self.steps.states).execute(
            function, args
        )
