"""The lifecycle driver: the one place that orders a batch's steps and decides where a retried,
cleared or replayed run resumes.

A batch runs :data:`STEPS` in this order, whatever runs them: the in-process runner
(:meth:`BatchSteps.run_batch <airflow_trident.batch.steps.BatchSteps.run_batch>`), the
express layout's one task, or a layout's tasks each running a slice
(:mod:`airflow_trident.batch.layouts`). An adapter gives a handler per step of its slice and
calls :func:`drive`; the driver runs them in order from the step it was told to start at
(:func:`start_step`), and stops early when a handler returns :class:`Defer` ("this txid must
wait for txid-1's commit, and this process should not hold on": the adapter turns that value
into Airflow's deferral and drives again from :attr:`Defer.step` when it resumes) or
:class:`Done` (nothing later is needed). Nothing here knows Airflow.

Where a slice that begins and processes starts again (:func:`resume_point`): a run bound to
no txid (or replaying another one) begins; a bound txid that is committed goes to its success
step (through its commit, a no-op that reports it, when the slice commits); one whose current
attempt is staged goes straight to its commit (not processed again); otherwise it begins again
(re-binding the same txid) and processes a new attempt.

Examples
--------
>>> done = []
>>> handlers = {step: (lambda s: lambda run: done.append(s))(step) for step in STEPS}
>>> drive(("begin", "process", "commit", "success"), handlers, BatchRun())
>>> done
['begin', 'process', 'commit', 'success']
>>> handlers["commit"] = lambda run: Defer(run.txid or 0, "commit")
>>> done.clear(); drive(STEPS[1:], handlers, BatchRun(txid=4))
Defer(txid=4, step='commit')
>>> done
['begin', 'process']
>>> start_step(("commit", "success"), Resume("success", 4))  # a commit task commits (a no-op)
'commit'
>>> start_step(STEPS, Resume("commit", 4))  # the whole batch: staged, so straight to commit
'commit'
>>> start_step(STEPS, Resume("success", 4))  # committed: its commit reports it (a no-op)
'commit'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "STEPS",
    "BatchRun",
    "Defer",
    "Done",
    "Progress",
    "Resume",
    "drive",
    "resume_point",
    "start_step",
]

STEPS = ("ready", "begin", "process", "commit", "success")
"""A batch's steps, in the one order they run."""


@dataclass(frozen=True)
class Resume:
    """Where a slice that begins and processes starts: ``step`` (``"begin"``, ``"commit"`` or
    ``"success"``) for the run's bound ``txid`` (``None``: bound to none yet)."""

    step: str
    txid: int | None


@dataclass(frozen=True)
class Defer:
    """A value a step returns: txid ``txid`` waits for txid-1's commit, which this process
    should not wait for; the adapter defers and drives again from ``step``."""

    txid: int
    step: str


@dataclass(frozen=True)
class Done:
    """A value a step returns: the batch needs none of the later steps (``why``: e.g. a replay
    of a committed txid, run in process)."""

    why: str


@dataclass
class BatchRun:
    """What a drive carries from step to step: the txid once known and the summary the
    adapter reports (its XCom)."""

    txid: int | None = None
    summary: dict[str, Any] = field(default_factory=dict)


Handler = Callable[[BatchRun], "Defer | Done | None"]


class Progress(Protocol):
    """What :func:`resume_point` reads of a batch's progress (the coordinator store and the
    staging manifests, through :class:`~airflow_trident.batch.steps.BatchSteps`)."""

    def bound_txid(self, run_id: str) -> int | None:
        """The txid bound to ``run_id``, if any."""
        ...

    def is_committed(self, txid: int) -> bool:
        """Whether ``txid`` is committed."""
        ...

    def is_staged(self, txid: int) -> bool:
        """Whether ``txid``'s current attempt is staged."""
        ...


def resume_point(progress: Progress, run_id: str, conf_txid: int | None) -> Resume:
    """Where the run ``run_id`` (replaying ``conf_txid``, if given) resumes (see the module)."""
    txid = progress.bound_txid(run_id)
    if txid is None or (conf_txid is not None and conf_txid != txid):
        return Resume("begin", None)
    if progress.is_committed(txid):
        return Resume("success", txid)
    if progress.is_staged(txid):
        return Resume("commit", txid)
    return Resume("begin", txid)


def start_step(steps: Sequence[str], resume: Resume) -> str:
    """The step a slice of ``steps`` starts at: the resume point when the slice begins and
    processes (it holds both, so it knows what a retry already did), else its first step after
    readiness (a task of one phase runs its phase again; each step is safe to repeat). A
    committed txid's slice that commits starts at its commit all the same: a no-op that reports
    it (the commit summary, ``applied`` false), then the success step."""
    if {"begin", "process"} <= set(steps) and resume.step in steps:
        if resume.step == "success" and "commit" in steps:
            return "commit"
        return resume.step
    return next(s for s in steps if s != "ready")


def drive(
    steps: Sequence[str],
    handlers: Mapping[str, Handler],
    run: BatchRun,
    *,
    start: str | None = None,
) -> Defer | Done | None:
    """Run the handlers of ``steps`` (a slice of :data:`STEPS`) in order, from ``start``
    (default: the slice's first step after readiness, which the adapter waits for itself);
    ``None`` once the last ran, or the :class:`Defer` or :class:`Done` a step returned.

    Raises
    ------
    ValueError
        If ``steps`` is not in :data:`STEPS`' order or lacks ``start``, or a step of the slice
        has no handler.
    """
    order = [s for s in STEPS if s in steps]
    if list(steps) != order:
        msg = f"steps {tuple(steps)} are not in the batch's order {STEPS}"
        raise ValueError(msg)
    first = start or next(s for s in order if s != "ready")
    if first not in order:
        msg = f"cannot start at {first!r}: this slice runs {tuple(order)}"
        raise ValueError(msg)
    for step in order[order.index(first) :]:
        if step == "ready" and step not in handlers:
            continue  # the adapter's own wait (a sensor's poke or deferral)
        try:
            handler = handlers[step]
        except KeyError:
            msg = f"no handler for step {step!r} of {tuple(order)}"
            raise ValueError(msg) from None
        outcome = handler(run)
        if outcome is not None:
            return outcome
    return None
