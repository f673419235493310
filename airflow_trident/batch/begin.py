"""The begin phase of a batch: bind the run to its txid and store the batch metadata.

Trident's coordinator: a new run gets the next txid, a retried or cleared run gets its own
txid back (re-bound by run id), and ``txid=N`` replays an allocated txid.

The attempt a begin reports (its XCom, its task's log line) is the one every other place shows
for the run (the process and commit tasks, the run's note, the status and the run's Trident
tab): the *processing* attempt, 1 for the first processing. A begin processes nothing: it names
the attempt its process step starts next, or, for a txid already committed (a replay, which
processes nothing), the attempt that committed it. ZooKeeper's attempt counter, which a begin
also raises (a re-begun txid wants a new processing), is not that number.
"""

from __future__ import annotations

from typing import Any

from airflow_trident.batch.context import BatchContext
from airflow_trident.coordination.coordinator import BatchPlan
from airflow_trident.errors import BatchIncompleteError

__all__ = ["Begin"]


class Begin:
    """:meth:`begin` and what later phases read back of it (:meth:`plan`), over ``ctx``."""

    def __init__(self, ctx: BatchContext) -> None:
        self.ctx = ctx

    def is_ready(self) -> bool:
        """Whether every spout is ready for the next batch."""
        return self.ctx.coordinator.is_ready()

    def begin(self, run_id: str | None, txid: int | None = None) -> dict[str, Any]:
        """Bind ``run_id`` to its txid (new, re-bound, or the replay of ``txid``)."""
        plan = self.ctx.coordinator.begin(run_id=run_id, txid=txid)
        committed = self.ctx.store.commits.committed_txid()
        # the attempt the process step's next_attempt starts; a committed txid's, the ledger's
        attempt = (
            self.committed_attempt(plan.txid)
            if plan.txid <= committed
            else plan.attempt.attempt_id + 1
        )
        return {
            "txid": plan.txid,
            "attempt_id": attempt,
            "run_id": run_id,
            "metas": dict(plan.metas),
            "committed_txid": committed,
        }

    def committed_attempt(self, txid: int) -> int | None:
        """The attempt whose staging the commit of ``txid`` applied (the commit ledger's row),
        ``None`` without a ledger or a row."""
        row = None if self.ctx.ledger is None else self.ctx.ledger.row(self.ctx.topology.name, txid)
        return None if row is None else int(row["attempt_id"])

    def plan(self, txid: int) -> BatchPlan:
        """The current attempt and metadata of ``txid``, as the begin step stored them.

        Raises
        ------
        BatchIncompleteError
            If ``txid`` was never begun.
        """
        attempt = self.ctx.store.attempts.attempt(txid)
        if attempt is None:
            msg = f"txid {txid} of topology {self.ctx.topology.name!r} was never begun; run begin"
            raise BatchIncompleteError(msg)
        metas = {
            name: self.ctx.store.metas.get_meta(name, txid) for name in self.ctx.coordinator.spouts
        }
        return BatchPlan(attempt, metas)

    def pending_txid(self) -> int | None:
        """The oldest txid begun and not committed (a failed batch to retry), if any."""
        committed = self.ctx.store.commits.committed_txid()
        return committed + 1 if self.ctx.store.runs.current_txid() > committed else None

    def new_attempt(self, txid: int) -> BatchPlan:
        """Start a new attempt of ``txid`` (every emit is one): its metadata and attempt id."""
        begun = self.plan(txid)
        return BatchPlan(self.ctx.store.attempts.next_attempt(txid), begun.metas)
