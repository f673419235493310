"""What a running topology is doing: committed and allocated txids, batches in flight, the last
commits and the lag of each source partition (``airflow-trident status``, the UI view).

Everything is read, nothing is written. The facts come from where the lifecycle leaves them:

======================  ===================================================================
fact                    where it is read
======================  ===================================================================
committed, allocated    ZooKeeper: ``coordinator/committed_txid``, ``coordinator/current_txid``
attempt of a txid       ZooKeeper: ``coordinator/attempts/<txid>`` (0 at begin, shown as none;
                        +1 per process: 1 is the first processing, as the run's note says)
begun at                that node's creation time
process started at      its last change (when the current attempt started), attempt >= 1
processed at            the attempt's staged manifest (its modification time), if staging is known
commit started at       ZooKeeper: ``coordinator/commits_started/<txid>`` (creation time)
committed at, records   the commit ledger in the state database (``trident_commit_ledger``)
run of a txid           the ledger row (the run that committed it), else ZooKeeper:
                        ``coordinator/txid_runs/<txid>`` (else ``runs/``); a later run bound
                        to a committed txid is its replay (``replay_run_id``)
a replay's own steps    its begin: its binding ``coordinator/runs/<run>`` (creation time); it
                        processes and commits nothing (a replay run's view shows no times
                        of the run that committed the txid)
lag                     each spout's optional ``lag`` or ``pending(partition, meta)``
                        (:mod:`airflow_trident.spout.lag`) after its newest emitted batch
======================  ===================================================================

ZooKeeper keeps attempts and commit markers for the last ``keep_txids`` committed txids only:
older commits show their ledger row without durations.

The phase of a txid not committed yet is the furthest step it reached: ``allocated`` (bound to a
run, not begun), ``begun``, ``processing`` (an attempt started; a failed one looks the same, its
``since`` grows), ``processed`` (staged, waiting for its commit turn), ``committing``.

The status itself, and its text, are in :mod:`airflow_trident.batch.status_report`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from kazoo.exceptions import NoNodeError

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.status_report import (
    PHASES,
    BatchStatus,
    PartitionLag,
    RunStatus,
    TopologyStatus,
)
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.graph import spout_shape
from airflow_trident.names import decode_segment
from airflow_trident.runtime.staging import MANIFEST, StagingArea
from airflow_trident.spout.lag import lag_or_reason, reports_lag
from airflow_trident.topology import TridentTopology

__all__ = [
    "PHASES",
    "BatchStatus",
    "PartitionLag",
    "RunStatus",
    "StatusCollector",
    "TopologyStatus",
]

log = logging.getLogger(__name__)

_MAX_RUN_BINDINGS = 2000  # reading more run bindings than this per status call costs seconds
_SKIPPED = "__trident_skipped__"  # a transactional partition that emitted nothing for a txid


def _utc(moment: Any) -> datetime | None:
    """A ledger timestamp as an aware UTC datetime (SQLite hands back naive ones)."""
    if not isinstance(moment, datetime):
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


@dataclass(frozen=True)
class _Znode:
    value: Any
    created: datetime
    modified: datetime


class StatusCollector:
    """Reads one topology's status from ZooKeeper, the commit ledger and the staging area.

    Parameters
    ----------
    store:
        The topology's coordinator store (ZooKeeper).
    ledger:
        The commit ledger (the state database); ``None``: no commit history.
    topology:
        The topology itself, to ask its spouts for their lag; ``None``: no lag.
    staging:
        Where batches are staged, to tell ``processed`` from ``processing``; ``None``: not told.
    last:
        How many of the last commits to show.
    """

    def __init__(
        self,
        store: CoordinatorStore,
        *,
        ledger: CommitLedger | None = None,
        topology: TridentTopology | None = None,
        staging: StagingArea | None = None,
        last: int = 10,
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.topology = topology
        self.staging = staging
        self.last = last

    def collect(self, *, dag_id: str | None = None) -> TopologyStatus:
        """Read everything once and return the status."""
        notes: list[str] = []
        committed, allocated = self.store.commits.committed_txid(), self.store.runs.current_txid()
        rows = self._ledger_rows(notes)
        shown = [int(r["txid"]) for r in rows] + list(range(committed + 1, allocated + 1))
        runs = self._runs(shown, notes)
        in_flight = tuple(
            self._in_flight(txid, runs.get(txid)) for txid in range(committed + 1, allocated + 1)
        )
        commits = tuple(self._committed(row, runs.get(int(row["txid"]))) for row in rows)
        if self.staging is None:
            notes.append("no staging root: 'processing' includes batches already processed")
        return TopologyStatus(
            topology=self.store.paths.topology,
            committed_txid=committed,
            allocated_txid=allocated,
            collected_at=datetime.now(UTC),
            in_flight=in_flight,
            commits=commits,
            lag=self._lag(rows),
            dag_id=dag_id,
            notes=tuple(notes),
        )

    def run(self, run_id: str, *, dag_id: str | None = None) -> RunStatus:
        """What run ``run_id`` is to the topology: its txid from the moment its begin bound it
        in ZooKeeper (a run in flight, not only a finished one), and that batch's status."""
        committed = self.store.commits.committed_txid()
        txid = self.store.runs.txid_for_run(run_id)
        batch: BatchStatus | None = None
        if txid is not None and txid > committed:
            batch = self._in_flight(txid, run_id)
        elif txid is not None:
            row = None if self.ledger is None else self.ledger.row(self.store.paths.topology, txid)
            batch = (BatchStatus(txid, "committed") if row is None
                     else self._committed(row, run_id))  # fmt: skip
            if batch.replay_run_id == run_id:  # another run committed it: this run replays it
                batch = self._replayed(batch, run_id)
        return RunStatus(run_id, self.store.paths.topology, committed, datetime.now(UTC),
                         txid=txid, batch=batch, dag_id=dag_id)  # fmt: skip

    # -- ZooKeeper ------------------------------------------------------------------------------

    def _node(self, path: str) -> _Znode | None:
        client = self.store.client
        try:
            data, stat = client.retry(client.get, path)
        except NoNodeError:
            return None
        value = json.loads(data.decode()) if data else None
        return _Znode(
            value,
            datetime.fromtimestamp(stat.created, UTC),
            datetime.fromtimestamp(stat.last_modified, UTC),
        )

    def _children(self, path: str) -> list[str]:
        client = self.store.client
        try:
            children: list[str] = client.retry(client.get_children, path)
        except NoNodeError:
            return []
        return children

    def _runs(self, txids: list[int], notes: list[str]) -> dict[int, str]:
        """txid -> the run bound to it most recently, for ``txids``: from the store's txid ->
        runs index, else (bindings older than the index) from every binding."""
        runs: dict[int, str] = {}
        for txid in txids:
            bound = self.store.runs.runs_of_txid(txid)
            if bound:
                runs[txid] = bound[-1]
        if len(runs) < len(set(txids)):
            runs = {**self._scanned_runs(notes), **runs}
        return runs

    def _scanned_runs(self, notes: list[str]) -> dict[int, str]:
        """txid -> the run bound to it most recently, from every run binding."""
        names = self._children(self.store.paths.runs)
        if len(names) > _MAX_RUN_BINDINGS:
            notes.append(f"{len(names)} run bindings: run ids not shown")
            return {}
        client, base = self.store.client, self.store.paths.runs
        pending = [(name, client.get_async(f"{base}/{name}")) for name in names]
        newest: dict[int, tuple[float, str]] = {}
        for name, result in pending:
            try:
                data, stat = result.get(timeout=10)
            except NoNodeError:
                continue  # rotated away meanwhile
            txid = int(json.loads(data.decode())["txid"])
            if txid not in newest or stat.created > newest[txid][0]:
                newest[txid] = (stat.created, decode_segment(name))
        return {txid: run for txid, (_, run) in newest.items()}

    # -- one txid -------------------------------------------------------------------------------

    def _times(self, txid: int, attempt_id: int | None) -> dict[str, Any]:
        """What ZooKeeper and the staging area tell of ``txid``: attempt and step times."""
        paths = self.store.paths
        attempt = self._node(paths.attempt(txid))
        started = self._node(paths.commit_started(txid))
        current = None if attempt is None else int(attempt.value)
        times: dict[str, Any] = {
            "attempt_id": current,
            "begun_at": None if attempt is None else attempt.created,
            "commit_started_at": None if started is None else started.created,
        }
        # the node changes when an attempt starts; an attempt other than the committed one
        # (a later replay) says nothing about the committed attempt's start
        if attempt is not None and current and (attempt_id is None or attempt_id == current):
            times["process_started_at"] = attempt.modified
        shown = attempt_id if attempt_id is not None else current
        if shown is not None and shown >= 1:
            times["processed_at"] = self._manifest_time(TransactionAttempt(txid, shown))
        return times

    def _manifest_time(self, attempt: TransactionAttempt) -> datetime | None:
        if self.staging is None:
            return None
        from pyarrow import fs

        try:
            filesystem, _ = self.staging.filesystem()
            info = filesystem.get_file_info(f"{self.staging.path(attempt)}/{MANIFEST}")
        except OSError as exc:  # an unreachable staging root must not fail the report
            log.warning("cannot read the staging root of txid %d: %s", attempt.txid, exc)
            return None
        if info.type == fs.FileType.NotFound or info.mtime is None:
            return None
        return _utc(info.mtime)

    def _in_flight(self, txid: int, run_id: str | None) -> BatchStatus:
        times = self._times(txid, None)
        attempt_id = times["attempt_id"]
        if times["commit_started_at"] is not None:
            phase, since = "committing", times["commit_started_at"]
        elif times.get("processed_at") is not None:
            phase, since = "processed", times["processed_at"]
        elif attempt_id is not None and attempt_id >= 1:
            phase, since = "processing", times.get("process_started_at")
        elif attempt_id is not None:
            phase, since = "begun", times["begun_at"]
        else:
            phase, since = "allocated", None
        # attempts count processings (1, 2, ...): a begun batch has none yet, shown as "-"
        times["attempt_id"] = attempt_id or None
        return BatchStatus(txid, phase, run_id=run_id, since=since, **times)

    def _committed(self, row: Mapping[str, Any], run_id: str | None) -> BatchStatus:
        txid, attempt_id = int(row["txid"]), int(row["attempt_id"])
        committed_at = _utc(row["committed_at"])
        times = self._times(txid, attempt_id)
        times["attempt_id"] = attempt_id
        if times.get("process_started_at") is None:  # a replay's attempt changed the node since
            times["process_started_at"] = _utc(row.get("process_started_at"))
        for key in ("begun_at", "process_started_at", "processed_at", "commit_started_at"):
            if (
                times.get(key) is not None
                and committed_at is not None
                and (times[key] > committed_at)
            ):
                times[key] = None  # a replay after the commit, not this batch's step
        keys = json.loads(row["keys_written"]) if row.get("keys_written") else {}
        # the ledger names the run that committed the batch; the newest run bound to the txid,
        # if another, is a replay of it (which commits nothing)
        committer = row.get("run_id") or run_id
        return BatchStatus(
            txid,
            "committed",
            run_id=committer,
            replay_run_id=run_id if run_id is not None and run_id != committer else None,
            since=committed_at,
            committed_at=committed_at,
            records_in=int(row["records_in"]),
            keys_written={str(k): int(v) for k, v in keys.items()},
            **times,
        )

    def _replayed(self, batch: BatchStatus, run_id: str) -> BatchStatus:
        """What replay ``run_id`` of committed ``batch`` did itself: begun when its begin bound
        it to the txid (its binding's creation), and nothing processed or committed (the
        steps of the run that committed the txid are that run's, not the replay's)."""
        bound = self._node(self.store.paths.run(run_id))
        begun = None if bound is None else bound.created
        return replace(
            batch, since=begun, begun_at=begun, process_started_at=None, processed_at=None,
            commit_started_at=None, committed_at=None, records_in=None, keys_written=None,
        )  # fmt: skip

    def _ledger_rows(self, notes: list[str]) -> list[dict[str, Any]]:
        if self.ledger is None:
            notes.append("no state database: no commit history")
            return []
        return self.ledger.recent(self.store.paths.topology, self.last)

    # -- lag ------------------------------------------------------------------------------------

    def _lag(self, rows: list[dict[str, Any]]) -> tuple[PartitionLag, ...]:
        if self.topology is None:
            return ()
        found: list[PartitionLag] = []
        for name, node_id in self.topology.spouts.items():
            spout = getattr(self.topology.nodes[node_id], "spout", None)
            if not reports_lag(spout):
                continue
            shape = spout_shape(spout)
            if shape in ("partitioned", "opaque"):
                newest = self._partition_metas(name, opaque=shape == "opaque")
                if not newest and rows and self.ledger is not None:
                    newest = self._archived_partitions(name, int(rows[-1]["txid"]))
            else:
                txid = self.store.runs.current_txid()
                newest = (
                    {"0": (txid, self.store.metas.get_meta(name, txid))} if txid else {"0": None}
                )
            for partition, entry in sorted(newest.items()):
                as_of, meta = entry if entry is not None else (None, None)
                lag, reason = lag_or_reason(spout, partition, meta)
                found.append(PartitionLag(
                    name, partition, as_of, None if lag is None else lag.count,
                    "tuples" if lag is None else lag.unit, reason if lag is None else lag.detail,
                ))  # fmt: skip
        return tuple(found)

    def _partition_metas(self, spout: str, *, opaque: bool) -> dict[str, tuple[int, Any] | None]:
        """Partition -> (txid, metadata) of its newest emitted batch, from ZooKeeper (for an
        opaque spout: its committed metadata when that is as new)."""
        state = self.store.partition_state(spout)
        newest: dict[str, tuple[int, Any] | None] = {}
        for partition, (txid, value) in state.newest_by_partition().items():
            if partition.startswith("__trident_"):
                continue  # the executor's own markers
            if opaque:
                newest[partition] = (txid, value.get("end") if isinstance(value, dict) else None)
            elif isinstance(value, dict) and value.get(_SKIPPED):
                newest[partition] = (txid, value.get("last"))
            else:
                newest[partition] = (txid, value)
        if opaque:
            for partition, committed in state.committed_all().items():
                committed = committed or {}
                best = newest.get(partition)
                if best is None or int(committed.get("txid", 0)) >= best[0]:
                    newest[partition] = (int(committed.get("txid", 0)), committed.get("meta"))
        return newest

    def _archived_partitions(self, spout: str, txid: int) -> dict[str, tuple[int, Any] | None]:
        """Partition -> (txid, metadata) from the ledger's archive of committed ``txid``."""
        assert self.ledger is not None
        archive = self.ledger.batch_meta(self.store.paths.topology, txid) or {}
        partitions = archive.get("spouts", {}).get(spout, {}).get("partitions") or {}
        return {str(p): (txid, meta) for p, meta in partitions.items()}
