"""Faults under a real Airflow scheduler: pipelined batches, killed commits, restarted servers,
cleared runs and a backfill — the final state must equal the reference, key by key.

One run of :func:`run_scheduler_faults`:

* starts a private ZooKeeper and PostgreSQL (:mod:`~tests.harness.servers`; the DAG's
  ``trident_zookeeper`` connection and its ``state_conn_id``, a ``postgres`` connection, point
  at them, so restarting them disturbs nobody), a Spark Connect server
  (:mod:`~tests.harness.connect`), and a real Airflow — scheduler, DAG processor,
  triggerer, API server, LocalExecutor (:mod:`~tests.harness.scheduler`);
* runs the DAG of :func:`~tests.harness.topologies.scheduler_word_count` (per word: a
  transactional count and an opaque sum, thousands of keys) with ``process_mode="connect"``,
  ``max_active_batches`` runs at once and retries on, and triggers ``batches`` runs at once;
* while they run, injects the faults of :data:`FAULT_KINDS` at moments drawn from
  ``random.Random(seed)`` (each planned at a committed txid, :func:`plan_faults`);
* waits for every run to end (bounded; on timeout the task states are dumped), then checks:
  every state key equals the reference computed from the source data of txids ``1..batches``;
  the commit ledger holds txids ``1..batches`` without holes; ZooKeeper allocated and committed
  exactly ``batches`` txids; the triggered runs are txids ``1..batches``; a cleared run kept its
  txid; each backfill run replayed its txid and changed nothing (``applied`` false).

Operator actions the harness had to take beyond the plan (clearing a run that failed for a
reason other than an injected one, or un-sticking runs that could never start) are listed; the
ones that mean a run could not finish by itself are *problems*: they fail the run like a
difference does.

Replay a schedule with (timing-dependent details, such as which run is cleared, may differ)::

    python -m tests.harness.scheduler_faults --batches 50 --seed S

It needs ``TRIDENT_PG_URL`` (the PostgreSQL where Airflow's metadata database is created:
``eval "$(bash scripts/services.sh env)"``); ``scripts/faults-scheduler.sh`` runs the long one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from sqlalchemy.engine import make_url

from airflow_trident.batch.order import QUEUED_GRACE_S, STALL_CHECK_S
from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import TridentError
from tests.harness.connect import running_connect_server
from tests.harness.scheduler import AirflowCluster, running_airflow
from tests.harness.servers import PrivatePostgres, PrivateZooKeeper
from tests.harness.topologies import POISON_ENV, SCHEDULER_DATA_ENV, SchedulerData

__all__ = [
    "FAULT_KINDS",
    "PlannedFault",
    "SchedulerFaultConfig",
    "SchedulerFaultReport",
    "SlotHolders",
    "main",
    "plan_faults",
    "run_scheduler_faults",
]

DAG_ID = "trident_scheduler_faults"
ZK_ROOT = "/trident_scheduler_faults"
TOPOLOGY_REF = "tests.harness.topologies:scheduler_word_count"
STATES = ("counts", "sums")
_FINISHED = frozenset({"success", "failed"})
_ZK_CONNECTED = "Zookeeper connection established"  # kazoo's log line, in the task's log
_EXTRA_ROWS_BATCHES = 5  # data beyond the last txid: a txid too many would read (and show) it

FAULT_KINDS: dict[str, str] = {
    "commit_kill": "SIGKILL of the process of the running commit task of the next txid",
    "zookeeper_restart": "kill -9 of the private ZooKeeper, restarted on its port and data",
    "postgres_restart": "kill -9 of the private PostgreSQL (state database), restarted",
    "clear_committed": "the UI's Clear (REST clearTaskInstances) of a random committed run",
    "failed_run": "a run whose process fails on every try (txid poisoned), then cleared (REST)",
    "backfill": "airflow-trident backfill over a random range of committed txids",
}

#: Faults that act on committed txids (new runs, or committed runs run again): they still apply
#: once every run has ended (a fast layout, express, can commit all batches before their turn).
_ON_COMMITTED = frozenset({"clear_committed", "backfill"})
# a server restart needs no run in flight: one planned after every run ended lands anyway (an
# express run can commit every batch before a late fault's turn); the check after it still
# reads every state and the ledger through the restarted servers
_ANY_TIME = frozenset({"zookeeper_restart", "postgres_restart"})

DAG_FILE = """
from datetime import timedelta
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "{topology_ref}",
    dag_id="{dag_id}",
    schedule=None,
    max_active_batches={max_active},
    process_mode="connect",
    spark_connect_conn_id="faults_connect",
    zookeeper_conn_id="faults_zookeeper",
    state_conn_id="faults_state",
    staging_root="{staging}",
    layout="{layout}",
    retries={retries},
    retry_delay=timedelta(seconds={retry_delay_s}),
)
"""


@dataclass(frozen=True)
class SchedulerFaultConfig:
    """One fault run.

    Parameters
    ----------
    seed:
        Seeds the source data and every random choice.
    batches:
        Runs triggered (txids ``1..batches``).
    commit_kills, committed_clears, failed_runs, zookeeper_restarts, postgres_restarts:
        How many faults of each kind.
    backfill_txids:
        Length of the backfilled txid range (0: no backfill).
    max_active_batches:
        The DAG's ``max_active_batches``.
    parallelism:
        LocalExecutor worker processes.
    retries, retry_delay_s:
        Every task's retries.
    take, partitions, vocabulary:
        Source data (:class:`~tests.harness.topologies.SchedulerData`).
    timeout_s:
        Bound of the whole run once Airflow is up (default ``600 + 30 * batches``).
    stall_s:
        No commit for this long while runs remain: look for runs that cannot finish by
        themselves (a failed run, a cleared run that cannot start).
    layout:
        The DAG's ``layout``: ``"standard"`` (``batch.begin`` ... ``batch.commit``) or
        ``"express"`` (the whole batch is one task, ``batch.run``, that resumes at the step it
        died in: its commit kill is a kill of ``batch.run`` in its commit step).
    """

    seed: int
    batches: int = 50
    commit_kills: int = 2
    committed_clears: int = 3
    failed_runs: int = 1
    zookeeper_restarts: int = 1
    postgres_restarts: int = 1
    backfill_txids: int = 3
    max_active_batches: int = 3
    parallelism: int = 4
    retries: int = 4
    retry_delay_s: int = 3
    take: int = 8
    partitions: int = 3
    vocabulary: int = 4000
    timeout_s: float | None = None
    stall_s: float = 90.0
    layout: str = "standard"

    @property
    def begin_task(self) -> str:
        """The task whose XCom holds a run's txid (``batch.run``'s is under key ``begin``)."""
        return "batch.run" if self.layout == "express" else "batch.begin"

    @property
    def commit_task(self) -> str:
        """The task that commits a batch."""
        return "batch.run" if self.layout == "express" else "batch.commit"

    @property
    def deadline_s(self) -> float:
        """:attr:`timeout_s`, or its default."""
        return self.timeout_s if self.timeout_s is not None else 600.0 + 30.0 * self.batches

    def data(self) -> SchedulerData:
        """The source data (a few batches more than :attr:`batches`)."""
        return SchedulerData(
            seed=self.seed,
            batches=self.batches + _EXTRA_ROWS_BATCHES,
            partitions=self.partitions,
            take=self.take,
            vocabulary=self.vocabulary,
        )


@dataclass(frozen=True)
class PlannedFault:
    """A fault to inject once ``at_committed`` txids are committed; ``value`` is its random
    parameter (the delay before a kill, a server's downtime, in seconds)."""

    kind: str
    at_committed: int
    value: float = 0.0


def plan_faults(rng: random.Random, config: SchedulerFaultConfig) -> list[PlannedFault]:
    """The faults of ``config`` at random committed txids, in the order they fire.

    A failed run is planned early enough that ``max_active_batches`` later runs exist to take
    its slot; a backfill once its range can be committed.

    >>> config = SchedulerFaultConfig(seed=1, batches=10)
    >>> for fault in plan_faults(random.Random(1), config)[:3]:
    ...     print(fault)
    PlannedFault(kind='failed_run', at_committed=1, value=0.0)
    PlannedFault(kind='commit_kill', at_committed=2, value=0.17)
    PlannedFault(kind='clear_committed', at_committed=2, value=0.0)
    >>> plan_faults(random.Random(1), config) == plan_faults(random.Random(1), config)
    True
    """
    last = max(2, config.batches - 2)
    faults: list[PlannedFault] = []

    def add(kind: str, count: int, low: int, high: int, value: tuple[float, float]) -> None:
        for _ in range(count):
            at = rng.randint(low, max(low, high))
            faults.append(PlannedFault(kind, at, round(rng.uniform(*value), 2)))

    # a commit to kill must still be ahead when its turn comes: the standard layout's two txids
    # before the end (the harness polls; two commits can land between two looks), the express
    # layout's, which commits each batch right after processing it, at the first commit, before
    # the failed run (its clears and the slots given back kept the harness busy while every
    # remaining batch committed: CI, seed 76522, 2026-12-07)
    kill_last = 1 if config.layout == "express" else max(1, last - 1)
    add("commit_kill", config.commit_kills, 1, kill_last, (0.0, 0.3))
    add("zookeeper_restart", config.zookeeper_restarts, 2, last, (1.0, 6.0))
    add("postgres_restart", config.postgres_restarts, 2, last, (1.0, 6.0))
    add("clear_committed", config.committed_clears, 1, last, (0.0, 0.0))
    # max_active_batches runs after the failed one exist to fill the slots (the UI case)
    failed_last = max(1, config.batches - 2 * config.max_active_batches - 1)
    add("failed_run", config.failed_runs, 1, failed_last, (0.0, 0.0))
    if config.backfill_txids:
        add("backfill", 1, config.backfill_txids, last, (0.0, 0.0))
    order = list(FAULT_KINDS)
    return sorted(faults, key=lambda f: (f.at_committed, order.index(f.kind)))


@dataclass
class SchedulerFaultReport:
    """What one fault run did and found (``summary()`` prints it)."""

    config: SchedulerFaultConfig
    topology: str = ""
    wall_s: float = 0.0
    planned: list[PlannedFault] = field(default_factory=list)
    injected: list[tuple[str, str]] = field(default_factory=list)
    not_injected: list[tuple[str, str]] = field(default_factory=list)
    cleared_committed: list[tuple[str, int]] = field(default_factory=list)
    cleared_failed: list[tuple[str, int | None, str]] = field(default_factory=list)
    yielded: list[tuple[str, int | None]] = field(default_factory=list)
    backfilled: list[int] = field(default_factory=list)
    backfill_runs: dict[str, str] = field(default_factory=dict)
    backfill_output: str = ""
    keys_compared: dict[str, int] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ledger_txids: list[int] = field(default_factory=list)
    differences_committed: tuple[int, int] | None = None
    run_states: dict[str, str] = field(default_factory=dict)

    @property
    def all_injected(self) -> bool:
        """Every planned fault was injected (as many of each kind as planned)."""
        planned = Counter(fault.kind for fault in self.planned)
        return not self.not_injected and Counter(k for k, _ in self.injected) == planned

    @property
    def ok(self) -> bool:
        """Every planned fault injected, no difference from the reference and no problem."""
        return (
            self.all_injected
            and not self.differences
            and not self.problems
            and bool(self.keys_compared)
        )

    def summary(self) -> str:
        """The report, as the CLI prints it."""
        c = self.config
        kinds = Counter(kind for kind, _ in self.injected)
        ledger = self.ledger_txids
        expected = list(range(1, c.batches + 1))
        holes = sorted(set(expected) - set(ledger))
        lines = [
            f"seed={c.seed} batches={c.batches} max_active_batches={c.max_active_batches} "
            f"retries={c.retries} topology={self.topology} wall={self.wall_s:.1f}s",
            f"faults planned {len(self.planned)}, injected {len(self.injected)}: "
            + (", ".join(f"{k}={kinds[k]}" for k in FAULT_KINDS if kinds[k]) or "none"),
            *(f"  {kind}: {detail}" for kind, detail in self.injected),
            *(f"  NOT INJECTED {kind}: {why}" for kind, why in self.not_injected),
            "runs cleared (committed): "
            + (", ".join(f"{r} (txid {t})" for r, t in self.cleared_committed) or "none"),
            "runs cleared (failed): "
            + (", ".join(f"{r} (txid {t}; {why})" for r, t, why in self.cleared_failed) or "none"),
            "runs that gave their slot back (failed at once: the txid they waited for could not "
            "progress), cleared after it committed: "
            + (", ".join(f"txid {t}" for _, t in self.yielded) or "none"),
            f"backfilled txids: {self.backfilled or 'none'}; runs: "
            + (", ".join(f"{r}={s}" for r, s in sorted(self.backfill_runs.items())) or "none"),
            f"ledger txids: {len(ledger)} rows, max {max(ledger, default=0)}, holes: "
            f"{holes or 'none'}, extra: {sorted(set(ledger) - set(expected)) or 'none'}",
            "keys compared: "
            + (", ".join(f"{s}={n}" for s, n in self.keys_compared.items()) or "none")
            + f"; differences: {len(self.differences)}",
            *(f"  DIFF {d}" for d in self.differences[:12]),
            *(
                [f"  ({len(self.differences) - 12} more differences)"]
                if len(self.differences) > 12 else []
            ),
            *(
                [f"  against the reference of the {self.differences_committed[0]} txids "
                 f"committed instead: {self.differences_committed[1]} differences"]
                if self.differences_committed else []
            ),
            *(f"  NOTE {n}" for n in self.notes),
            *(f"  PROBLEM {p}" for p in self.problems),
            f"{'OK' if self.ok else 'FAILED'} (seed={c.seed})",
        ]  # fmt: skip
        return "\n".join(lines)


#: How long the same runs may hold every slot while the next txid's run is queued before the
#: run is *stuck*: a waiting task's first look at txid-1's runs (STALL_CHECK_S), the grace a
#: queued run gets (QUEUED_GRACE_S), the look that gives the slot back, and the scheduler's
#: noticing the run failed (two looks' worth on shared cores).
SLOT_HOLD_LIMIT_S = QUEUED_GRACE_S + 4 * STALL_CHECK_S


@dataclass
class SlotHolders:
    """Whether the runs holding every slot while the next txid's run is queued keep them.

    The product's waiting tasks give their slot back within about ``QUEUED_GRACE_S`` and a look
    or two of seeing txid-1's run queued (:mod:`airflow_trident.batch.order`), and the
    scheduler starts a queued run in *its* order (cleared runs first, then by ``run_after``,
    the trigger time), not in txid order: a freed slot can go to another queued run (the
    replay of a cleared committed run, or a later txid cleared at the same time, triggered a
    moment earlier), and the next txid's run waits for the next hand-over. That is the product
    working; *stuck* is the same runs holding every slot for longer than ``limit_s``. A change
    of holders (one gave its slot back, or ended) starts the clock anew.

    >>> slots = SlotHolders(limit_s=70.0)
    >>> slots.stuck(["r5", "r6", "r7"], now=0.0), slots.stuck(["r7", "r6", "r5"], now=69.0)
    (False, False)
    >>> slots.stuck(["r5", "r6", "r7"], now=71.0)
    True
    >>> slots.stuck(["r6", "r7", "r8"], now=72.0)  # r5 gave its slot back: progress
    False
    >>> slots.reset()
    >>> slots.stuck(["r6", "r7", "r8"], now=150.0)  # after a commit, a new wait starts
    False
    """

    limit_s: float = SLOT_HOLD_LIMIT_S
    holders: frozenset[str] = frozenset()
    since: float | None = None

    def stuck(self, holders: Sequence[str], now: float) -> bool:
        """Whether ``holders`` (the running runs, every slot) have held them for ``limit_s``."""
        current = frozenset(holders)
        if self.since is None or current != self.holders:
            self.holders, self.since = current, now
            return False
        return now - self.since > self.limit_s

    def reset(self) -> None:
        """No wait for slots now (a commit, or a free slot)."""
        self.holders, self.since = frozenset(), None


# ----------------------------------------------------------------------------------- the driver


class _Driver:
    """Plays the planned faults against a running Airflow and records what happened."""

    def __init__(
        self,
        config: SchedulerFaultConfig,
        rng: random.Random,
        af: AirflowCluster,
        zk: PrivateZooKeeper,
        pg: PrivatePostgres,
        store: CoordinatorStore,
        poison: Path,
        report: SchedulerFaultReport,
        echo: Callable[[str], None],
    ) -> None:
        self.config = config
        self.rng = rng
        self.af = af
        self.zk = zk
        self.pg = pg
        self.store = store
        self.poison = poison
        self.report = report
        self.echo = echo
        self.started = time.monotonic()
        self.deadline = self.started + config.deadline_s
        self.live_runs: list[str] = []
        self.known_txids: dict[str, int] = {}
        self.cleared: dict[str, int] = {}  # run -> txid it had when cleared
        self.handling: set[str] = set()  # failed on purpose, not cleared yet
        self.slots = SlotHolders()  # who holds every slot while the next txid's run waits
        self._looked_at_stall = 0.0
        self.yielded: dict[str, int] = {}  # failed at once, waiting for a stuck txid: run -> txid
        self._looked_at_failures = 0.0
        self._committed = 0
        self._progress_at = time.monotonic()

    # -- observation
    def elapsed(self) -> str:
        return f"t+{time.monotonic() - self.started:6.1f}s"

    def log(self, text: str) -> None:
        self.echo(f"[{self.elapsed()}] {text}")

    def committed(self) -> int:
        """ZooKeeper's committed txid (the last one read while ZooKeeper is down)."""
        try:
            value = self.store.commits.committed_txid()
        except (KazooException, TridentError):
            return self._committed
        if value != self._committed:
            self._committed = value
            self._progress_at = time.monotonic()
            self.slots.reset()  # a commit ends a wait for slots; a later one starts anew
        return value

    def txids(self) -> dict[str, int]:
        """run id -> txid, from the begin tasks' XComs (kept for runs cleared since).

        Express: ``batch.run``'s ``begin`` XCom (pushed once the batch is processed, before
        its commit); a triggered run not known yet (still processing, or failed processing)
        is looked up in ZooKeeper, where its begin bound it to its txid."""
        for run_id, value in self.begin_xcoms().items():
            if isinstance(value, dict) and "txid" in value:
                self.known_txids[run_id] = int(value["txid"])
        if self.config.layout == "express":
            for run_id in self.live_runs:
                if run_id in self.known_txids:
                    continue
                try:
                    txid = self.store.runs.txid_for_run(run_id)
                except (KazooException, TridentError):
                    break
                if txid is not None:
                    self.known_txids[run_id] = txid
        return dict(self.known_txids)

    def begin_xcoms(self) -> dict[str, object]:
        """The begin summary of each run whose current try has begun (express: processed)."""
        if self.config.layout != "express":
            return self.af.return_values(DAG_ID, "batch.begin")
        rows = self.af.query(
            "SELECT run_id, value FROM xcom WHERE dag_id = %s AND task_id = %s "
            "AND key = 'begin' AND map_index = -1",
            (DAG_ID, "batch.run"),
        )
        return {r: json.loads(v) if isinstance(v, str) else v for r, v in rows}

    def commits(self) -> dict[str, dict[str, object]]:
        """run id -> the commit summary (``applied``...) its commit task returned."""
        values = self.af.return_values(DAG_ID, self.config.commit_task)
        if self.config.layout == "express":
            values = {r: v.get("committed") for r, v in values.items() if isinstance(v, dict)}
        return {r: v for r, v in values.items() if isinstance(v, dict)}

    def run_states(self) -> dict[str, str]:
        return {r.run_id: r.state for r in self.af.runs(DAG_ID)}

    def tick(self) -> None:
        """Between steps: fail fast if Airflow died or the time is up; un-stick stalled runs."""
        self.af.check_alive()
        if time.monotonic() > self.deadline:
            raise TimeoutError(f"fault run not finished after {self.config.deadline_s:g}s")
        self.committed()
        if time.monotonic() - self._looked_at_failures > 3.0:
            self._looked_at_failures = time.monotonic()
            self.handle_yielded()
        stalled = time.monotonic() - self._progress_at > self.config.stall_s
        if stalled and time.monotonic() - self._looked_at_stall > 5.0:
            # a look every 5 s while no commit comes: who holds the slots, and for how long
            self._looked_at_stall = time.monotonic()
            if self.unstick():
                self._progress_at = time.monotonic()

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(min(0.5, max(0.0, end - time.monotonic())))

    # -- the faults
    def play(self, plan: Sequence[PlannedFault]) -> None:
        for fault in plan:
            while self.committed() < fault.at_committed and not self.all_done():
                self.tick()
                time.sleep(0.5)
            if self.all_done() and fault.kind not in _ON_COMMITTED | _ANY_TIME:
                self._skip(fault.kind, "every run had ended")
                continue
            self.log(f"fault {fault.kind} (planned at committed txid {fault.at_committed})")
            getattr(self, f"_{fault.kind}")(fault)

    def _inject(self, kind: str, detail: str) -> None:
        self.report.injected.append((kind, detail))
        self.log(f"  injected {kind}: {detail}")

    def _skip(self, kind: str, why: str) -> None:
        self.report.not_injected.append((kind, why))
        self.log(f"  NOT injected {kind}: {why}")

    def _commit_kill(self, fault: PlannedFault) -> None:
        """SIGKILL the task process of the running commit of txid committed+1, ``fault.value``
        seconds after it connected to ZooKeeper (its apply takes about half a second)."""
        give_up = time.monotonic() + 180
        while time.monotonic() < give_up:
            target = self.committed() + 1
            runs = {r for r, t in self.txids().items() if t == target}
            found = [
                p for p in self.af.task_processes(DAG_ID, self.config.commit_task)
                if p[0] in runs
            ]  # fmt: skip
            if found and self._kill_mid_commit(fault, target, *found[0]):
                return
            if self.all_done():
                break
            self.tick()
            time.sleep(0.05)
        self._skip(
            "commit_kill",
            f"no running commit of the next txid within 180s (every run ended: {self.all_done()})",
        )

    def _kill_mid_commit(
        self, fault: PlannedFault, txid: int, run_id: str, try_number: int, pid: int
    ) -> bool:
        task = self.config.commit_task
        log = self.task_log(run_id, task, try_number)
        connected = time.monotonic() + (60 if self.config.layout == "express" else 20)
        while not self._in_commit(log.read_text(errors="replace") if log.exists() else "", txid):
            if time.monotonic() > connected or not Path(f"/proc/{pid}").exists():
                return False
            time.sleep(0.02)
        time.sleep(fault.value)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        time.sleep(1.0)  # let the supervisor write the try's last lines
        self._inject(
            "commit_kill",
            f"run {run_id} txid {txid} try {try_number}: kill -9 {pid} of {task} "
            f"{fault.value:.2f}s after it {self._commit_start}; its last log line: "
            f"{self.last_event(run_id, task, try_number)!r}",
        )
        return True

    @property
    def _commit_start(self) -> str:
        if self.config.layout == "express":
            return "reached its commit step (processed, resumed or woken for the commit)"
        return "connected to ZooKeeper"

    def _in_commit(self, text: str, txid: int) -> bool:
        """Whether a commit task's log ``text`` shows it at the start of its commit. Standard:
        connected to ZooKeeper. Express (``batch.run``, txid-1 committed): after its last
        connection to ZooKeeper, it processed txid or resumed it at its commit; or it resumes
        after deferring for txid-1's commit."""
        if self.config.layout != "express":
            return _ZK_CONNECTED in text
        head, connected, tail = text.rpartition(_ZK_CONNECTED)
        if not connected:
            return False
        return (
            (f"txid {txid} · attempt" in tail and "processed:" in tail)
            or f"resumes txid {txid} at its commit" in tail
            or f"txid {txid} waits for txid {txid - 1} (committed:" in head
        )

    def task_log(self, run_id: str, task_id: str, try_number: int) -> Path:
        return (
            self.af.home.path / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}"
            / f"task_id={task_id}" / f"attempt={try_number}.log"
        )  # fmt: skip

    def last_event(self, run_id: str, task_id: str, try_number: int) -> str:
        """What try ``try_number`` of a task logged last before it was killed."""
        path = self.task_log(run_id, task_id, try_number)
        events = []
        for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
            with contextlib.suppress(ValueError, AttributeError):
                event = str(json.loads(line).get("event", ""))
                if "terminated by signal" not in event:
                    events.append(event)
        return events[-1][:160] if events else "(no log)"

    def _restart(self, kind: str, server: PrivateZooKeeper | PrivatePostgres, down: float) -> None:
        before = self.committed()
        pid = server.pid
        server.kill()
        self.sleep(down)
        server.start()
        self._inject(kind, f"kill -9 {pid}, down {down:.1f}s, restarted (committed {before})")

    def _zookeeper_restart(self, fault: PlannedFault) -> None:
        self._restart("zookeeper_restart", self.zk, fault.value)

    def _postgres_restart(self, fault: PlannedFault) -> None:
        self._restart("postgres_restart", self.pg, fault.value)

    def _clear_committed(self, fault: PlannedFault) -> None:
        """The UI's Clear of a random run whose txid is committed and which succeeded (a run
        whose commit is in may still be running its success task: it is given two minutes)."""
        give_up = time.monotonic() + 120
        while True:
            committed = self.committed()
            states = self.run_states()
            txids = self.txids()
            candidates = sorted(
                r
                for r in self.live_runs
                if states.get(r) == "success" and 0 < txids.get(r, 0) <= committed
                and r not in self.cleared
            )  # fmt: skip
            if candidates or time.monotonic() > give_up or self.all_done():
                break
            self.tick()
            time.sleep(0.5)
        if not candidates:
            self._skip("clear_committed", f"no committed run to clear (committed {committed})")
            return
        run_id = self.rng.choice(candidates)
        tasks = self.af.clear_run(DAG_ID, run_id)
        self.cleared[run_id] = txids[run_id]
        self.report.cleared_committed.append((run_id, txids[run_id]))
        self._inject(
            "clear_committed",
            f"run {run_id} txid {txids[run_id]} (committed {committed}; {len(tasks)} tasks)",
        )

    def _failed_run(self, fault: PlannedFault) -> None:
        """Poison the next txid to begin; wait for its run to fail; un-poison; clear it."""
        try:
            target = self.store.runs.current_txid() + 1
        except (KazooException, TridentError) as error:
            self._skip("failed_run", f"ZooKeeper unreadable: {error}")
            return
        if target > self.config.batches:
            self._skip("failed_run", f"txid {target} beyond the last batch")
            return
        self.poison.write_text(f"{target}\n")
        self.log(f"  txid {target} poisoned ({self.poison})")
        give_up = time.monotonic() + 600
        failed_run = None
        while failed_run is None and time.monotonic() < give_up:
            states = self.run_states()
            runs = [r for r, t in self.txids().items() if t == target]
            failed_run = next((r for r in runs if states.get(r) == "failed"), None)
            if failed_run is None:
                self.tick()
                time.sleep(0.5)
        self.poison.write_text("")
        if failed_run is None:
            self._skip("failed_run", f"the run of txid {target} did not fail within 600s")
            return
        self.handling.add(failed_run)
        # An operator notices the failure a little later: by then the scheduler has started
        # other runs in its slot (an immediate clear races the scheduler for it).
        noticed = time.monotonic() + 60
        running: list[str] = []
        while time.monotonic() < noticed:
            states = self.run_states()
            running = sorted(r for r, s in states.items() if s == "running")
            if len(running) >= self.config.max_active_batches or "queued" not in states.values():
                break
            self.tick()
            time.sleep(0.5)
        waiting = {r: self.known_txids.get(r) for r in running}
        self._inject(
            "failed_run",
            f"run {failed_run} txid {target} failed (process poisoned); cleared while runs "
            f"{waiting} were running",
        )
        self.af.clear_run(DAG_ID, failed_run)
        self.handling.discard(failed_run)
        self.cleared[failed_run] = target
        self.report.cleared_failed.append((failed_run, target, "injected"))
        self.log(f"  cleared failed run {failed_run} (txid {target})")

    def _backfill(self, fault: PlannedFault) -> None:
        """``airflow-trident backfill`` over committed txids, as a user runs it."""
        committed = self.committed()
        length = self.config.backfill_txids
        if committed < length:
            self._skip("backfill", f"only {committed} txids committed")
            return
        first = self.rng.randint(1, committed - length + 1)
        last = first + length - 1
        before = {r.run_id for r in self.af.runs(DAG_ID)}
        command = [sys.executable, "-m", "airflow_trident.cli", "backfill", DAG_ID,
                   "--from-txid", str(first), "--to-txid", str(last)]  # fmt: skip
        done = subprocess.run(
            command,
            env=self.af.env,
            cwd=self.af.home.path,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        output = (done.stdout + done.stderr).strip()
        self.report.backfill_output = (
            f"$ airflow-trident backfill {DAG_ID} --from-txid {first} "
            f"--to-txid {last}\n(exit {done.returncode})\n{output}"
        )
        new = sorted({r.run_id for r in self.af.runs(DAG_ID)} - before - set(self.live_runs))
        self.report.backfilled = list(range(first, last + 1))
        self.report.backfill_runs = dict.fromkeys(new, "?")
        if done.returncode != 0:
            self.report.problems.append(
                f"backfill {first}..{last} exited {done.returncode}: {output[-1500:]}"
            )
        self._inject(
            "backfill", f"txids {first}..{last} (committed {committed}): runs {', '.join(new)}"
        )

    # -- waiting for the end
    def all_done(self) -> bool:
        states = self.run_states()
        wanted = [*self.live_runs, *self.report.backfill_runs]
        return all(states.get(r) in _FINISHED for r in wanted)

    def finish(self) -> None:
        """Wait for every run to end; clear runs that failed; report why they did."""
        while True:
            self.tick()
            states = self.run_states()
            wanted = [*self.live_runs, *self.report.backfill_runs]
            failed = [
                r for r in wanted
                if states.get(r) == "failed" and r not in self.yielded and r not in self.handling
                and self.yield_reason(r) is None
            ]  # fmt: skip
            if failed:
                for run_id in failed:
                    self.clear_failed(run_id)
                continue
            if all(states.get(r) == "success" for r in wanted):
                return
            time.sleep(1.0)

    def failure_reason(self, run_id: str) -> str:
        """The failed tasks of ``run_id`` and the last error line of each one's log."""
        tis = [t for t in self.af.task_instances(DAG_ID) if t.run_id == run_id]
        parts = []
        for ti in tis:
            if ti.state not in ("failed", "upstream_failed"):
                continue
            reason = ""
            if ti.state == "failed":
                logs = sorted(
                    (self.af.home.path / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}"
                     / f"task_id={ti.task_id}").glob("*.log")
                )  # fmt: skip
                if logs:
                    text = logs[-1].read_text(errors="replace")
                    errors = [ln for ln in text.splitlines() if "Error" in ln or "error" in ln]
                    reason = (errors[-1] if errors else text.splitlines()[-1:] or [""])[0]
            parts.append(f"{ti.task_id}={ti.state} try {ti.try_number} {reason[-300:]}")
        return "; ".join(parts) or "no failed task"

    def yield_reason(self, run_id: str) -> str | None:
        """The message of a task of ``run_id`` that failed at once because the txid it waited
        for could not progress (:mod:`airflow_trident.batch.order`), if one did."""
        folder = self.af.home.path / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}"
        for task in sorted(folder.glob("task_id=*")):
            tries = sorted(task.glob("attempt=*.log"), key=_attempt_number)
            if not tries:
                continue
            for line in tries[-1].read_text(errors="replace").splitlines():
                if "cannot commit before txid" in line or "cannot be emitted before txid" in line:
                    with contextlib.suppress(ValueError, TypeError, KeyError):
                        line = str(json.loads(line)["event"])  # Airflow's JSON log lines
                    return line[:300]
        return None

    def handle_yielded(self) -> None:
        """Note the runs that gave their slot back; clear them, as a user clearing every failed
        run would, once nothing else failed is outstanding and the next txid is one of theirs."""
        states = self.run_states()
        txids = self.txids()
        failed = [r for r in self.live_runs if states.get(r) == "failed"]
        for run_id in failed:
            if run_id in self.yielded or run_id in self.handling:
                continue
            reason = self.yield_reason(run_id)
            if reason is not None:
                self.yielded[run_id] = txids.get(run_id, 0)
                self.report.yielded.append((run_id, txids.get(run_id)))
                self.log(f"  run {run_id} (txid {txids.get(run_id)}) gave its slot back: {reason}")
        others = [r for r in failed if r not in self.yielded]
        if not self.yielded or others:
            return
        if self.committed() + 1 < min(self.yielded.values()):
            return
        for run_id, txid in sorted(self.yielded.items(), key=lambda item: item[1]):
            self.log(f"  clearing run {run_id} (txid {txid}), which gave its slot back")
            self.af.clear_run(DAG_ID, run_id)
            self.cleared.setdefault(run_id, txid)
        self.yielded.clear()

    def clear_failed(self, run_id: str) -> None:
        txid = self.txids().get(run_id)
        why = self.failure_reason(run_id)
        self.report.cleared_failed.append((run_id, txid, why))
        self.report.problems.append(
            f"run {run_id} (txid {txid}) failed by itself (retries exhausted), cleared: {why}"
        )
        self.log(f"run {run_id} (txid {txid}) failed: {why}; clearing it")
        self.af.clear_run(DAG_ID, run_id)
        self.cleared.setdefault(run_id, txid or 0)

    def task_states(self, runs: Sequence[str]) -> str:
        """``txid: task=state(try) ...`` of ``runs``, for the log."""
        by_run: dict[str, list[str]] = {r: [] for r in runs}
        for ti in self.af.task_instances(DAG_ID):
            if ti.run_id in by_run:
                name = ti.task_id.removeprefix("batch.")  # express: "run"
                by_run[ti.run_id].append(f"{name}={ti.state}({ti.try_number})")
        return "; ".join(
            f"txid {self.known_txids.get(r, '?')}: {' '.join(tasks)}" for r, tasks in by_run.items()
        )

    def unstick(self) -> bool:
        """No commit for ``stall_s``: find the run of the next txid and why it does not run;
        whether something was done (a clear), which starts the stall's clock anew.

        A run of the next txid that failed is cleared (an operator would). One that is queued
        while ``max_active_batches`` other runs hold every slot waits for one of them to give
        its slot back (:class:`SlotHolders`); when the same runs hold every slot for
        :data:`SLOT_HOLD_LIMIT_S`, it can never start: a problem; those runs are marked failed
        and cleared (the UI's "Mark as failed" and "Clear") so that it can.
        """
        committed = self.committed()
        target = committed + 1
        states = self.run_states()
        txids = self.txids()
        runs = [r for r, t in txids.items() if t == target]
        poisoned = str(target) in self.poison.read_text().split()  # failing on purpose
        for run_id in runs:
            if (
                states.get(run_id) == "failed"
                and not poisoned
                and run_id not in self.handling
                and run_id not in self.yielded
            ):
                self.log(f"no commit for {self.config.stall_s:g}s (committed {committed}); "
                         f"txid {target}'s run {run_id} failed")  # fmt: skip
                self.clear_failed(run_id)
                return True
        queued = [r for r in runs if states.get(r) == "queued"]
        running = sorted(r for r, s in states.items() if s == "running")
        if not queued or len(running) < self.config.max_active_batches:
            self.slots.reset()
            return False
        before = self.slots.holders
        if not self.slots.stuck(running, time.monotonic()):
            if self.slots.holders != before:
                holders = {r: txids.get(r) for r in running}
                self.log(f"no commit for {self.config.stall_s:g}s (committed {committed}): run "
                         f"{queued[0]} of txid {target} is queued while runs {holders} hold "
                         f"every slot: one should give its slot back")  # fmt: skip
            return False
        waiting = {r: txids.get(r) for r in running}
        problem = (
            f"stuck: run {queued[0]} of txid {target} (the next to commit) stays queued while "
            f"the max_active_batches={self.config.max_active_batches} running runs {waiting} "
            f"held every slot for {self.slots.limit_s:g}s, waiting for txid {target} (its emit "
            f"or its commit): it can never start. Worked around: those runs marked failed, "
            f"cleared"
        )
        self.report.problems.append(problem)
        self.log(f"PROBLEM {problem}")
        self.log(f"  task states: {self.task_states([*queued, *running])}")
        for run_id in running:
            self.af.set_run_state(DAG_ID, run_id, "failed")
        for run_id in running:
            self.af.clear_run(DAG_ID, run_id)
            self.cleared.setdefault(run_id, txids.get(run_id) or 0)
        self.slots.reset()
        return True


def _attempt_number(log: Path) -> int:
    digits = "".join(ch for ch in log.stem if ch.isdigit())
    return int(digits or 0)


# ------------------------------------------------------------------------------- verification


def _state_rows(pg: PrivatePostgres, table: str) -> dict[str, tuple[int, int]]:
    url = make_url(pg.url)
    with contextlib.closing(
        psycopg.connect(
            host=url.host, port=url.port, user=url.username, password=url.password,
            dbname=url.database, autocommit=True,
        )
    ) as conn:  # fmt: skip
        rows = conn.execute(f'SELECT word, val, txid FROM "{table}"').fetchall()
    return {str(w): (int(v), int(t)) for w, v, t in rows}


def _ledger_txids(pg: PrivatePostgres, topology: str) -> list[int]:
    url = make_url(pg.url)
    with contextlib.closing(
        psycopg.connect(
            host=url.host, port=url.port, user=url.username, password=url.password,
            dbname=url.database, autocommit=True,
        )
    ) as conn:  # fmt: skip
        rows = conn.execute(
            "SELECT txid FROM trident_commit_ledger WHERE topology = %s ORDER BY txid",
            (topology,),
        ).fetchall()
    return [int(r[0]) for r in rows]


def _reference(data: SchedulerData, txids: int, state: str) -> dict[str, int]:
    reference = data.source().reference(data.ends(txids))
    return {key[0]: value for key, value in reference[state].items()}


def _differences(
    seed: int, data: SchedulerData, txids: int, stored: dict[str, dict[str, tuple[int, int]]]
) -> list[str]:
    """Keys whose stored value is not the reference of txids ``1..txids``."""
    found = []
    for state in STATES:
        want, have = _reference(data, txids, state), stored[state]
        for key in sorted(set(want) | set(have)):
            got = have.get(key)
            if got is None or want.get(key) != got[0]:
                found.append(
                    f"seed={seed} state={state} key={key!r} expected={want.get(key)} "
                    f"got={None if got is None else got[0]} "
                    f"(written by txid {None if got is None else got[1]})"
                )
    return found


def _verify(driver: _Driver, data: SchedulerData) -> None:
    report, config = driver.report, driver.config
    n = config.batches
    stored = {state: _state_rows(driver.pg, f"{report.topology}_{state}") for state in STATES}
    for state in STATES:
        report.keys_compared[state] = len(set(stored[state]) | set(_reference(data, n, state)))
    report.differences = _differences(config.seed, data, n, stored)
    report.ledger_txids = _ledger_txids(driver.pg, report.topology)
    if report.ledger_txids != list(range(1, n + 1)):
        missing = sorted(set(range(1, n + 1)) - set(report.ledger_txids))
        extra = sorted(set(report.ledger_txids) - set(range(1, n + 1)))
        report.problems.append(f"ledger txids are not 1..{n}: missing {missing}, extra {extra}")
    allocated, committed = driver.store.runs.current_txid(), driver.store.commits.committed_txid()
    if committed != n and committed <= data.batches:
        # Which is wrong, the states or the number of txids? Compare with what was committed.
        report.differences_committed = (
            committed,
            len(_differences(config.seed, data, committed, stored)),
        )
    if (allocated, committed) != (n, n):
        report.problems.append(
            f"ZooKeeper allocated {allocated} and committed {committed} txids, not {n}"
        )
    txids = driver.txids()
    live = sorted(txids.get(r, 0) for r in driver.live_runs)
    if live != list(range(1, n + 1)):
        counts = Counter(live)
        report.problems.append(
            f"the {n} triggered runs are not txids 1..{n}: missing "
            f"{sorted(set(range(1, n + 1)) - set(live))}, repeated "
            f"{sorted(t for t, c in counts.items() if c > 1)}, beyond "
            f"{sorted(t for t in live if t > n)}"
        )
    for run_id, before in sorted(driver.cleared.items()):
        if before and txids.get(run_id) != before:
            report.problems.append(
                f"cleared run {run_id} had txid {before}, after its re-run {txids.get(run_id)}"
            )
    commits = driver.commits()
    for run_id, txid in report.cleared_committed:
        applied = (commits.get(run_id) or {}).get("applied")
        if applied is not False and txids.get(run_id) == txid:
            report.problems.append(
                f"cleared committed run {run_id} (txid {txid}) applied={applied}"
            )
    states = driver.run_states()
    expected_replays = list(report.backfilled)
    for run_id in sorted(report.backfill_runs):
        report.backfill_runs[run_id] = states.get(run_id, "?")
        replayed = txids.get(run_id)
        applied = (commits.get(run_id) or {}).get("applied")
        if replayed in expected_replays:
            expected_replays.remove(replayed)
        ok = states.get(run_id) == "success" and applied is False
        if not ok or replayed not in report.backfilled:
            report.problems.append(
                f"backfill run {run_id}: state {states.get(run_id)}, txid {replayed}, "
                f"commit applied={applied} (expected success, a txid of {report.backfilled}, "
                f"applied=False)"
            )
    if expected_replays:
        report.problems.append(f"backfilled txids without a run: {expected_replays}")
    report.run_states = {r: states.get(r, "?") for r in driver.live_runs}


# ----------------------------------------------------------------------------------- the run


def _connections(zk: PrivateZooKeeper, pg: PrivatePostgres, connect_url: str) -> dict[str, str]:
    url = make_url(pg.url)
    host, _, port = connect_url.rpartition(":")
    return {
        "AIRFLOW_CONN_FAULTS_ZOOKEEPER": json.dumps({
            "conn_type": "trident_zookeeper", "host": "127.0.0.1", "port": zk.port,
            "extra": {"root": ZK_ROOT},
        }),
        "AIRFLOW_CONN_FAULTS_STATE": json.dumps({
            "conn_type": "postgres", "host": url.host, "port": url.port, "login": url.username,
            "password": url.password, "schema": url.database,
        }),
        "AIRFLOW_CONN_FAULTS_CONNECT": json.dumps(
            {"conn_type": "spark_connect", "host": host, "port": int(port)}
        ),
    }  # fmt: skip


@contextlib.contextmanager
def _zk_store(zk: PrivateZooKeeper, topology: str) -> Iterator[CoordinatorStore]:
    client: KazooClient = connect(ZkConfig(hosts=zk.hosts, root=ZK_ROOT, timeout=10.0))
    try:
        yield CoordinatorStore(client, CoordinatorPaths(ZK_ROOT, topology))
    finally:
        client.stop()
        client.close()


def run_scheduler_faults(
    config: SchedulerFaultConfig,
    *,
    pg_url: str,
    work_dir: Path,
    echo: Callable[[str], None] = print,
) -> SchedulerFaultReport:
    """Run ``config`` (see the module's docstring); return what happened and what differs.

    ``pg_url``: a PostgreSQL whose role may create databases (Airflow's metadata database is
    created there and dropped after). ``work_dir``: servers' data, logs, staging, DAGs.
    """
    rng = random.Random(config.seed)
    plan = plan_faults(rng, config)
    data = config.data()
    topology = f"sched_faults_{config.seed}_{uuid.uuid4().hex[:6]}"
    report = SchedulerFaultReport(config=config, topology=topology, planned=plan)
    echo(f"seed={config.seed} batches={config.batches} layout={config.layout} work dir "
         f"{work_dir}; planned faults: "
         + ", ".join(f"{f.kind}@{f.at_committed}" for f in plan))  # fmt: skip
    work_dir.mkdir(parents=True, exist_ok=True)
    dags = work_dir / "dags"
    dags.mkdir(exist_ok=True)
    staging = work_dir / "staging"
    poison = work_dir / "poison"
    poison.write_text("")
    (dags / f"{DAG_ID}.py").write_text(
        DAG_FILE.format(
            topology_ref=TOPOLOGY_REF, dag_id=DAG_ID, max_active=config.max_active_batches,
            staging=staging, retries=config.retries, retry_delay_s=config.retry_delay_s,
            layout=config.layout,
        )
    )  # fmt: skip
    topology_env = {
        "TRIDENT_TEST_TOPOLOGY": topology,
        SCHEDULER_DATA_ENV: data.to_json(),
        POISON_ENV: str(poison),
    }
    os.environ.update(topology_env)  # the Connect server's workers inherit it
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        zk = stack.enter_context(PrivateZooKeeper(work_dir))
        pg = stack.enter_context(PrivatePostgres(work_dir))
        connect_url = stack.enter_context(running_connect_server(work_dir / "connect-server"))
        env = {**_connections(zk, pg, connect_url), **topology_env,
               "TRIDENT_STAGING_ROOT": str(staging), "SPARK_LOCAL_IP": "127.0.0.1"}  # fmt: skip
        af = stack.enter_context(
            running_airflow(
                work_dir, pg_url=pg_url, dags_folder=dags, env=env,
                parallelism=config.parallelism, expect_dags=[DAG_ID],
            )
        )  # fmt: skip
        echo(f"servers and airflow ready in {time.monotonic() - started:.1f}s")
        store = stack.enter_context(_zk_store(zk, topology))
        driver = _Driver(config, rng, af, zk, pg, store, poison, report, echo)
        af.unpause(DAG_ID)
        driver.started = time.monotonic()
        driver.deadline = driver.started + config.deadline_s
        driver.live_runs = [af.trigger(DAG_ID) for _ in range(config.batches)]
        try:
            driver.play(plan)
            driver.finish()
        except TimeoutError as error:
            report.problems.append(f"{error}; task states:\n{af.describe(DAG_ID)}")
        report.wall_s = time.monotonic() - driver.started
        driver.log(f"runs ended (committed {driver.committed()}); verifying")
        _verify(driver, data)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.harness.scheduler_faults --batches 50 --seed S``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    parser.add_argument("--commit-kills", type=int, default=2)
    parser.add_argument("--committed-clears", type=int, default=3)
    parser.add_argument("--failed-runs", type=int, default=1)
    parser.add_argument("--backfill-txids", type=int, default=3)
    parser.add_argument("--max-active-batches", type=int, default=3)
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--layout", choices=("standard", "express"), default="standard")
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds (default 600+30/batch)"
    )
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.getLogger("kazoo.client").setLevel(logging.ERROR)  # restarts are on purpose
    pg_url = os.environ.get("TRIDENT_PG_URL")
    if not pg_url:
        print('TRIDENT_PG_URL unset: eval "$(bash scripts/services.sh env)"', file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    config = SchedulerFaultConfig(
        seed=seed, batches=args.batches, commit_kills=args.commit_kills,
        committed_clears=args.committed_clears, failed_runs=args.failed_runs,
        backfill_txids=args.backfill_txids, max_active_batches=args.max_active_batches,
        parallelism=args.parallelism, timeout_s=args.timeout, layout=args.layout,
    )  # fmt: skip
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="trident-sched-faults-"))
    report = run_scheduler_faults(config, pg_url=pg_url, work_dir=work, echo=_echo)
    if report.backfill_output:
        print(report.backfill_output)
    print(report.summary(), flush=True)
    return 0 if report.ok else 1


def _echo(text: str) -> None:
    print(text, flush=True)


if __name__ == "__main__":
    sys.exit(main())
