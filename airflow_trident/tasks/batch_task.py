"""The task object of a batch task: what an operator or a sensor of a batch does, held by it
rather than inherited.

An adapter (:class:`~airflow_trident.operators.batch.BatchStepsOperator`,
:class:`~airflow_trident.tasks.readiness.BatchStepsSensor`,
:class:`~airflow_trident.operators.process.ProcessBatchOperator`) makes a :class:`BatchTask`
from its rendered arguments (:class:`TaskArguments`) and runs its slice of the batch's steps
through the driver (:func:`airflow_trident.batch.driver.drive`) with the handlers the task
object gives (:meth:`BatchTask.handlers`). The task object holds:

* the hook: one :class:`~airflow_trident.hooks.trident.TridentHook` per task, kept while the
  connection ids are the same, and the batch steps it opens;
* the steps: begin (:func:`~airflow_trident.tasks.begin.begin_batch`), process
  (:func:`~airflow_trident.batch.routes.process_by`, on the Spark Connect server unless the
  adapter gives its own route), commit (:func:`~airflow_trident.batch.routes.commit_by` by the
  route ``commit_mode`` picks) and success (the spouts told, the lag gauges emitted);
* the waits: the commit's turn (txid-1 committed) is awaited here or returned as a
  :class:`~airflow_trident.batch.driver.Defer` value, which the adapter turns into Airflow's
  deferral (:meth:`BatchTask.turn_trigger`) and resumes from (:meth:`BatchTask.resumed`);
* where a slice that begins and processes starts again (:meth:`BatchTask.drive`: the driver's
  :func:`~airflow_trident.batch.driver.resume_point`).

What a task records in Airflow beyond its logs and XCom (metrics, asset events) is the
operators' (:mod:`airflow_trident.operators.metrics`), handed in as a :class:`Recording`.

The XCom of a slice is the summary of its first step, with the later steps' in it under their
names (``processed``, ``committed``; success adds nothing): a begin task's is the begin summary,
a commit task's the commit summary, the express task's the begin summary with ``processed``,
``committed`` and ``resumed_at``. A slice that begins and commits keeps its summary in XCom
``begin`` before its commit's wait, so that a drive resumed after a deferral starts from it.

Examples
--------
>>> args = TaskArguments(topology="pkg.flows:wc", staging_root="/stage")
>>> task = BatchTask(args, log=None)
>>> task.hook() is task.hook(), task.commit_route().mode
(True, 'worker')
>>> again = BatchTask.for_arguments(args, log=None, held=task)
>>> again is task
True
>>> other = BatchTask.for_arguments(
...     TaskArguments(topology="pkg.flows:wc", staging_root="/other"), log=None, held=task)
>>> other is task, other.hook() is task.hook()  # the same connections: the same hook
(False, True)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_trident.batch import driver
from airflow_trident.batch.driver import BatchRun, Defer, Handler, Resume
from airflow_trident.batch.order import StallWatch, await_commit_turn
from airflow_trident.batch.routes import BySubmit, CommitRoute, Route, commit_by, process_by
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.hooks import config
from airflow_trident.hooks.dagruns import dagrun_states
from airflow_trident.hooks.spark import JobSubmitter, connect_route
from airflow_trident.hooks.trident import BatchReadiness, TridentHook
from airflow_trident.tasks.base import no_retry_when_stalled, run_id_of
from airflow_trident.tasks.begin import begin_batch
from airflow_trident.triggers.zookeeper import CommittedTxidTrigger

__all__ = [
    "ANNOUNCED",
    "NO_RECORDING",
    "BatchTask",
    "Recording",
    "TaskArguments",
    "held_task",
    "rendered",
]

ANNOUNCED = "begin"
"""The XCom key where a slice that begins and commits keeps its summary before the commit's
wait (the express task's ``begin``)."""

_NAMES = {"process": "processed", "commit": "committed"}
"""Under which key a step's summary joins the summary of an earlier first step."""


@dataclass(frozen=True)
class TaskArguments:
    """A batch task's rendered arguments, as the task object uses them (defaults: the
    operators')."""

    topology: str
    """``package.module:attribute`` of the topology."""
    staging_root: str
    zookeeper_conn_id: str = "trident_zookeeper_default"
    state_conn_id: str | None = None
    keep_txids: int = 16
    begin_task_id: str = "begin"
    """The task whose XCom holds the run's txid (a slice without the begin step reads it)."""
    spark_connect_conn_id: str | None = None
    """The Spark Connect server of the process step and of a Spark commit (``None``: a Spark
    commit is a ``spark-submit`` job)."""
    emit_wait_s: float = 600.0
    commit_mode: str = "worker"
    spark_commit_min_rows: int = 1_000_000
    spark_conn_id: str = "spark_default"
    spark_conf: dict[str, Any] | None = None
    py_files: str | None = None
    commit_deferrable: bool = False
    """Whether the commit's wait for txid-1 may defer to the triggerer."""
    commit_poll_s: float = 2.0
    inline_wait_s: float = 30.0

    @classmethod
    def of(cls, task: Any) -> TaskArguments:
        """The arguments of the adapter ``task``, read from its attributes of the same names
        (absent ones take the defaults). The commit's wait is ``commit_deferrable`` and
        ``commit_poll_interval`` where the task has them (the express task, whose
        ``deferrable`` is its readiness wait's), else ``deferrable`` and ``poll_interval``."""
        defaults = cls(topology="", staging_root="")
        deferrable = getattr(task, "deferrable", defaults.commit_deferrable)
        poll_s = getattr(task, "poll_interval", defaults.commit_poll_s)
        return cls(
            topology=task.topology,
            staging_root=task.staging_root,
            zookeeper_conn_id=task.zookeeper_conn_id,
            state_conn_id=getattr(task, "state_conn_id", None),
            keep_txids=getattr(task, "keep_txids", defaults.keep_txids),
            begin_task_id=getattr(task, "begin_task_id", defaults.begin_task_id),
            spark_connect_conn_id=getattr(task, "spark_connect_conn_id", None),
            emit_wait_s=getattr(task, "emit_wait_s", defaults.emit_wait_s),
            commit_mode=getattr(task, "commit_mode", defaults.commit_mode),
            spark_commit_min_rows=getattr(
                task, "spark_commit_min_rows", defaults.spark_commit_min_rows
            ),
            spark_conn_id=getattr(task, "spark_conn_id", defaults.spark_conn_id),
            spark_conf=getattr(task, "spark_conf", None),
            py_files=getattr(task, "py_files", None),
            commit_deferrable=bool(getattr(task, "commit_deferrable", deferrable)),
            commit_poll_s=getattr(task, "commit_poll_interval", poll_s),
            inline_wait_s=getattr(task, "inline_wait_s", defaults.inline_wait_s),
        )


def _as_is(context: Mapping[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    return summary


def _just_commit(
    context: Mapping[str, Any],
    commit: Callable[[], dict[str, Any]],
    runs_of_txid: Callable[[int], Sequence[str]] | None = None,
    log: Any = None,
) -> dict[str, Any]:
    return commit()


def _no_lag(steps: Any, txid: int, log: Any = None) -> dict[str, int]:
    return {}


@dataclass(frozen=True)
class Recording:
    """What a task records in Airflow of its steps beyond logs and XCom: the process step's
    metrics (``processed(context, summary)``, returning the summary), the commit's metrics and
    asset event around the commit itself (``committed(context, commit, runs_of_txid, log)``)
    and the success step's lag gauges (``lag(steps, txid, log)``). The operators give
    :data:`airflow_trident.operators.metrics.RECORDING`; :data:`NO_RECORDING` records
    nothing."""

    processed: Callable[[Mapping[str, Any], dict[str, Any]], dict[str, Any]] = _as_is
    committed: Callable[
        [
            Mapping[str, Any],
            Callable[[], dict[str, Any]],
            Callable[[int], Sequence[str]] | None,
            Any,
        ],
        dict[str, Any],
    ] = _just_commit
    lag: Callable[[Any, int, Any], dict[str, int]] = _no_lag


NO_RECORDING = Recording()
"""Records nothing (a task that only waits or begins)."""


class BatchTask:
    """What a batch task does (see the module), for its rendered ``arguments``; ``log`` is the
    adapter's logger (every line the task writes goes there), ``hook`` a hook to keep when it
    has the arguments' connection ids."""

    def __init__(
        self,
        arguments: TaskArguments,
        *,
        log: Any,
        recording: Recording = NO_RECORDING,
        hook: TridentHook | None = None,
    ) -> None:
        self.arguments = arguments
        self.log = log
        self.recording = recording
        self._hook = hook
        self._submitter: JobSubmitter | None = None

    @classmethod
    def for_arguments(
        cls,
        arguments: TaskArguments,
        *,
        log: Any,
        recording: Recording = NO_RECORDING,
        held: BatchTask | None = None,
    ) -> BatchTask:
        """The task object for ``arguments``: ``held`` (the one the adapter holds) while its
        arguments are these, else a new one (with ``held``'s hook, which :meth:`hook` keeps
        while the connection ids are the same)."""
        if held is not None and held.arguments == arguments and held.recording == recording:
            return held
        return cls(
            arguments, log=log, recording=recording, hook=None if held is None else held._hook
        )

    # -- the hook and what it opens ----------------------------------------------------------

    def hook(self) -> TridentHook:
        """This task's hook (made on first use, again when the connection ids changed): the
        blocks opened inside ``with task.hook().session():`` share one ZooKeeper session."""
        hook = self._hook
        wanted = (self.arguments.zookeeper_conn_id, self.arguments.state_conn_id)
        if hook is None or (hook.zookeeper_conn_id, hook.state_conn_id) != wanted:
            hook = TridentHook(zookeeper_conn_id=wanted[0], state_conn_id=wanted[1])
            self._hook = hook
        return hook

    def batch_steps(self) -> AbstractContextManager[BatchSteps]:
        """The topology's batch lifecycle, connected for the ``with`` block."""
        a = self.arguments
        return self.hook().batch_steps(
            a.topology, staging_root=a.staging_root, keep_txids=a.keep_txids
        )

    def readiness(self) -> AbstractContextManager[BatchReadiness]:
        """The topology's light readiness handle (the spouts' coordinators and the store)."""
        return self.hook().readiness(self.arguments.topology)

    # -- the commit's route ------------------------------------------------------------------

    def commit_route(self) -> CommitRoute:
        """Which route a commit of this task takes (``commit_mode``)."""
        a = self.arguments
        return CommitRoute(mode=a.commit_mode, spark_commit_min_rows=a.spark_commit_min_rows)

    def spark_route(self) -> Route:
        """The Spark route of this task's commits: its Connect server, else ``spark-submit``."""
        a = self.arguments
        if a.spark_connect_conn_id:
            return connect_route(a.spark_connect_conn_id, a.topology)
        self._submitter = JobSubmitter(
            self.hook(), a.topology, a.staging_root, spark_conn_id=a.spark_conn_id,
            spark_conf=a.spark_conf, py_files=a.py_files,
        )  # fmt: skip
        return BySubmit(self._submitter)

    def on_kill(self) -> None:
        """Stop a running ``spark-submit`` commit (its applied partitions keep their txid)."""
        if self._submitter is not None:
            self._submitter.on_kill()

    # -- the waits ---------------------------------------------------------------------------

    def commit_in_turn(self, context: Any, steps: BatchSteps, txid: int) -> Defer | None:
        """Wait until ``txid`` may commit (txid-1 committed): ``None`` when it may now, else
        the :class:`~airflow_trident.batch.driver.Defer` the adapter defers on
        (:meth:`turn_trigger`). A txid-1 that cannot progress fails the task without retry."""
        a = self.arguments
        watch = StallWatch(context["ti"].dag_id, txid, "commit", run_id=run_id_of(context))
        with no_retry_when_stalled():
            if await_commit_turn(
                steps, txid, watch, deferrable=a.commit_deferrable,
                inline_wait_s=a.inline_wait_s, poll_s=a.commit_poll_s, log=self.log,
                states=dagrun_states,
            ):  # fmt: skip
                return None
        return Defer(txid, "commit")

    def turn_trigger(self, context: Any, topology_name: str, wait: Defer) -> CommittedTxidTrigger:
        """The trigger the adapter defers on for ``wait``: txid-1 of the topology named
        ``topology_name`` committed (or stalled)."""
        return CommittedTxidTrigger(
            zookeeper_conn_id=self.arguments.zookeeper_conn_id,
            topology=topology_name,
            txid=wait.txid - 1,
            poll_interval=self.arguments.commit_poll_s,
            dag_id=context["ti"].dag_id,
            waiting_run_id=run_id_of(context),
        )

    def resumed(self, event: dict[str, Any] | None) -> None:
        """After the trigger: go on, or fail without retry when txid-1 cannot commit."""
        if event is not None and event.get("status") == "stalled":
            message = str(event.get("message"))
            self.log.error("%s", message)
            raise AirflowFailException(message)

    # -- the steps ---------------------------------------------------------------------------

    def process(self, context: Any, steps: BatchSteps, txid: int, route: Route) -> dict[str, Any]:
        """Process ``txid`` by ``route`` (a committed txid processes nothing); the summary,
        recorded."""
        a = self.arguments
        with no_retry_when_stalled():
            summary = process_by(
                route, steps, txid, dag_id=context["ti"].dag_id, run_id=run_id_of(context),
                timeout_s=a.emit_wait_s, log=self.log, states=dagrun_states,
            )  # fmt: skip
        return self.recording.processed(context, summary)

    def connect_route(self) -> Route:
        """The process step's default route: the task's Spark Connect server."""
        a = self.arguments
        return connect_route(str(a.spark_connect_conn_id), a.topology)

    def commit_now(self, context: Any, steps: BatchSteps, txid: int) -> dict[str, Any]:
        """Commit ``txid`` (its turn) by the route, record and log it; the commit summary."""
        summary: dict[str, Any] = self.recording.committed(
            context,
            lambda: commit_by(
                self.commit_route(),
                self.spark_route,
                steps,
                txid,
                log=self.log,
                reference=self.arguments.topology,
            ),
            steps.store.runs.runs_of_txid,
            self.log,
        )
        if summary["applied"]:
            self.log.info(
                "txid %d committed: %d records in, keys written %s; partition ranges %s",
                txid, summary["records_in"], summary["keys_written"],
                str(summary.get("partitions", {}))[:1000],
            )  # fmt: skip
        else:
            self.log.info(
                "txid %d was already committed: state unchanged (committed txid is now %d)",
                txid, steps.store.commits.committed_txid(),
            )  # fmt: skip
        return summary

    def success(self, steps: BatchSteps, txid: int) -> dict[str, Any]:
        """Tell the spouts ``txid`` committed, rotate old metadata away, log it and emit the
        lag gauges; the success summary."""
        summary: dict[str, Any] = steps.success(txid)
        self.log.info("txid %d success: %s", txid, summary)
        self.recording.lag(steps, txid, self.log)
        return summary

    # -- a slice through the driver ----------------------------------------------------------

    def drive(
        self,
        context: Any,
        steps: BatchSteps,
        batch_slice: Sequence[str],
        run: BatchRun,
        *,
        start: str | None = None,
        process_route: Callable[[], Route] | None = None,
    ) -> Defer | None:
        """Run ``batch_slice`` (its readiness is the adapter's) on ``run`` through the driver,
        from ``start`` (default: :func:`~airflow_trident.batch.driver.start_step` of the run's
        resume point); the :class:`~airflow_trident.batch.driver.Defer` a step returned, if
        any. ``process_route`` makes the process step's route (default: :meth:`connect_route`).
        """
        if start is None:
            start = self._start(context, steps, batch_slice, run)
        handlers = self.handlers(context, steps, batch_slice, process_route=process_route)
        outcome = driver.drive(batch_slice, handlers, run, start=start)
        return outcome if isinstance(outcome, Defer) else None

    def run_slice(
        self, context: Any, batch_slice: Sequence[str], run: BatchRun, *, start: str | None = None
    ) -> tuple[CommittedTxidTrigger, str] | None:
        """:meth:`drive` ``batch_slice`` on the topology's steps, connected for it; when a step
        must wait for txid-1's commit in the triggerer, the trigger to defer on and the step to
        drive again from, else ``None``."""
        with self.batch_steps() as steps:
            wait = self.drive(context, steps, batch_slice, run, start=start)
            name = steps.topology.name
        return None if wait is None else (self.turn_trigger(context, name, wait), wait.step)

    def _start(
        self, context: Any, steps: BatchSteps, batch_slice: Sequence[str], run: BatchRun
    ) -> str:
        """Where a fresh drive of ``batch_slice`` starts. Only a slice that begins and
        processes starts at its run's resume point (``start_step`` ignores it otherwise, so it
        is read only then); past its begin, the run resumes with the bound txid's summary,
        logged and announced."""
        if not {"begin", "process"} <= set(batch_slice):
            return driver.start_step(batch_slice, Resume("begin", None))
        dag_run = context["dag_run"]
        resume = driver.resume_point(steps, dag_run.run_id, (dag_run.conf or {}).get("txid"))
        start = driver.start_step(batch_slice, resume)
        if start != "begin" and resume.txid is not None:
            self._resume(context, steps, resume, run)
        return start

    def _resume(self, context: Any, steps: BatchSteps, resume: Resume, run: BatchRun) -> None:
        txid = int(resume.txid or 0)
        attempt = steps.store.attempts.attempt(txid)
        staged = None if attempt is None else attempt.attempt_id
        committed = resume.step == "success"
        run.txid = txid
        run.summary = {
            "txid": txid,
            # the staged processing attempt; a committed txid's from the ledger (a replay's
            # begin raised ZooKeeper's counter since)
            "attempt_id": (steps.begins.committed_attempt(txid) or staged) if committed else staged,
            "run_id": context["dag_run"].run_id,
            "committed_txid": steps.store.commits.committed_txid(),
        }
        self.log.info(
            "run %s resumes txid %d at its %s (attempt %s %s)",
            run.summary["run_id"], txid, resume.step, run.summary["attempt_id"] or "-",
            "committed" if committed else "staged",
        )  # fmt: skip
        self._announce(context, run, resume.step)

    @staticmethod
    def _announce(context: Any, run: BatchRun, resumed_at: str) -> None:
        """Keep the summary in XCom :data:`ANNOUNCED` before the commit's wait."""
        run.summary["resumed_at"] = resumed_at
        context["ti"].xcom_push(key=ANNOUNCED, value=run.summary)

    @staticmethod
    def announced(context: Any, task_id: str) -> BatchRun:
        """The run a slice that begins and commits announced before its commit's wait."""
        summary = context["ti"].xcom_pull(task_ids=task_id, key=ANNOUNCED)
        return BatchRun(int(summary["txid"]), dict(summary))

    def handlers(
        self,
        context: Any,
        steps: BatchSteps,
        batch_slice: Sequence[str],
        *,
        process_route: Callable[[], Route] | None = None,
    ) -> dict[str, Handler]:
        """The driver's handlers of ``batch_slice``'s steps (readiness is the adapter's)."""
        first = next(step for step in batch_slice if step != "ready")
        announces = "begin" in batch_slice and "commit" in batch_slice

        def keep(run: BatchRun, step: str, summary: dict[str, Any]) -> None:
            if step == first:
                run.summary = summary
            elif step in _NAMES:
                run.summary[_NAMES[step]] = summary

        def begin(run: BatchRun) -> None:
            run.summary = begin_batch(context, steps, self.log)
            run.txid = int(run.summary["txid"])

        def process(run: BatchRun) -> None:
            txid = _txid(run)
            # after its begin, a committed txid processes nothing (the begin said so)
            if first == "process" or not steps.is_committed(txid):
                route = (process_route or self.connect_route)()
                processed = self.process(context, steps, txid, route)
                keep(run, "process", processed)
                if first != "process":  # the attempt the processing got (the note reads it)
                    run.summary["attempt_id"] = processed.get(
                        "attempt_id", run.summary["attempt_id"])  # fmt: skip
            if announces:
                self._announce(context, run, "begin")

        def commit(run: BatchRun) -> Defer | None:
            txid = _txid(run)
            wait = self.commit_in_turn(context, steps, txid)
            if wait is not None:
                return wait
            keep(run, "commit", self.commit_now(context, steps, txid))
            return None

        def success(run: BatchRun) -> None:
            keep(run, "success", self.success(steps, _txid(run)))

        every: dict[str, Handler] = {
            "begin": begin, "process": process, "commit": commit, "success": success,
        }  # fmt: skip
        return {step: every[step] for step in batch_slice if step in every}


def _txid(run: BatchRun) -> int:
    if run.txid is None:  # pragma: no cover - every slice knows its txid before these steps
        msg = "the batch's txid is not known yet"
        raise RuntimeError(msg)
    return run.txid


def held_task(adapter: Any) -> BatchTask:
    """The task object of ``adapter`` (an operator or a sensor with the batch's arguments as
    attributes, its ``log``, ``recording`` and ``_batch_task``) for its rendered arguments:
    the one it holds while they are the same, else a new one, which it then holds."""
    adapter._batch_task = BatchTask.for_arguments(
        TaskArguments.of(adapter), log=adapter.log, recording=adapter.recording,
        held=adapter._batch_task,
    )  # fmt: skip
    task: BatchTask = adapter._batch_task
    return task


def rendered(adapter: Any, render: Callable[[Any, Any], None], context: Any, env: Any) -> None:
    """Render ``adapter``'s templated fields (``render``: its Airflow base's
    ``render_template_fields``), then resolve a staging root the DAG did not give (``[trident]
    staging_root``, ...: :func:`~airflow_trident.hooks.config.staging_root`): in the task, never
    when the DAG file is parsed."""
    render(context, env)
    adapter.staging_root = config.staging_root(adapter.staging_root)
