"""A topology's status as data: :class:`TopologyStatus` (txids, batches, lag) and its text.

:class:`~airflow_trident.batch.status.StatusCollector` reads it from where the lifecycle leaves
its facts; ``airflow-trident status`` prints :meth:`TopologyStatus.format_text` and the UI view
renders :meth:`TopologyStatus.to_dict`.

Examples
--------
>>> from datetime import datetime, UTC
>>> t0 = datetime(2026, 11, 23, 22, 0, tzinfo=UTC)
>>> status = TopologyStatus(
...     topology="word_count", committed_txid=1, allocated_txid=2, collected_at=t0,
...     commits=(BatchStatus(1, "committed", attempt_id=1, committed_at=t0, records_in=10,
...                          keys_written={"word_counts": 12}),),
...     in_flight=(BatchStatus(2, "processing", attempt_id=1, since=t0),),
...     lag=(PartitionLag("sentences", "p0", 2, 490),))
>>> print(status.format_text())  # doctest: +NORMALIZE_WHITESPACE
topology word_count: committed txid 1, allocated txid 2, 1 batch in flight
in flight:
  txid 2  attempt 1  processing  since 2026-11-23 22:00:00 UTC (0.0 s ago)
last commits (newest first):
  txid 1  attempt 1  records in 10  keys written word_counts=12  process -  commit -
          committed 2026-11-23 22:00:00 UTC
lag (not yet emitted):
  sentences/p0: 490 after txid 2
>>> status.to_dict()["in_flight"][0]["phase"], status.to_dict()["lag"][0]["pending"]
('processing', 490)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

__all__ = ["PHASES", "BatchStatus", "PartitionLag", "RunStatus", "TopologyStatus"]

PHASES = ("allocated", "begun", "processing", "processed", "committing", "committed")
"""The phases of a txid, in lifecycle order."""


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _text(moment: datetime | None) -> str:
    return "-" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None or end < start:
        return None
    return round((end - start).total_seconds(), 3)


@dataclass(frozen=True)
class BatchStatus:
    """One txid: its phase and when it reached each step (``None``: unknown or not yet)."""

    txid: int
    phase: str
    attempt_id: int | None = None
    run_id: str | None = None
    """The run of the txid: for a committed one, the run that committed it."""
    replay_run_id: str | None = None
    """A later run bound to a committed txid (a replay, which commits nothing)."""
    since: datetime | None = None
    """When the current phase started."""
    begun_at: datetime | None = None
    process_started_at: datetime | None = None
    processed_at: datetime | None = None
    commit_started_at: datetime | None = None
    committed_at: datetime | None = None
    records_in: int | None = None
    keys_written: Mapping[str, int] | None = None

    @property
    def process_seconds(self) -> float | None:
        """From the current attempt's start to its manifest (else to its commit's start)."""
        return _seconds(self.process_started_at, self.processed_at or self.commit_started_at)

    @property
    def commit_seconds(self) -> float | None:
        """From the commit's start to the ledger row."""
        return _seconds(self.commit_started_at, self.committed_at)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: datetimes as ISO 8601 strings, with the two durations."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = _iso(value) if isinstance(value, datetime) else value
        out["keys_written"] = None if self.keys_written is None else dict(self.keys_written)
        out["process_seconds"] = self.process_seconds
        out["commit_seconds"] = self.commit_seconds
        return out


@dataclass(frozen=True)
class PartitionLag:
    """Tuples of one source partition not yet emitted, after the batch of ``as_of_txid``."""

    spout: str
    partition: str
    as_of_txid: int | None
    pending: int | None
    unit: str = "tuples"
    """What ``pending`` counts: tuples, or (a file log) files."""
    detail: str | None = None
    """More of the backlog (a file log: its bytes); with no ``pending``, why the spout could
    not tell (its error), if it failed to."""

    def text(self) -> str:
        """``490``, ``3 files (12,345 bytes)``, ``unknown`` or ``unknown (why)``."""
        if self.pending is None:
            return "unknown" + (f" ({self.detail})" if self.detail else "")
        shown = str(self.pending) if self.unit == "tuples" else f"{self.pending} {self.unit}"
        return shown + (f" ({self.detail})" if self.detail else "")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class TopologyStatus:
    """Everything ``airflow-trident status`` shows for one topology."""

    topology: str
    committed_txid: int
    allocated_txid: int
    collected_at: datetime
    in_flight: tuple[BatchStatus, ...] = ()
    """Txids allocated and not committed, in txid order."""
    commits: tuple[BatchStatus, ...] = ()
    """The last commits (from the ledger), in txid order."""
    lag: tuple[PartitionLag, ...] = ()
    dag_id: str | None = None
    notes: tuple[str, ...] = field(default=())
    """What could not be read (no ledger, no staging root...)."""

    @property
    def batches(self) -> tuple[BatchStatus, ...]:
        """The last commits and the batches in flight, in txid order (the timeline's rows)."""
        return tuple(sorted((*self.commits, *self.in_flight), key=lambda b: b.txid))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``airflow-trident status --json``, the view's ``/api`` route)."""
        return {
            "topology": self.topology,
            "dag_id": self.dag_id,
            "committed_txid": self.committed_txid,
            "allocated_txid": self.allocated_txid,
            "collected_at": _iso(self.collected_at),
            "in_flight": [b.to_dict() for b in self.in_flight],
            "commits": [b.to_dict() for b in self.commits],
            "lag": [lag.to_dict() for lag in self.lag],
            "notes": list(self.notes),
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as indented JSON."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def format_text(self) -> str:
        """The human report (see the module's example)."""
        count = len(self.in_flight)
        title = f"topology {self.topology}" + (f" (DAG {self.dag_id})" if self.dag_id else "")
        lines = [
            f"{title}: committed txid {self.committed_txid}, allocated txid "
            f"{self.allocated_txid}, {count} batch{'' if count == 1 else 'es'} in flight"
        ]
        if self.in_flight:
            lines.append("in flight:")
            for b in self.in_flight:
                ago = _seconds(b.since, self.collected_at)
                when = f"since {_text(b.since)}" + ("" if ago is None else f" ({ago:.1f} s ago)")
                run = f"  run {b.run_id}" if b.run_id else ""
                attempt = "-" if b.attempt_id is None else b.attempt_id
                lines.append(f"  txid {b.txid}  attempt {attempt}  {b.phase}  {when}{run}")
        if self.commits:
            lines.append("last commits (newest first):")
            for b in reversed(self.commits):
                keys = ", ".join(f"{k}={v}" for k, v in sorted((b.keys_written or {}).items()))
                lines.append(
                    f"  txid {b.txid}  attempt {b.attempt_id}  records in {b.records_in}  keys "
                    f"written {keys or '-'}  process {_duration(b.process_seconds)}  commit "
                    f"{_duration(b.commit_seconds)}"
                )
                run = f"  run {b.run_id}" if b.run_id else ""
                replay = f"  replayed by {b.replay_run_id}" if b.replay_run_id else ""
                lines.append(f"          committed {_text(b.committed_at)}{run}{replay}")
        if self.lag:
            lines.append("lag (not yet emitted):")
            for lag in self.lag:
                pending = lag.text()
                after = "before the first batch" if lag.as_of_txid is None else (
                    f"after txid {lag.as_of_txid}")  # fmt: skip
                lines.append(f"  {lag.spout}/{lag.partition}: {pending} {after}")
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)


def _duration(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.2f} s"


@dataclass(frozen=True)
class RunStatus:
    """What one run (a DAG run) is to its topology: the txid ZooKeeper binds it to, from the
    moment its begin binds it, and that batch's phase (the run's Trident tab in the UI).

    Examples
    --------
    >>> from datetime import datetime, UTC
    >>> t0 = datetime(2026, 11, 23, 22, 0, tzinfo=UTC)
    >>> RunStatus("manual__1", "word_count", 3, t0).summary()
    'not bound to a txid yet: its begin has not run'
    >>> RunStatus("manual__2", "word_count", 3, t0, txid=4,
    ...           batch=BatchStatus(4, "processing", attempt_id=1)).summary()
    'txid 4 · processing · attempt 1'
    >>> replay = BatchStatus(2, "committed", attempt_id=1, run_id="manual__0",
    ...                      replay_run_id="manual__3")
    >>> RunStatus("manual__3", "word_count", 3, t0, txid=2, batch=replay).summary()
    'replay of txid 2 (committed by manual__0: changes nothing)'
    """

    run_id: str
    topology: str
    committed_txid: int
    collected_at: datetime
    txid: int | None = None
    """The txid the run is bound to (``None``: its begin has not run, or the binding of an old
    txid was rotated away)."""
    batch: BatchStatus | None = None
    """That txid's status; for a committed one, ``run_id`` is the run that committed it."""
    dag_id: str | None = None

    @property
    def is_replay(self) -> bool:
        """Whether another run committed the txid (this run replays it, changing nothing)."""
        committer = None if self.batch is None else self.batch.run_id
        return (
            self.batch is not None
            and self.batch.phase == "committed"
            and committer is not None
            and committer != self.run_id
        )

    def summary(self) -> str:
        """One line: ``txid 7 · processing · attempt 1``, or why there is none."""
        if self.txid is None or self.batch is None:
            return "not bound to a txid yet: its begin has not run"
        if self.is_replay:
            return (f"replay of txid {self.txid} (committed by {self.batch.run_id}: changes "
                    f"nothing)")  # fmt: skip
        attempt = "" if self.batch.attempt_id is None else f" · attempt {self.batch.attempt_id}"
        return f"txid {self.txid} · {self.batch.phase}{attempt}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the view's ``/api/dags/<dag_id>/runs/<run_id>`` route)."""
        return {
            "run_id": self.run_id,
            "topology": self.topology,
            "dag_id": self.dag_id,
            "txid": self.txid,
            "committed_txid": self.committed_txid,
            "collected_at": _iso(self.collected_at),
            "summary": self.summary(),
            "replay": self.is_replay,
            "batch": None if self.batch is None else self.batch.to_dict(),
        }
