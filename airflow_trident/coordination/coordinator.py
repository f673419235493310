"""The transactional coordinator of one topology (Trident's ``MasterBatchCoordinator``).

It runs the steps of a batch around the spouts and states; the Airflow tasks call these steps:

* :meth:`TransactionalCoordinator.begin` — bind the run to a txid (re-bind on a retry, replay a
  given txid), build each spout's metadata and store it, and record a new attempt;
* :meth:`TransactionalCoordinator.emit` — emit a spout's batch (the processing step does this);
* :meth:`TransactionalCoordinator.commit` — strictly after txid-1: apply the batch to the states
  under their exactly-once rules, then advance the committed txid by compare-and-set;
* :meth:`TransactionalCoordinator.success` — tell the spouts, and rotate old metadata away.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.coordination.protocol import CoordinatorStoreProtocol
from airflow_trident.coordination.store import require_allocated
from airflow_trident.errors import CommitOrderError, TridentError
from airflow_trident.names import validate_name
from airflow_trident.spout.base import ListCollector, TridentSpout, emit_error
from airflow_trident.spout.executor import OpaqueBatches
from airflow_trident.spout.lag import Lag, lag_after, reports_lag
from airflow_trident.spout.tx_state import TransactionWrite
from airflow_trident.state.base import StateType

__all__ = ["BatchPlan", "CommitResult", "TransactionalCoordinator"]
"""A state and the function applying the batch to it (called inside its commit)."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchPlan:
    """What the begin step decided: the attempt and each spout's metadata."""

    attempt: TransactionAttempt
    metas: Mapping[str, Any]
    run_id: str | None = None

    @property
    def txid(self) -> int:
        """The batch's txid."""
        return self.attempt.txid


@dataclass(frozen=True)
class CommitResult:
    """What the commit step did."""

    txid: int
    applied: bool
    committed_partitions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


class TransactionalCoordinator:
    """Begin, commit and success of the batches of one topology, coordinated in ZooKeeper.

    Parameters
    ----------
    store:
        The topology's store (:class:`~airflow_trident.coordination.protocol.
        CoordinatorStoreProtocol`): ZooKeeper, or memory in-process.
    spouts:
        Spout name -> spout (``TridentSpout``; partitioned spouts wrapped in their executor).
    keep_txids:
        How many committed txids keep their metadata and attempts (older ones are deleted).
    keep_runs:
        How many committed txids keep their run bindings (so a cleared old run replays its own
        txid instead of taking a new one); 1,000 by default, so the topology's znodes stay
        bounded (about ``2 * keep_runs`` binding and index nodes, pruned through the txid -> runs
        index). A run cleared more than ``keep_runs`` txids after its own is a new run.
    """

    def __init__(
        self,
        store: CoordinatorStoreProtocol,
        spouts: Mapping[str, TridentSpout],
        *,
        keep_txids: int = 16,
        keep_runs: int = 1_000,
    ) -> None:
        for name in spouts:
            validate_name(name, kind="spout")
        self.store = store
        self.spouts = dict(spouts)
        self.keep_txids = keep_txids
        self.keep_runs = keep_runs
        self._coordinators = {name: s.get_coordinator() for name, s in self.spouts.items()}

    @property
    def topology(self) -> str:
        """The topology's name."""
        return self.store.paths.topology

    def is_ready(self, txid: int | None = None) -> bool:
        """Whether every spout is ready for ``txid`` (default: the next txid)."""
        txid = self.store.runs.current_txid() + 1 if txid is None else txid
        return all(c.is_ready(txid) for c in self._coordinators.values())

    def begin(self, *, run_id: str | None = None, txid: int | None = None) -> BatchPlan:
        """Bind ``run_id`` to a txid, store each spout's metadata, start a new attempt.

        A run that already has a txid keeps it (a retry or a cleared task replays the same
        batch); ``txid`` asks to replay an allocated txid. Without ``run_id`` a new txid is
        allocated (in-process runs).
        """
        if run_id is not None:
            txid = self.store.runs.bind_run(run_id, txid)
        elif txid is None:
            txid = self.store.runs.allocate_txid()
        else:  # a replay without a run: the txid must exist, or nothing may be written
            require_allocated(txid, self.store.runs.current_txid(), topology=self.topology)
        metas: dict[str, Any] = {}
        for name, spout in self.spouts.items():
            earlier = self.store.metas.latest_meta_before(name, txid)
            prev = None if earlier is None else earlier[1]
            curr = self.store.metas.get_meta(name, txid)
            meta = self._coordinators[name].initialize_transaction(txid, prev, curr)
            fixed = spout.kind is StateType.TRANSACTIONAL
            self.store.metas.put_meta(name, txid, meta, overwrite=not fixed)
            metas[name] = meta
        attempt = self.store.attempts.next_attempt(txid)
        # not "attempt N": the counter also counts begins, the attempts people see count
        # processings (the begin step's summary names that number)
        log.info("topology %s: begin txid %d", self.topology, txid)
        log.debug("topology %s: txid %d attempt counter %d", self.topology, txid,
                  attempt.attempt_id)  # fmt: skip
        return BatchPlan(attempt, metas, run_id)

    def emit(self, plan: BatchPlan, spout: str) -> list[tuple[Any, ...]]:
        """Emit ``spout``'s part of the batch in-process and return its tuples."""
        return self._emit(plan, spout).tuples

    def emit_partitions(self, plan: BatchPlan, spout: str) -> dict[str, list[tuple[Any, ...]]]:
        """Emit ``spout``'s part of the batch in-process; its tuples by source partition."""
        return self._emit(plan, spout).partitions

    def _emit(self, plan: BatchPlan, spout: str) -> ListCollector:
        collector = ListCollector()
        emitter = self.spouts[spout].get_emitter()
        try:
            emitter.emit_batch(plan.attempt, plan.metas[spout], collector)
        except TridentError:
            raise
        except Exception as exc:  # the spout's source failed: name spout, txid, attempt
            raise emit_error(spout, plan.attempt, collector.partition, exc) from exc
        finally:
            emitter.close()
        return collector

    def commit_applied_by(
        self,
        plan: BatchPlan,
        apply_batch: Callable[[], object],
        *,
        token: str | None = None,
    ) -> CommitResult:
        """Check the order, run ``apply_batch`` (which writes the batch to the states, here or
        on Spark executors), then advance the committed txid by compare-and-set.

        ``apply_batch`` applies each state partition in its own ``begin_commit`` / ``commit``
        (one database transaction each, see
        :func:`~airflow_trident.state.bracket.apply_in_commit`). If a later one fails, the earlier
        ones stay committed and the retry skips them by their per-key txids, as in
        Trident. A txid already committed is not applied again (a cleared, committed run changes
        nothing), and ``apply_batch`` is not called.

        Raises
        ------
        CommitOrderError
            If ``txid - 1`` is not committed (nothing is written).
        CommitConflictError
            If another committer committed ``txid`` meanwhile (its state writes were the same
            batch under the same txid, so the per-key rules made them no-ops).
        StaleBatchError
            If an opaque batch was built on metadata that an earlier replay changed.
        """
        txid = plan.txid
        committed = self.store.commits.committed_txid()
        if committed >= txid:
            log.info("topology %s: txid %d already committed; nothing to do", self.topology, txid)
            return CommitResult(txid, applied=False)
        if committed != txid - 1:
            msg = (
                f"cannot commit txid {txid} of topology {self.topology!r}: committed txid is "
                f"{committed}, so txid {committed + 1} must commit first; nothing was written"
            )
            raise CommitOrderError(msg)
        # the committed metadata prepared before the states are written: too large for
        # ZooKeeper is refused here, with nothing applied
        opaque = self._opaque_partitions(plan)
        prepared = [write for _, _, write in opaque.values() if write is not None]
        local = [(spout, parts) for spout, parts, write in opaque.values() if write is None]
        apply_batch()
        token = token or uuid.uuid4().hex
        if prepared:
            self.store.commits.commit(txid, token=token, writes={}, prepared=prepared)
        else:
            self.store.commits.commit(txid, token=token, writes={})
        for executor, parts in local:
            if parts:
                executor.state.put_committed_many(parts)
        partitions = {name: parts for name, (_, parts, _) in opaque.items()}
        return CommitResult(txid, applied=True, committed_partitions=partitions)

    def success(self, txid: int) -> int:
        """Tell the spouts batch ``txid`` committed; delete old metadata. Returns nodes removed."""
        for coordinator in self._coordinators.values():
            coordinator.success(txid)
        # not a replay's: never tell of an older batch
        if self.store.commits.committed_txid() == txid:
            self._tell_committed(txid)
        # run bindings are kept longer: a cleared old run must replay its own txid
        removed = self.store.cleanup_before(
            txid - self.keep_txids + 1, runs_before=txid - self.keep_runs + 1
        )
        for spout in self.spouts.values():
            state = getattr(spout, "state", None)
            cleanup = getattr(state, "cleanup_before", None)
            if callable(cleanup):
                removed += int(cleanup(txid - self.keep_txids + 1))
        return removed

    def partitions_after(self, spout: str, txid: int) -> dict[str, Any] | None:
        """Each partition's metadata of (partitioned or opaque) ``spout`` once ``txid``
        committed (where its next batch starts); ``None`` for a spout without partitions."""
        after = getattr(self.spouts[spout], "partitions_after", None)
        if not callable(after):
            return None
        return dict(after(txid, self.store.metas.get_meta(spout, txid)))

    def _tell_committed(self, txid: int) -> None:
        """Call each user spout's optional ``batch_committed(topology, spout, txid,
        partitions)`` (:mod:`airflow_trident.spout.base`) after ``txid``, the newest committed
        txid, committed; its failure is a warning, never the batch's."""
        for name, spout in self.spouts.items():
            inner = getattr(spout, "spout", spout)
            hook = getattr(inner, "batch_committed", None)
            if not callable(hook):
                continue
            try:
                partitions = self.partitions_after(name, txid)
                if partitions is not None:
                    hook(self.topology, name, txid, partitions)
            except Exception as exc:  # a user's spout: telling it is best effort
                log.warning(
                    "topology %s: spout %r could not be told that txid %d committed (%s: %s); "
                    "the batch stays committed", self.topology, name, txid,
                    type(exc).__name__, " ".join(str(exc).split())[:300],
                )  # fmt: skip

    def committed_lag(self, txid: int) -> dict[str, dict[str, Lag | None]]:
        """Spout -> source partition -> its lag once ``txid`` committed (what the status
        table shows, :mod:`airflow_trident.spout.lag`), for the spouts that tell a lag;
        empty unless ``txid`` is the newest committed txid."""
        if self.store.commits.committed_txid() != txid:
            return {}
        found: dict[str, dict[str, Lag | None]] = {}
        for name, spout in self.spouts.items():
            inner = getattr(spout, "spout", spout)
            if not reports_lag(inner):
                continue
            partitions = self.partitions_after(name, txid)
            if partitions is None:
                partitions = {"0": self.store.metas.get_meta(name, txid)}
            found[name] = {p: lag_after(inner, p, meta) for p, meta in sorted(partitions.items())}
        return found

    def close(self) -> None:
        """Close the spouts' coordinators."""
        for coordinator in self._coordinators.values():
            coordinator.close()

    def _opaque_partitions(
        self, plan: BatchPlan
    ) -> dict[str, tuple[OpaqueBatches, dict[str, Any], TransactionWrite | None]]:
        """Each opaque spout, the committed metadata its partitions get with ``plan``'s commit,
        and its writes for the commit transaction (``None``: stored after the commit)."""
        found: dict[str, tuple[OpaqueBatches, dict[str, Any], TransactionWrite | None]] = {}
        for name, spout in self.spouts.items():
            if isinstance(spout, OpaqueBatches):
                meta = plan.metas[name]
                with spout.state.cached():  # the txid's and the committed value: read once
                    spout.check_not_stale(plan.txid, meta)
                    parts = spout.committed_metas(plan.txid, meta)
                    write = spout.state.committed_write(parts) if parts else None
                found[name] = (spout, parts, write)
        return found
