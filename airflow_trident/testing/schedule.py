"""Seeded randomized fault schedules: play Airflow against :class:`BatchSteps` and break things.

Long on purpose: a driver that plays Airflow (runs, retries, clears, backfills) against the
lifecycle with every fault kind and checks the result; its moves share one state machine.

A driver plays the scheduler: runs identified by run ids, each ``begin -> process -> commit ->
success`` (in-process runtime: ``process_local``), several in flight (begins and processes run
ahead, commits go strictly in txid order), steps picked in a random order, and random faults
(:data:`FAULT_KINDS`) injected into the steps through the wrappers of
:mod:`airflow_trident.testing.fault_points`, a forked child killed with ``SIGKILL``, a second
committer, a ZooKeeper session expiry or server restart, a PostgreSQL restart. A failed step is
retried, or its run cleared (run again from begin, which re-binds the same txid); finished steps
of recent runs are re-run at random (a cleared committed run must change nothing).

After every txid that commits, both states must equal the reference computed from the lines the
spout's partitions have read up to that txid (:class:`~airflow_trident.testing.fault_topology.
FaultTopology`); the first txid where a key differs is reported with its seed, key, expected and
stored value. At the end faults stop, every partition becomes readable, and batches run until the
data is exhausted: the final states must equal the reference of all the data.

Every random choice comes from ``random.Random(seed)``, so a schedule replays from the
:class:`ScheduleConfig` its report prints (timing-dependent outcomes, such as which of two
committers wins, may still differ).

Server restarts (``zk_restart``, ``pg_restart``) need servers that may be killed: the caller
starts throw-away ones and passes their handles (anything with ``restart()``:
:class:`RestartableServer`) with their address (``zk_hosts``, ``state_url``). Without a handle
that fault kind is not used; a shared server is never restarted. (The project's own command
line, which starts private servers, is ``python -m tests.harness.fault_schedule`` in the
source tree: ``bash scripts/faults.sh``.)

Example (needs ZooKeeper; ~10 s)::

    report = run_schedule(ScheduleConfig(seed=7, combo="tx-tx", batches=30), zk_hosts=hosts)
    assert report.ok, report.summary()
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import (
    BatchIncompleteError,
    BatchNotReadyError,
    CommitConflictError,
    CommitOrderError,
    ConfigurationError,
)
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.state.binding import StateBinding
from airflow_trident.testing.fault_points import FaultInjector, FaultyStore, kill_this_process
from airflow_trident.testing.fault_topology import COMBOS, Difference, FaultTopology, SourceData
from airflow_trident.testing.faults import expire_session
from airflow_trident.testing.forked import forget_inherited_engine, run_forked

__all__ = ["FAULT_KINDS", "RestartableServer", "ScheduleConfig", "ScheduleReport", "run_schedule"]

log = logging.getLogger(__name__)

ZK_ROOT = "/trident_faults"

FAULT_KINDS: dict[str, str] = {
    "store_commit_before": "states written, ZooKeeper compare-and-set not done",
    "store_commit_after": "compare-and-set done, the step dies before reporting",
    "store_call": "a coordinator (ZooKeeper) call of the step fails",
    "state_commit": "a state partition's commit fails after others were committed",
    "spout_emit": "the emitter fails before or after emitting a partition",
    "function": "user code of the processing phase fails",
    "zk_expiry": "the step's ZooKeeper session expires half-way",
    "zk_restart": "the ZooKeeper server (the caller's zk_server) is restarted half-way",
    "pg_restart": "the PostgreSQL state database (the caller's pg_server) is restarted",
    "kill9": "the step runs in a child process that is SIGKILL-ed at a random point",
    "two_committers": "two committers commit the same txid at once",
}
"""Fault kind -> what it simulates."""

_STEP_FAULTS: dict[str, tuple[str, ...]] = {
    "begin": ("store_call", "kill9", "zk_expiry", "zk_restart"),
    "process": ("spout_emit", "function", "store_call", "kill9", "zk_expiry", "zk_restart"),
    "commit": (
        "store_commit_before",
        "store_commit_after",
        "state_commit",
        "store_call",
        "kill9",
        "zk_expiry",
        "zk_restart",
        "pg_restart",
        "two_committers",
    ),
    "success": ("store_call", "kill9", "zk_expiry"),
}
_WEIGHTS = {"store_commit_before": 3.0, "state_commit": 3.0, "kill9": 2.0}
"""Faults that leave a half-applied commit behind come more often (the interesting case)."""
_STUCK_TICKS = 400
"""Scheduler decisions without a commit after which a schedule is declared stuck."""
_NO_HISTORY = ("store_commit_before", "store_commit_after", "two_committers")
"""Fault kinds that need no hit counts of an earlier run of the step."""
_NEXT = {"begin": "process", "process": "commit", "commit": "success", "success": "done"}


class RestartableServer(Protocol):
    """A server the ``zk_restart`` / ``pg_restart`` faults restart half-way through a step.

    ``restart()`` kills it (``kill -9`` is the point: no clean shutdown) and starts it again on
    the same address and data, returning once it answers; it raises if the server does not come
    back. Pass only throw-away servers started for the schedule (a private process, a
    container), never a shared one.
    """

    def restart(self) -> None:
        """Kill the server and start it again (same address, same data); wait until it answers."""


@dataclass(frozen=True)
class ScheduleConfig:
    """What a schedule runs.

    Parameters
    ----------
    seed:
        Seed of every random choice (data, interleaving, faults).
    combo:
        ``tx-tx``, ``tx-opaque`` or ``opaque-opaque``.
    batches:
        Txids committed under faults (then the data is drained without faults).
    fault_rate:
        Chance that a step gets a fault.
    faults:
        Fault kinds to use (default: all that the servers allow).
    required:
        Fault kinds that must fire at least once (each is forced on its first chance).
    max_in_flight:
        Runs begun and not committed at once.
    partitions, take_per_batch, vocabulary, parallelism:
        Source partitions, lines per partition per batch, distinct words, state partitions.
    keep_txids:
        ``BatchSteps(keep_txids=...)``: how long metadata and staging are kept.
    hide_state_methods:
        Mutation test of the harness: state methods the runtime must not see (``revert_txid``
        brings hole 1 back, which the schedule must then find).
    """

    seed: int
    combo: str = "tx-tx"
    batches: int = 30
    fault_rate: float = 0.35
    faults: frozenset[str] | None = None
    required: tuple[str, ...] = ()
    max_in_flight: int = 3
    partitions: int = 4
    take_per_batch: int = 3
    vocabulary: int = 300
    parallelism: int = 3
    keep_txids: int = 8
    hide_state_methods: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.combo not in COMBOS:
            msg = f"unknown combination {self.combo!r}: use one of {', '.join(COMBOS)}"
            raise ConfigurationError(msg)
        unknown = set(self.faults or ()) | set(self.required)
        unknown -= set(FAULT_KINDS)
        if unknown:
            msg = f"unknown fault kinds {sorted(unknown)}: use {', '.join(FAULT_KINDS)}"
            raise ConfigurationError(msg)

    def replay_command(self) -> str:
        """The configuration that replays this schedule (its fields that are not defaults).

        >>> ScheduleConfig(seed=7, batches=12, faults=frozenset({"kill9"})).replay_command()
        "ScheduleConfig(seed=7, batches=12, faults=frozenset({'kill9'}))"
        """
        changed = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.name == "seed" or getattr(self, f.name) != f.default
        ]
        return f"ScheduleConfig({', '.join(changed)})"


@dataclass
class ScheduleReport:
    """What a schedule did and found."""

    config: ScheduleConfig
    batches: int = 0
    steps: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    reruns: Counter[str] = field(default_factory=Counter)
    outages: int = 0
    differences: list[Difference] = field(default_factory=list)
    final_differences: list[Difference] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        """No difference from the reference and no broken invariant."""
        return not (self.differences or self.final_differences or self.violations)

    def summary(self, limit: int = 12) -> str:
        """The report as text: seed, counts, faults by kind, differences and violations."""
        c = self.config
        lines = [
            f"fault schedule seed={c.seed} combo={c.combo}: {self.batches} batches committed "
            f"in {self.elapsed_s:.1f}s; replay: {c.replay_command()}",
            f"  steps: {dict(sorted(self.steps.items()))}",
            f"  faults injected by kind: {dict(sorted(self.faults.items()))} "
            f"(total {sum(self.faults.values())}); outages toggled: {self.outages}",
            f"  re-runs: {dict(sorted(self.reruns.items()))}",
            f"  step failures: {dict(sorted(self.failures.items()))}",
            f"  final difference from the reference: {len(self.final_differences)} keys differ",
        ]
        if self.differences:
            first = min(d.txid for d in self.differences)
            lines.append(
                f"  {len(self.differences)} keys differed after a commit (first at txid {first}):"
            )
            lines += [f"    {d}" for d in self.differences[:limit]]
        if self.final_differences:
            lines.append("  at the end:")
            lines += [f"    {d}" for d in self.final_differences[:limit]]
        lines += [f"  VIOLATION seed={c.seed}: {v}" for v in self.violations[:limit]]
        return "\n".join(lines)


@dataclass
class _Run:
    run_id: str
    txid: int | None = None
    stage: str = "begin"  # the next step to run ("done" after success)
    failures_in_a_row: int = 0
    last_error: str | None = None


class _StepFailed(Exception):
    """A step of the schedule failed (injected, or as a consequence); the driver retries."""


class _Schedule:
    """One schedule: the topology, its connections, and the driver loop."""

    def __init__(
        self,
        config: ScheduleConfig,
        *,
        zk_hosts: str,
        state_url: str,
        workdir: Path,
        zk_server: RestartableServer | None,
        pg_server: RestartableServer | None,
        echo: Callable[[str], None],
    ) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.zk_hosts = zk_hosts
        self.state_url = state_url
        self.workdir = workdir
        self.zk_server = zk_server
        self.pg_server = pg_server
        self.echo = echo
        allowed = set(config.faults or FAULT_KINDS)
        if zk_server is None:
            allowed.discard("zk_restart")
        if pg_server is None:
            allowed.discard("pg_restart")
        self.kinds = allowed
        self.report = ScheduleReport(config)
        self.injector = FaultInjector()
        combo = config.combo.replace("-", "_")
        self.name = f"faults_{combo}_{uuid.uuid4().hex[:8]}"
        rows = max(4, config.batches * config.take_per_batch * 3 // 4)
        self.data = SourceData.generate(
            self.rng,
            partitions=config.partitions,
            rows_per_partition=rows,
            vocabulary=config.vocabulary,
        )
        self.topo = FaultTopology(
            self.name,
            config.combo,
            self.data,
            self.injector,
            take_per_batch=config.take_per_batch,
            parallelism=config.parallelism,
            hidden=config.hide_state_methods,
        )
        self.runs: list[_Run] = []
        self.applied: set[int] = set()
        self.checked = 0
        self.seen: set[tuple[str, tuple[Any, ...]]] = set()
        self.step_hits: dict[str, Counter[str]] = {}
        self.faults_on = True
        self.progress = (0, 0)
        self.client = connect(self._zk_config())
        self.real = CoordinatorStore(self.client, CoordinatorPaths(ZK_ROOT, self.name))
        self.steps = self._steps_over(self.real)

    # -- connections ----------------------------------------------------------------------------

    def _zk_config(self) -> ZkConfig:
        return ZkConfig(hosts=self.zk_hosts, root=ZK_ROOT, timeout=30.0, session_timeout=10.0)

    def _steps_over(self, real: CoordinatorStore) -> BatchSteps:
        return BatchSteps(
            self.topo.topology,
            FaultyStore(real, self.injector),
            StagingArea(str(self.workdir / "staging"), self.name),
            keep_txids=self.config.keep_txids,
            states=StateBinding(self.state_url),
        )

    @contextlib.contextmanager
    def _other_steps(self) -> Iterator[BatchSteps]:
        """BatchSteps on a ZooKeeper session of their own (another worker)."""
        client = connect(self._zk_config())
        try:
            yield self._steps_over(CoordinatorStore(client, CoordinatorPaths(ZK_ROOT, self.name)))
        finally:
            client.stop()
            client.close()

    def close(self, *, drop: bool) -> None:
        if drop:
            with contextlib.suppress(Exception):
                self.real.delete_all()
            with contextlib.suppress(Exception):
                import sqlalchemy as sa

                from airflow_trident.state.sql.engine import shared_engine

                with shared_engine(self.state_url).begin() as conn:
                    for factory in self.topo.factories.values():
                        conn.execute(sa.schema.DropTable(factory.layout.table, if_exists=True))
        self.client.stop()
        self.client.close()

    # -- the driver -----------------------------------------------------------------------------

    def run(self) -> ScheduleReport:
        c = self.config
        started = time.monotonic()
        self.echo(
            f"fault schedule seed={c.seed} combo={c.combo} batches={c.batches} "
            f"topology={self.name} state={StateBinding(self.state_url)!r} zk={self.zk_hosts}; "
            f"replay: {c.replay_command()}"
        )
        limit = 60 * c.batches + 200
        ticks = 0
        while self.real.commits.committed_txid() < c.batches and ticks < limit:
            if self._stuck():
                self._violation(
                    f"no txid committed in {_STUCK_TICKS} steps: {self._describe_runs()}"
                )
                break
            self._tick()
            ticks += 1
        else:
            self._drain(limit)
        for kind in c.required:
            if kind in self.kinds and not self.report.faults[kind]:
                self._violation(f"required fault {kind!r} never fired")
        self.report.batches = self.real.commits.committed_txid()
        self.report.elapsed_s = time.monotonic() - started
        return self.report

    def _stuck(self) -> bool:
        """No txid committed for :data:`_STUCK_TICKS` scheduler decisions."""
        committed = self.real.commits.committed_txid()
        if committed != self.progress[0]:
            self.progress = (committed, 0)
        else:
            self.progress = (committed, self.progress[1] + 1)
        return self.progress[1] >= _STUCK_TICKS

    def _drain(self, limit: int) -> None:
        """Faults off, every partition readable: run batches until every line is committed."""
        self.faults_on = False
        self.injector.disarm()
        if self.topo.opaque_spout is not None:
            self.topo.opaque_spout.set_unreadable()
        full = {p: len(rows) for p, rows in self.data.partitions.items()}
        for _ in range(limit):
            in_flight = [r for r in self.runs if r.stage != "done"]
            drained = self.topo.committed_ends(self.real) == full
            if not in_flight and drained:
                break
            if self._stuck():
                self._violation(
                    f"no txid committed in {_STUCK_TICKS} steps: {self._describe_runs()}"
                )
                return
            self._tick(new_runs=not drained)
        else:
            self._violation(
                f"the data was not drained after {limit} steps: {self._describe_runs()}"
            )
            return
        ends = self.topo.committed_ends(self.real)
        committed = self.real.commits.committed_txid()
        self.report.final_differences = self.topo.differences(
            self.config.seed, committed, self.state_url, ends
        )
        self._check_committed()

    def _describe_runs(self) -> str:
        return ", ".join(
            f"{r.run_id}:txid={r.txid}:{r.stage} (last error: {r.last_error})"
            for r in self.runs
            if r.stage != "done"
        )

    def _tick(self, *, new_runs: bool = True) -> None:
        """One scheduler decision."""
        committed = self.real.commits.committed_txid()
        in_flight = [r for r in self.runs if r.stage != "done"]
        choices: list[tuple[float, Callable[[], None]]] = []
        if new_runs and len(in_flight) < self.config.max_in_flight:
            choices.append((2.0, self._new_run))
        for i, run in enumerate(in_flight):
            if run.stage == "commit" and run.txid is not None and run.txid > committed + 1:
                if self.faults_on:
                    choices.append((0.2, functools.partial(self._out_of_order_commit, run)))
                continue
            weight = 6.0 if i == 0 else 3.0
            choices.append((weight, functools.partial(self._step, run, run.stage)))
        if self.faults_on:
            recent = [
                r
                for r in self.runs
                if r.txid is not None
                and r.stage != "begin"
                and r.txid > committed - self.config.keep_txids // 2
            ]
            if recent:
                choices.append((0.6, lambda: self._rerun(self.rng.choice(recent))))
            if self.topo.opaque_spout is not None:
                choices.append((0.8, self._toggle_outage))
        weights = [w for w, _ in choices]
        action = self.rng.choices([a for _, a in choices], weights)[0]
        action()

    def _new_run(self) -> None:
        run = _Run(f"manual__{len(self.runs) + 1:05d}")
        self.runs.append(run)
        self._step(run, "begin")

    def _toggle_outage(self) -> None:
        spout = self.topo.opaque_spout
        assert spout is not None
        partitions = sorted(self.data.partitions)
        down = self.rng.sample(partitions, self.rng.randint(0, min(2, len(partitions) - 1)))
        spout.set_unreadable(*down)
        self.report.outages += 1

    def _rerun(self, run: _Run) -> None:
        """Clear a finished (or later) step of a recent run and run it again."""
        done = ["begin", "process", "commit", "success"]
        reached = done.index(run.stage) if run.stage in done else len(done)
        step = self.rng.choice(done[:reached])
        if step == "commit" and (run.txid is None or run.txid > self.real.commits.committed_txid()):
            return  # re-running an uncommitted commit is just the commit
        self.report.reruns[step] += 1
        run.stage = step
        self._step(run, step)

    def _out_of_order_commit(self, run: _Run) -> None:
        assert run.txid is not None
        committed = self.real.commits.committed_txid()
        try:
            summary = self.steps.commit(run.txid)
        except CommitOrderError:
            self.report.steps["commit_refused_out_of_order"] += 1
        except Exception as exc:  # any other refusal is fine as long as nothing committed
            self.report.failures[f"commit_out_of_order:{type(exc).__name__}"] += 1
        else:
            if summary.get("applied"):
                self._violation(f"txid {run.txid} committed while committed txid was {committed}")
        if self.real.commits.committed_txid() != committed:
            self._violation(f"an out-of-order commit of txid {run.txid} moved the committed txid")

    # -- one step, maybe with a fault -----------------------------------------------------------

    def _step(self, run: _Run, step: str) -> None:
        kind = self._choose_fault(step, run)
        before = self.injector.hits.copy()
        self.report.steps[step] += 1
        try:
            if kind == "kill9":
                result = self._forked(run, step)
            elif kind == "two_committers":
                result = self._two_committers(run)
            else:
                if kind is not None:
                    self._arm(kind, step)
                result = self._call(self.steps, run, step)
        except _StepFailed as failed:
            self._failed(run, step, str(failed))
        except Exception as exc:
            self._failed(run, step, f"{type(exc).__name__}: {str(exc)[:300]}", exc)
        else:
            self._succeeded(run, step, result)
        finally:
            for label in self.injector.disarm():
                log.debug("fault %s did not fire in %s of %s", label, step, run.run_id)
            self._count_fired()
            if kind is None:
                self.step_hits[step] = self.injector.hits - before
        self._check_committed()

    def _count_fired(self) -> None:
        for label, n in self.injector.fired.items():
            self.report.faults[label] += n
        self.injector.fired.clear()

    def _choose_fault(self, step: str, run: _Run) -> str | None:
        if not self.faults_on:
            return None
        possible = [k for k in _STEP_FAULTS[step] if k in self.kinds]
        if step == "commit" and (
            run.txid is None or run.txid != self.real.commits.committed_txid() + 1
        ):
            possible = [k for k in possible if k != "two_committers"]
        if step not in self.step_hits:
            possible = [k for k in possible if k in _NO_HISTORY]
        required = [k for k in self.config.required if k in possible and not self.report.faults[k]]
        if required and self.rng.random() < 0.5:
            return required[0]
        if not possible or self.rng.random() >= self.config.fault_rate:
            return None
        weights = [_WEIGHTS.get(k, 1.0) for k in possible]
        return self.rng.choices(possible, weights)[0]

    def _hits(self, step: str, prefix: str) -> int:
        hits = self.step_hits.get(step, Counter())
        return max(1, sum(n for p, n in hits.items() if p.startswith(prefix)))

    def _arm(self, kind: str, step: str) -> None:
        rng, arm = self.rng, self.injector.arm
        if kind == "store_commit_before":
            arm("store.commit.before", label=kind)
        elif kind == "store_commit_after":
            arm("store.commit.after", label=kind)
        elif kind == "store_call":
            arm("store.*", at=rng.randint(1, self._hits(step, "store.")), label=kind)
        elif kind == "state_commit":
            point = rng.choice(["state.commit.before", "state.commit.after", "state.multi_*.after"])
            arm(point, at=rng.randint(1, self._hits(step, "state.commit.before")), label=kind)
        elif kind == "spout_emit":
            point = rng.choice(["spout.emit.before", "spout.emit.after"])
            arm(point, at=rng.randint(1, self._hits(step, "spout.emit.before")), label=kind)
        elif kind == "function":
            arm("function.execute", at=rng.randint(1, self._hits(step, "function.")), label=kind)
        elif kind == "zk_expiry":
            at = rng.randint(1, self._hits(step, "store."))
            arm("store.*", at=at, action=lambda: self._expire(), label=kind)
        elif kind == "zk_restart":
            assert self.zk_server is not None
            at = rng.randint(1, self._hits(step, "store."))
            zk = self.zk_server
            arm("store.*", at=at, action=lambda: self._restart(zk), label=kind)
        elif kind == "pg_restart":
            assert self.pg_server is not None
            point = rng.choice(
                ["state.multi_*.before", "state.commit.before", "state.begin_commit.after"]
            )
            at = rng.randint(1, self._hits(step, "state.begin_commit.before"))
            pg = self.pg_server
            arm(point, at=at, action=lambda: self._restart(pg), label=kind)

    def _restart(self, server: RestartableServer) -> None:
        try:
            server.restart()
        except Exception as exc:
            self._violation(f"restarting {server!r} failed: {exc}")
            server.restart()  # one more chance; if this raises too, the step fails

    def _expire(self) -> None:
        expire_session(self.client)

    def _call(self, steps: BatchSteps, run: _Run, step: str) -> Any:
        if step == "begin":
            return int(steps.begin(run.run_id)["txid"])
        assert run.txid is not None
        if step == "process":
            steps.process_local(run.txid)
            return None
        if step == "commit":
            return dict(steps.commit(run.txid))
        return steps.success(run.txid)

    def _forked(self, run: _Run, step: str) -> Any:
        at = self.rng.randint(1, self._hits(step, ""))
        url, injector = self.state_url, self.injector

        def work() -> Any:
            forget_inherited_engine(url)
            injector.disarm()
            injector.arm("*", at=at, action=kill_this_process, label="kill9")
            with self._other_steps() as steps:
                return self._call(steps, run, step)

        outcome = run_forked(work)
        if outcome.status == "killed":
            self.report.faults["kill9"] += 1
            msg = f"killed with SIGKILL at fault-point hit {at}"
            raise _StepFailed(msg)
        if outcome.status == "hung":
            self._violation(f"{step} of {run.run_id} (txid {run.txid}) hung in a child process")
            raise _StepFailed("hung")
        if outcome.status == "error":
            raise _StepFailed(f"in a child: {outcome.error}")
        return outcome.result

    def _two_committers(self, run: _Run) -> Any:
        assert run.txid is not None
        txid = run.txid
        barrier = threading.Barrier(2)
        outcomes: list[str] = ["", ""]
        summaries: list[Any] = [None, None]

        def commit(index: int, steps: BatchSteps) -> None:
            barrier.wait()
            try:
                summaries[index] = steps.commit(txid)
                outcomes[index] = "applied" if summaries[index]["applied"] else "no-op"
            except CommitConflictError:
                outcomes[index] = "conflict"
            except Exception as exc:
                outcomes[index] = f"error:{type(exc).__name__}"

        with self._other_steps() as first, self._other_steps() as second:
            threads = [
                threading.Thread(target=commit, args=(i, s)) for i, s in enumerate((first, second))
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        self.report.faults["two_committers"] += 1
        for outcome in outcomes:
            self.report.steps[f"two_committers:{outcome}"] += 1
        if outcomes.count("applied") > 1:
            self._violation(f"two committers both applied txid {txid}: {outcomes}")
        applied = [s for s in summaries if s is not None and s["applied"]]
        if not applied:
            msg = f"neither committer applied txid {txid}: {outcomes}"
            raise _StepFailed(msg)
        return dict(applied[0])

    def _succeeded(self, run: _Run, step: str, result: Any) -> None:
        run.failures_in_a_row = 0
        if step == "begin":
            txid = int(result)
            if run.txid is not None and run.txid != txid:
                self._violation(f"run {run.run_id} re-bound to txid {txid}, was {run.txid}")
            run.txid = txid
        elif step == "commit":
            assert run.txid is not None
            if result["applied"]:
                if run.txid in self.applied:
                    self._violation(f"txid {run.txid} was applied twice")
                self.applied.add(run.txid)
            elif self.real.commits.committed_txid() < run.txid:
                self._violation(f"commit of txid {run.txid} was a no-op but it is not committed")
        run.stage = _NEXT[step]

    def _failed(self, run: _Run, step: str, why: str, exc: Exception | None = None) -> None:
        run.failures_in_a_row += 1
        run.last_error = why[:500]
        label = why.split(":", 1)[0] if exc is not None else "step-failed"
        self.report.failures[f"{step}:{label}"] += 1
        log.info(
            "seed %d: %s of %s (txid %s) failed: %s",
            self.config.seed,
            step,
            run.run_id,
            run.txid,
            why,
        )
        if isinstance(exc, BatchNotReadyError):
            return  # txid-1 not emitted yet: retry later
        if isinstance(exc, BatchIncompleteError) and step == "commit":
            run.stage = "process"  # the latest attempt has no staged batch: process again
            return
        choice = self.rng.random()
        if choice < 0.2:
            self.report.reruns["clear-run"] += 1
            run.stage = "begin"  # Airflow's clear of the whole run: from begin, same txid
        elif choice < 0.45 and step in ("commit", "success"):
            self.report.reruns["clear-from-process"] += 1
            run.stage = "process"  # clear the process task and its downstream: a new attempt

    def _violation(self, what: str) -> None:
        message = f"seed={self.config.seed} combo={self.config.combo}: {what}"
        self.report.violations.append(message)
        self.echo(f"VIOLATION {message}")

    def _check_committed(self) -> None:
        """After a txid commits, every key must match the reference of the lines read so far."""
        committed = self.real.commits.committed_txid()
        if committed <= self.checked:
            return
        self.checked = committed
        ends = self.topo.committed_ends(self.real)
        for diff in self.topo.differences(self.config.seed, committed, self.state_url, ends):
            if (diff.state, diff.key) in self.seen:
                continue
            self.seen.add((diff.state, diff.key))
            self.report.differences.append(diff)
            self.echo(f"DIFFERENCE {diff}")


def run_schedule(
    config: ScheduleConfig,
    *,
    zk_hosts: str | None = None,
    state_url: str | None = None,
    workdir: str | Path | None = None,
    zk_server: RestartableServer | None = None,
    pg_server: RestartableServer | None = None,
    echo: Callable[[str], None] = print,
    keep: bool = False,
) -> ScheduleReport:
    """Run one schedule and return its report (see the module docstring).

    Parameters
    ----------
    zk_hosts:
        ZooKeeper (default: ``TRIDENT_ZK_HOSTS``; required with ``zk_server``).
    state_url:
        State database (default: SQLite in ``workdir``; required with ``pg_server``).
    zk_server, pg_server:
        Handles of the servers behind ``zk_hosts`` / ``state_url`` that the ``zk_restart`` /
        ``pg_restart`` faults may restart (:class:`RestartableServer`; never a shared server).
        Without one, that fault kind is not used.
    keep:
        Keep the ZooKeeper nodes and state tables (they are kept anyway when the report is not
        ok, for inspection).

    Raises
    ------
    ConfigurationError
        Without ZooKeeper, or with a server handle but not its address.
    """
    if zk_server is not None and not zk_hosts:
        msg = "zk_server needs zk_hosts: the address of the ZooKeeper it restarts"
        raise ConfigurationError(msg)
    if pg_server is not None and not state_url:
        msg = "pg_server needs state_url: the URL of the database it restarts"
        raise ConfigurationError(msg)
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="trident-faults-"))
        work = Path(workdir)
        hosts = zk_hosts or os.environ.get("TRIDENT_ZK_HOSTS")
        if not hosts:
            msg = "no ZooKeeper: pass zk_hosts or set TRIDENT_ZK_HOSTS"
            raise ConfigurationError(msg)
        url = state_url or f"sqlite:///{work / 'state.db'}"
        schedule = _Schedule(
            config,
            zk_hosts=hosts,
            state_url=url,
            workdir=work,
            zk_server=zk_server,
            pg_server=pg_server,
            echo=echo,
        )
        finished = False
        try:
            report = schedule.run()
            finished = True
        finally:
            schedule.close(drop=finished and report.ok and not keep)
        echo(report.summary())
        return report
