"""The begin phase of a batch: bind the run to its txid and store the batch metadata.

Trident's coordinator: a new run gets the next txid, a retried or cleared run gets its own
txid back (re-bound by run id), and ``txid=N`` replays an allocated txid.
"""

from __future__ import annotations

from typing import Any

from airflow_trident.batch.context import BatchContext
from airflow_trident.coordination.coordinator import BatchPlan
from airflow_trident.errors import BatchIncompleteError

__all__ = ["BeginSteps"]


class BeginSteps(BatchContext):
    """:meth:`begin` and what later steps read back of it (:meth:`plan`)."""

    def is_ready(self) -> bool:
        """Whether every spout is ready for the next batch."""
        return self.coordinator.is_ready()

    def begin(self, run_id: str | None, txid: int | None = None) -> dict[str, Any]:
        """Bind ``run_id`` to its txid (new, re-bound, or the replay of ``txid``)."""
        plan = self.coordinator.begin(run_id=run_id, txid=txid)
        return {
            "txid": plan.txid,
            "attempt_id": plan.attempt.attempt_id,
            "run_id": run_id,
            "metas": dict(plan.metas),
            "committed_txid": self.store.committed_txid(),
        }

    def plan(self, txid: int) -> BatchPlan:
        """The current attempt and metadata of ``txid``, as the begin step stored them.

        Raises
        ------
        BatchIncompleteError
            If ``txid`` was never begun.
        """
        attempt = self.store.attempt(txid)
        if attempt is None:
            msg = f"txid {txid} of topology {self.topology.name!r} was never begun; run begin"
            raise BatchIncompleteError(msg)
        metas = {name: self.store.get_meta(name, txid) for name in self.coordinator.spouts}
        return BatchPlan(attempt, metas)

    def pending_txid(self) -> int | None:
        """The oldest txid begun and not committed (a failed batch to retry), if any."""
        committed = self.store.committed_txid()
        return committed + 1 if self.store.current_txid() > committed else None

    def new_attempt(self, txid: int) -> BatchPlan:
        """Start a new attempt of ``txid`` (every emit is one): its metadata and attempt id."""
        begun = self.plan(txid)
        return BatchPlan(self.store.next_attempt(txid), begun.metas)
