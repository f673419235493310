"""The generic sensor of a batch (:class:`BatchStepsSensor`): a task whose slice of the batch's
steps starts with readiness — it waits until every spout's coordinator says the next batch may
start, then runs the rest of its slice through the driver. The readiness sensor (the slice
``ready``), the compact layout's begin-when-ready sensor (``ready``, ``begin``) and the express
layout's whole-batch task (every step) are it with their slice preset.

A run that replays a txid (``conf["txid"]``, or a cleared run already bound to one) does not
wait: its batch is fixed already and needs no new data.

It also tells why a run will not go on after it: begins run in logical-date order and commits in
txid order (both ``depends_on_past``), so when an earlier run's begin, process or commit failed,
this run waits with no word from Airflow beyond "No tasks to run". The sensor walks back over
the earlier runs (by logical date) and, finding one with a failed task, logs a warning naming
that run, its task and the exact fix, and pushes the same as XCom ``blocked_by`` (the task's
XCom tab in the UI). A run that would begin a *new* txid behind such a failed run is skipped
instead (no txid taken): begun, it could only wait, holding one of the DAG's
``max_active_runs`` slots, which the failed run needs to start again once it is cleared.

Which earlier tasks block a run is the layout's (:meth:`Layout.blocking_task_ids
<airflow_trident.batch.layouts.Layout.blocking_task_ids>`): the sensor's layout is the one
whose task runs its slice.

A task opens one ZooKeeper session (its task object's
:class:`~airflow_trident.hooks.trident.TridentHook`) and, for its pokes, the hook's light
readiness handle: the spouts' coordinators and the coordinator store, not the batch lifecycle
(no committer, no interpreter, no state database). After readiness, the rest of the slice runs
as :class:`~airflow_trident.tasks.batch_task.BatchTask` says; a commit's wait for txid-1 may
defer (resumed in ``commit_complete``), as the readiness wait may (``execute_complete``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowSkipException

from airflow_trident.batch.driver import BatchRun
from airflow_trident.batch.layouts import LAYOUTS, Layout
from airflow_trident.tasks.base import default_deferrable, moved
from airflow_trident.tasks.batch_task import (
    NO_RECORDING,
    BatchTask,
    Recording,
    held_task,
    rendered,
)
from airflow_trident.triggers.zookeeper import BatchReadyTrigger

__all__ = ["BatchStepsSensor", "blocking_fix"]

_MOVED = {"ReadinessWait": "airflow_trident.tasks.readiness.BatchStepsSensor"}


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _MOVED)


BLOCKING_STATES = ("failed", "upstream_failed")
LOOKBACK_RUNS = 8
"""How many earlier runs the sensor inspects (a blocked chain is at most ``max_active_runs``
long: later runs do not start)."""


def blocking_fix(
    dag_id: str, run_id: str, task_id: str, logical_date: str, txid: int | None
) -> str:
    """What to do about run ``run_id`` whose task ``task_id`` failed and blocks later runs.

    ``txid`` is the txid bound to that run (``None``: its begin bound none).

    >>> print(blocking_fix("wc", "scheduled__1", "batch.commit", "2026-01-01T00:00:00+00:00", 4))
    clear its failed tasks so they retry (a retry keeps txid 4): `airflow dags clear wc --run-id \
scheduled__1 --only-failed --yes`, or `airflow tasks clear wc -t '^batch\\.commit$' --downstream \
-s 2026-01-01T00:00:00+00:00 -e 2026-01-01T00:00:00+00:00 --yes`, or in the UI: Grid > run \
scheduled__1 > batch.commit > Clear (with Downstream). Do not mark it success: no later txid can \
commit before txid 4; if it keeps failing, replay txid 4 in a new run: `airflow dags trigger wc \
--conf '{"txid": 4}'`
    """
    pattern = "^" + task_id.replace(".", "\\.") + "$"
    retry = f" (a retry keeps txid {txid})" if txid is not None else ""
    fix = (
        f"clear its failed tasks so they retry{retry}: `airflow dags clear {dag_id} --run-id "
        f"{run_id} --only-failed --yes`, or `airflow tasks clear {dag_id} -t '{pattern}' "
        f"--downstream -s {logical_date} -e {logical_date} --yes`, or in the UI: Grid > run "
        f"{run_id} > {task_id} > Clear (with Downstream). "
    )
    if txid is None:
        return fix + (
            f"To skip that batch instead, mark {task_id} of {run_id} success: no txid was bound "
            f"to it, so nothing waits for it"
        )
    replay = f"`airflow dags trigger {dag_id} --conf '{json.dumps({'txid': txid})}'`"
    if task_id.rpartition(".")[2] == "begin":
        return fix + (
            f"Marking {task_id} success instead only lets later begins start: txid {txid} must "
            f"still commit before any later txid (replay it in a new run: {replay})"
        )
    return fix + (
        f"Do not mark it success: no later txid can commit before txid {txid}; if it keeps "
        f"failing, replay txid {txid} in a new run: {replay}"
    )


class BatchStepsSensor(BaseSensorOperator):
    """Poke (or defer to the triggerer) until the topology's spouts are ready (``is_ready``),
    then run the rest of the slice ``batch_slice`` (a class's preset: readiness alone by
    default); replays go on at once, a new batch behind a failed run is skipped. XCom: the
    slice's summary (:mod:`~airflow_trident.tasks.batch_task`; none for readiness alone).

    :param topology: ``package.module:attribute`` of the topology (templated).
    :param staging_root: the staging root (templated).
    :param zookeeper_conn_id: the ``trident_zookeeper`` connection (templated).
    :param deferrable: wait in the triggerer instead of a worker slot; ``None`` (the default):
        Airflow's ``[operators] default_deferrable``.
    """

    template_fields: Sequence[str] = ("topology", "staging_root", "zookeeper_conn_id")
    ui_color = "#f0e8fd"
    batch_slice: tuple[str, ...] = ("ready",)
    """The steps this task runs, from readiness on (a contiguous slice of the driver's)."""
    recording: Recording = NO_RECORDING
    """What the task records in Airflow of its steps (the operators' metrics, for a slice
    that processes or commits)."""
    _batch_task: BatchTask | None = None

    def __init__(
        self,
        *,
        topology: str,
        staging_root: str,
        zookeeper_conn_id: str = "trident_zookeeper_default",
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.topology = topology
        self.staging_root = staging_root
        self.zookeeper_conn_id = zookeeper_conn_id
        self.deferrable = default_deferrable() if deferrable is None else deferrable

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        rendered(self, super().render_template_fields, context, jinja_env)

    def batch_task(self) -> BatchTask:
        """This task's task object (:func:`~airflow_trident.tasks.batch_task.held_task`)."""
        return held_task(self)

    def _ready(self) -> bool:
        with self.batch_task().readiness() as readiness:
            return readiness.is_ready()

    def execute(self, context: Any) -> Any:
        with self.batch_task().hook().session():  # one ZooKeeper session for the task's checks
            self._wait(context)  # returns once ready (or reschedules, defers, skips)
            return self._drive(context)

    def _drive(self, context: Any, *, start: str | None = None, run: BatchRun | None = None) -> Any:
        """Run the slice after readiness (from ``start``; default: where the run resumes);
        defer when its commit must wait in the triggerer. Its XCom."""
        if all(step == "ready" for step in self.batch_slice):
            return None  # readiness alone
        task = self.batch_task()
        run = run or BatchRun()
        deferral = task.run_slice(context, self.batch_slice, run, start=start)
        if deferral is not None:
            trigger, step = deferral
            self.defer(trigger=trigger, method_name="commit_complete", kwargs={"step": step})
        return run.summary

    def commit_complete(
        self, context: Any, event: dict[str, Any] | None = None, step: str = "commit"
    ) -> Any:
        """Resume after the trigger saw txid-1 committed (or fail: txid-1 cannot commit), from
        ``step`` with the summary the slice announced before its wait."""
        task = self.batch_task()
        task.resumed(event)
        run = task.announced(context, self.task_id)
        with task.hook().session():
            return self._drive(context, start=step, run=run)

    def on_kill(self) -> None:
        """Stop a running ``spark-submit`` commit (its applied partitions keep their txid)."""
        if self._batch_task is not None:
            self._batch_task.on_kill()

    def _wait(self, context: Any) -> Any:
        replayed = self._replayed_txid(context)
        if replayed is not None:
            # a replay's batch is fixed already (its metadata is in ZooKeeper): it needs no new
            # data, and waiting for some would hold a cleared or replayed run back for ever
            self.log.info("run %s replays txid %d: no wait for new data", _run(context), replayed)
            return None
        blocked = self.report_blocking_run(context)
        if blocked is not None and self._blocks_new_batches(blocked):
            # Begun, this batch could only wait for the failed one, holding a slot of
            # max_active_runs that the failed run needs once cleared; no txid is taken.
            message = (
                f"run {context['dag_run'].run_id} skipped: no new batch begins while the "
                f"earlier run {blocked['run_id']} has {blocked['task_id']} {blocked['state']} "
                f"(it would only wait, holding a run slot the failed run needs once cleared). "
                f"No txid was taken: later runs read the data this one would have. Fix: "
                f"{blocked['fix']}"
            )
            self.log.warning("%s", message)
            raise AirflowSkipException(message)
        if not self.deferrable or self._ready():
            return super().execute(context)
        self.defer(
            trigger=BatchReadyTrigger(
                topology=self.topology,
                zookeeper_conn_id=self.zookeeper_conn_id,
                staging_root=self.staging_root,
                poll_interval=self.poke_interval,
            ),
            method_name="execute_complete",
        )
        return None  # pragma: no cover - defer() raises

    def poke(self, context: Any) -> bool:
        return self._ready()

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger saw the spouts ready."""
        self.log.info("spouts ready: %s", event)
        with self.batch_task().hook().session():
            return self._drive(context)

    # -- why a later task of this run would wait --------------------------------------------------

    def _replayed_txid(self, context: Any) -> int | None:
        """The txid this run replays: its ``conf["txid"]``, or the txid a cleared run is bound
        to already; ``None`` for a run that begins a new batch."""
        conf = getattr(context.get("dag_run"), "conf", None) or {}
        if conf.get("txid") is not None:
            return int(conf["txid"])
        return self._txid_of(_run(context))

    def _blocks_new_batches(self, blocked: dict[str, Any]) -> bool:
        """Whether ``blocked``'s txid is still uncommitted (or it has none), so that a new txid
        begun behind it could only wait. Replays and cleared runs never get here (``execute``
        lets them go on first)."""
        txid = blocked.get("txid")
        if txid is None:
            return True
        with self.batch_task().readiness() as readiness:
            return int(txid) > readiness.store.commits.committed_txid()

    def layout(self) -> Layout:
        """The layout whose task runs this sensor's slice (the standard one for a slice no
        layout has)."""
        for layout in LAYOUTS.values():
            if any(task.steps == self.batch_slice for task in layout.tasks):
                return layout
        return LAYOUTS["standard"]

    def _own_id(self, task_id: str) -> str:
        """``task_id`` (a task of this batch's group, by its layout's name) as this batch
        names it: this sensor's own id for the layout's task of its slice."""
        group = self.task_id.rpartition(".")[0]
        own = next((t for t in self.layout().tasks if t.steps == self.batch_slice), None)
        if own is not None and task_id == (f"{group}.{own.task_id}" if group else own.task_id):
            return self.task_id
        return task_id

    def report_blocking_run(self, context: Any) -> dict[str, Any] | None:
        """Warn (log and XCom ``blocked_by``) when an earlier run's failed task blocks this run.

        Returns what was reported, ``None`` when nothing blocks. Never fails the sensor: the
        check is advice, and a failure to make it is only logged.
        """
        try:
            found = self._find_blocking_run(context)
            if found is None:
                return None
            run_id, task_id, state, logical_date = found
            txid = self._txid_of(run_id)
        except Exception as exc:  # advice only: readiness must never depend on it
            self.log.warning("could not check the earlier runs for a failed batch: %s", exc)
            return None
        dag_id = context["ti"].dag_id
        blocked = {
            "run_id": run_id,
            "task_id": task_id,
            "state": state,
            "logical_date": logical_date,
            "txid": txid,
            "fix": blocking_fix(dag_id, run_id, task_id, logical_date, txid),
        }
        begins = self.layout().task_for("begin")  # a failed begin alone holds later begins
        waits = (
            "its begin waits (begins run in logical-date order)"
            if task_id == self.blocking_task_ids()[0] and not begins.runs("commit")
            else "its commit waits (commits run in txid order)"
        )
        self.log.warning(
            "run %s is blocked: the earlier run %s (logical date %s%s) has %s %s, so %s. Fix: %s",
            context["dag_run"].run_id,
            run_id,
            logical_date,
            "" if txid is None else f", txid {txid}",
            task_id,
            state,
            waits,
            blocked["fix"],
        )
        context["ti"].xcom_push(key="blocked_by", value=blocked)
        return blocked

    def blocking_task_ids(self) -> list[str]:
        """The batch's tasks whose failure blocks later runs, in step order (the last one
        succeeded: the batch committed): :meth:`Layout.blocking_task_ids
        <airflow_trident.batch.layouts.Layout.blocking_task_ids>` of this sensor's layout
        (the standard and compact layouts' begin, process and commit; the express layout's one
        task)."""
        group = self.task_id.rpartition(".")[0]
        return [self._own_id(task_id) for task_id in self.layout().blocking_task_ids(group)]

    def _find_blocking_run(self, context: Any) -> tuple[str, str, str, str] | None:
        """The nearest earlier run (by logical date) with a failed begin, process or commit."""
        ti = context["ti"]
        tasks = self.blocking_task_ids()
        date = context["dag_run"].logical_date
        if date is None and _run_type(context) == "asset_triggered":
            # an event-driven run (schedule="on_data") has no order by date: ask ZooKeeper
            return self._failed_pending_run(ti, tasks)
        for _ in range(LOOKBACK_RUNS):
            if date is None:
                return None
            previous = _previous_run(ti.dag_id, date)
            if previous is None:
                return None
            states = ti.get_task_states(
                dag_id=ti.dag_id, task_ids=tasks, run_ids=[previous.run_id]
            ).get(previous.run_id, {})
            for task in tasks:
                if states.get(task) in BLOCKING_STATES:
                    return previous.run_id, task, str(states[task]), _iso(previous.logical_date)
            if states.get(tasks[-1]) == "success":  # committed: every earlier txid committed
                return None
            date = previous.logical_date
        return None

    def _failed_pending_run(self, ti: Any, tasks: list[str]) -> tuple[str, str, str, str] | None:
        """For a run with no logical date (event-driven or manual): the failed run bound to the
        oldest uncommitted txid, when every run bound to it has ended failed (as the commit's
        stall check decides, :mod:`airflow_trident.batch.order`)."""
        from airflow_trident.hooks.dagruns import dagrun_states

        with self.batch_task().readiness() as readiness:
            pending = readiness.store.commits.committed_txid() + 1
            if readiness.store.runs.current_txid() < pending:
                return None
            runs = list(readiness.store.runs.runs_of_txid(pending))
        states = dagrun_states(ti.dag_id, runs)
        if not runs or any(state != "failed" for state in states.values()):
            return None
        run_id = runs[-1]
        task_states = ti.get_task_states(dag_id=ti.dag_id, task_ids=tasks, run_ids=[run_id])
        found = task_states.get(run_id, {})
        for task in tasks:
            if found.get(task) in BLOCKING_STATES:
                return run_id, task, str(found[task]), ""
        return None

    def _txid_of(self, run_id: str) -> int | None:
        with self.batch_task().readiness() as readiness:
            txid: int | None = readiness.store.runs.txid_for_run(run_id)
            return txid


def _run_type(context: Any) -> str:
    run_type = getattr(context.get("dag_run"), "run_type", None)
    return str(getattr(run_type, "value", run_type))


def _run(context: Any) -> str:
    return str(context["dag_run"].run_id)


def _previous_run(dag_id: str, logical_date: datetime) -> Any:
    """The run of ``dag_id`` just before ``logical_date``, through the Task Execution API
    (what ``RuntimeTaskInstance.get_previous_dagrun`` asks, from any date)."""
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.comms import GetPreviousDagRun

    response = task_runner.SUPERVISOR_COMMS.send(
        GetPreviousDagRun(dag_id=dag_id, logical_date=logical_date)
    )
    return getattr(response, "dag_run", None)


def _iso(moment: datetime | None) -> str:
    return "" if moment is None else moment.isoformat()
