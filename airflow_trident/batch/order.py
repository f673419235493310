"""Waiting in txid order, and when a waiting task gives its run slot back.

A batch's process task waits for txid-1 to be emitted (a transactional partitioned spout's
ranges start where txid-1's end) and its commit waits for txid-1 to commit. Every run that waits
holds one of the DAG's ``max_active_runs`` slots (``max_active_batches``). When txid-1's run has
failed, waiting is pointless, and worse: once the user clears that run it is *queued*, and it can
never start while the later runs hold every slot waiting for it. So a waiting task watches the
runs bound to the txid it waits for (ZooKeeper's txid -> runs index) and, when none of them can
make progress, fails at once without retrying, with a message that says which run to clear.

"Cannot make progress" means: no run of txid-1 is running, and either one is queued for longer
than a grace period (starved of a slot) or every one has ended (failed, or marked success
without committing). A run that is running — even retrying — is progress: the task waits on.

The process tasks wait here for txid-1's emit (:func:`wait_for_emit_order`), the commit tasks
(every layout's, the express task's) for their turn (:func:`await_commit_turn`), and the commit
trigger asks the same :class:`StallWatch` in the triggerer. The runs' states come from Airflow
through a callable the adapters pass (``states``: :func:`airflow_trident.hooks.dagruns.
dagrun_states`); a verdict raises :class:`~airflow_trident.errors.BatchStalledError`, which the
task adapters turn into a failure without retry. Nothing here imports Airflow.

>>> watch = StallWatch("wc", txid=8, waiting_for="commit")
>>> watch.verdict({"r7": "running"}, now=0.0) is None
True
>>> print(watch.verdict({"r7": "failed"}, now=1.0)[:76])
txid 8 cannot commit before txid 7, and txid 7's run r7 has failed. This tas
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_trident.errors import BatchStalledError

if TYPE_CHECKING:  # the triggerer imports this module: it stays light
    from airflow_trident.batch.steps import BatchSteps

RunStates = Callable[[str, Sequence[str]], Mapping[str, str | None]]
"""``(dag_id, run_ids) -> {run_id: DAG run state or None}``: how a wait asks Airflow."""

__all__ = [
    "QUEUED_GRACE_S",
    "STALL_CHECK_S",
    "RunStates",
    "StallWatch",
    "await_commit_turn",
    "wait_for_commit_order",
    "wait_for_emit_order",
    "wait_watching",
]

STALL_CHECK_S = 10.0
"""Seconds between two looks at the awaited txid's runs."""

QUEUED_GRACE_S = 30.0
"""How long the awaited txid's runs may stay queued (none running) before the waiting run
yields: a run with a free slot starts within a few scheduler loops."""

_ENDED = ("failed", "success")


@dataclass
class StallWatch:
    """Decides, from the states of the runs bound to txid-1, whether txid's task gives up.

    :param dag_id: the DAG (for the fix commands in the message).
    :param txid: the txid of the waiting task's batch; it waits for ``txid - 1``.
    :param waiting_for: ``"commit"`` (a commit waits for txid-1's commit) or ``"emit"`` (a
        process task waits for txid-1's emit).
    :param run_id: the waiting task's run (named in the message), if known.
    :param grace_s: how long a queued (and no running) run of txid-1 is given to start.
    """

    dag_id: str
    txid: int
    waiting_for: str
    run_id: str | None = None
    grace_s: float = QUEUED_GRACE_S
    _queued_since: float | None = field(default=None, repr=False)

    def verdict(self, states: Mapping[str, str | None], now: float) -> str | None:
        """``None`` while txid-1 can still make progress, else why this task fails now.

        ``states`` maps each run bound to txid-1 to its DAG run state (``None``: unknown).
        No run known, or a state unknown, is no verdict: the task keeps waiting as it used to.

        >>> w = StallWatch("wc", txid=3, waiting_for="emit", grace_s=60)
        >>> w.verdict({}, now=0.0) is None, w.verdict({"a": None}, now=0.0) is None
        (True, True)
        >>> w.verdict({"a": "queued"}, now=0.0) is None  # just cleared: it may start
        True
        >>> w.verdict({"a": "queued"}, now=59.0) is None
        True
        >>> "queued for 61 s" in w.verdict({"a": "queued"}, now=61.0)
        True
        >>> w.verdict({"a": "failed", "b": "running"}, now=62.0) is None  # a replay runs
        True
        """
        if not states or any(state is None for state in states.values()):
            return None
        if any(state == "running" for state in states.values()):
            self._queued_since = None
            return None
        queued = [run for run, state in states.items() if state == "queued"]
        if queued:
            if self._queued_since is None:
                self._queued_since = now
            waited = now - self._queued_since
            if waited < self.grace_s:
                return None
            return self._message(queued[-1], f"has been queued for {waited:.0f} s", queued=True)
        ended = [run for run, state in states.items() if state in _ENDED]
        if len(ended) < len(states):
            return None  # a state this module does not know: keep waiting
        run = ended[-1]
        if states[run] == "failed":
            return self._message(run, "has failed")
        return self._message(
            run, f"was marked success, but txid {self.txid - 1} never committed", replay=True
        )

    def _message(self, run: str, what: str, *, queued: bool = False, replay: bool = False) -> str:
        awaited = self.txid - 1
        action = "commit" if self.waiting_for == "commit" else "be emitted"
        this = f"run {self.run_id}" if self.run_id else "this run"
        head = (
            f"txid {self.txid} cannot {action} before txid {awaited}, and txid {awaited}'s run "
            f"{run} {what}. This task fails now, without retrying, so that {this} gives back "
            f"its slot of the DAG's max_active_runs (max_active_batches): waiting here would "
            f"keep txid {awaited}'s run from starting."
        )
        this_clear = (
            f"`airflow dags clear {self.dag_id} --run-id {self.run_id} --only-failed --yes`"
            if self.run_id
            else "clear this run's failed tasks"
        )
        if queued:
            return (
                f"{head} Fix: once txid {awaited} committed, clear this run (it keeps txid "
                f"{self.txid}): {this_clear}."
            )
        if replay:
            conf = json.dumps({"txid": awaited})
            return (
                f"{head} Fix: replay txid {awaited} in a new run (`airflow dags trigger "
                f"{self.dag_id} --conf '{conf}'`), then clear this run (it keeps txid "
                f"{self.txid}): {this_clear}."
            )
        return (
            f"{head} Fix: clear run {run} (`airflow dags clear {self.dag_id} --run-id {run} "
            f"--only-failed --yes`, or in the UI: Grid > run {run} > Clear > only failed), then "
            f"this run (it keeps txid {self.txid}): {this_clear}. Every failed run at once: "
            f"`airflow tasks clear {self.dag_id} --only-failed --yes`; they commit in txid order."
        )


def wait_watching(
    ready: Callable[[], bool],
    watch: StallWatch,
    runs: Callable[[], Sequence[str]],
    *,
    timeout_s: float | None,
    poll_s: float,
    log: logging.Logger | Any,
    states: RunStates | None = None,
) -> bool:
    """Poll ``ready()`` every ``poll_s`` until it is true (``True``) or ``timeout_s`` passed
    (``False``); every :data:`STALL_CHECK_S`, ask ``watch`` about the runs of txid-1
    (``runs()``, their ``states``; ``None``: no verdicts) and raise
    :class:`~airflow_trident.errors.BatchStalledError` on a verdict."""
    start = time.monotonic()
    checked = start
    while not ready():
        now = time.monotonic()
        if timeout_s is not None and now - start >= timeout_s:
            return False
        if states is not None and now - checked >= STALL_CHECK_S:
            checked = now
            observed = dict(states(watch.dag_id, runs()))
            verdict = watch.verdict(observed, now)
            if verdict is not None:
                log.error("%s", verdict)
                raise BatchStalledError(verdict)
            log.info(
                "txid %d waits for txid %d (%s); the runs of txid %d: %s",
                watch.txid,
                watch.txid - 1,
                watch.waiting_for,
                watch.txid - 1,
                observed,
            )
        time.sleep(poll_s)
    return True


def wait_for_emit_order(
    steps: BatchSteps,
    txid: int,
    *,
    dag_id: str,
    run_id: str | None,
    timeout_s: float,
    log: logging.Logger | Any,
    states: RunStates | None = None,
) -> float:
    """Wait in the task (not in a Spark job holding executors) until ``txid`` may be emitted;
    return what is left of ``timeout_s`` for the job's own wait.

    Raises :class:`~airflow_trident.errors.BatchStalledError` at once when txid-1's runs
    cannot make progress (:class:`StallWatch`, from their ``states``).
    """
    if steps.processing.emit_ready(txid):
        return timeout_s
    start = time.monotonic()
    log.info("txid %d waits for txid %d to be emitted first", txid, txid - 1)
    wait_watching(
        lambda: bool(steps.processing.emit_ready(txid)),
        StallWatch(dag_id, txid, "emit", run_id=run_id),
        lambda: list(steps.store.runs.runs_of_txid(txid - 1)),
        timeout_s=timeout_s,
        poll_s=1.0,
        log=log,
        states=states,
    )
    return max(0.0, timeout_s - (time.monotonic() - start))


def wait_for_commit_order(
    steps: BatchSteps,
    txid: int,
    watch: StallWatch,
    *,
    deadline: float | None,
    poll_s: float,
    log: logging.Logger | Any,
    states: RunStates | None = None,
) -> int:
    """Poll the committed txid until txid-1 is in (or ``deadline``, a ``time.monotonic()``
    moment; ``None``: no deadline); return it. Raises
    :class:`~airflow_trident.errors.BatchStalledError` at once when txid-1's runs cannot make
    progress (``watch``, from their ``states``)."""
    wait_watching(
        lambda: bool(steps.store.commits.committed_txid() >= txid - 1),
        watch,
        lambda: list(steps.store.runs.runs_of_txid(txid - 1)),
        timeout_s=None if deadline is None else max(0.0, deadline - time.monotonic()),
        poll_s=poll_s,
        log=log,
        states=states,
    )
    committed: int = steps.store.commits.committed_txid()
    return committed


INLINE_POLL_S = 0.2
"""Seconds between two reads of the committed txid while a commit waits in its task for a
staged txid-1."""


def await_commit_turn(
    steps: BatchSteps,
    txid: int,
    watch: StallWatch,
    *,
    deferrable: bool,
    inline_wait_s: float,
    poll_s: float,
    log: logging.Logger | Any,
    states: RunStates | None = None,
) -> bool:
    """Wait, as every commit task does, until ``txid`` may commit (txid-1 committed): whether
    it may now (``True``), or the task should defer to the triggerer (``False``).

    Not ``deferrable``: wait here as long as it takes (polling every ``poll_s``). Deferrable:
    wait here only when txid-1 is staged (its commit is imminent: a deferral's round trip
    through the triggerer and the scheduler would be paid per batch of a chain), up to
    ``inline_wait_s``. Raises :class:`~airflow_trident.errors.BatchStalledError` when txid-1's
    runs cannot make progress.
    """
    committed = steps.store.commits.committed_txid()
    if committed >= txid - 1:
        return True
    if not deferrable:
        committed = wait_for_commit_order(
            steps, txid, watch, deadline=None, poll_s=poll_s, log=log, states=states
        )
    elif steps.is_staged(txid - 1):
        deadline = time.monotonic() + inline_wait_s
        committed = wait_for_commit_order(
            steps, txid, watch, deadline=deadline, poll_s=INLINE_POLL_S, log=log, states=states
        )
    if committed >= txid - 1:
        return True
    log.info("txid %d waits for txid %d (committed: %d)", txid, txid - 1, committed)
    return False
