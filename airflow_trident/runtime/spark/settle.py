"""A Spark job whose tasks write to a state must not leave tasks writing after it failed.

When one task of a job fails, Spark aborts the job at once, but the job's other running tasks
only stop later: a task in a Python worker is killed after ``spark.python.task.killTimeout``
(2 s by default; longer on a loaded machine), and one that was about to finish writes its
partition first. A commit that raised while such a task still writes could be retried (or its
state read, or reverted for an opaque state) while the old attempt's partition lands after it.

:func:`settled_job` runs the job in a job group of its own (the Spark UI shows its
description) and, when the job raises, cancels the group and waits until every task the job
started has ended before the error goes on. The wait reads Spark's status tracker, which a
classic session has; a Spark Connect client has none: there the error goes on at once
(docs/operations.md, "A failed Spark commit leaves nothing writing").

>>> from contextlib import nullcontext
>>> isinstance(settled_job(object(), "commit txid 1"), type(nullcontext()))
True
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

from airflow_trident.runtime.spark.session import is_connect

log = logging.getLogger(__name__)

#: How long a failed job's tasks may take to end before the error goes on anyway (seconds).
SETTLE_TIMEOUT_S = 120.0
_POLL_S = 0.1
_GROUP = "spark.jobGroup.id"
_DESCRIPTION = "spark.job.description"
_INTERRUPT = "spark.job.interruptOnCancel"


def settled_job(spark: Any, description: str) -> contextlib.AbstractContextManager[None]:
    """A context that runs the Spark jobs started in it in one job group of ``description``;
    when its body raises, the group's tasks have all ended before the error leaves it.

    A session with no status tracker (Spark Connect, or not a Spark session) gets a context
    that does nothing (Connect: see the module's docs)."""
    context = _classic_context(spark)
    if context is None:
        return contextlib.nullcontext()
    return _settled(context, description)


def _classic_context(spark: Any) -> Any | None:
    if is_connect(spark):
        return None
    context = getattr(spark, "sparkContext", None)
    return context if hasattr(context, "statusTracker") else None


@contextlib.contextmanager
def _settled(sc: Any, description: str) -> Iterator[None]:
    group = f"trident-{uuid.uuid4().hex[:12]}"
    before = {key: sc.getLocalProperty(key) for key in (_GROUP, _DESCRIPTION, _INTERRUPT)}
    sc.setJobGroup(group, description, interruptOnCancel=True)
    try:
        yield
    except BaseException:
        sc.cancelJobGroup(group)
        _wait_for_tasks(sc, group, description)
        raise
    finally:
        for key, value in before.items():
            sc.setLocalProperty(key, value)


def _wait_for_tasks(sc: Any, group: str, description: str) -> None:
    """Until the group's jobs are over and none of their stages runs a task (bounded)."""
    tracker = sc.statusTracker()
    started = time.monotonic()
    deadline = started + SETTLE_TIMEOUT_S
    while (running := _running_tasks(tracker, group)) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    waited = time.monotonic() - started
    if running:
        log.warning(
            "%s: %d tasks of the failed Spark job still run after %.0f s; going on with the "
            "error (a retry of a commit is safe: each partition keeps its txid)",
            description, running, waited,
        )  # fmt: skip
    elif waited >= 1.0:
        log.info("%s: the failed Spark job's last tasks ended after %.1f s", description, waited)


def _running_tasks(tracker: Any, group: str) -> int:
    """Tasks still running in ``group``'s jobs; a job not yet over counts as one (its task
    start events may still be on Spark's listener bus)."""
    running = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        if job is None:
            continue
        if job.status in ("RUNNING", "UNKNOWN"):
            running += 1
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                running += stage.numActiveTasks
    return running
