"""A real Airflow (scheduler, DAG processor, triggerer, API server; LocalExecutor) for tests and
benchmarks, on an isolated ``AIRFLOW_HOME`` whose metadata database is a fresh PostgreSQL
database.

:func:`running_airflow` creates the database (a copy of a template migrated once per process),
starts the four components in one process group of their own, waits until the API server
reports every component healthy and the DAG files are parsed, and on exit kills the group with
SIGKILL (SIGTERM leaves orphans) and drops the database. Task processes put themselves in
process groups of their own (the Task SDK's supervisor does), so the exit also SIGKILLs every
process still carrying this cluster's marker variable in its environment (a task's
``spark-submit`` JVM and Python driver included).

The API server runs with ``[core] simple_auth_manager_all_admins`` (no login) bound to
127.0.0.1 on a free port; :class:`AirflowCluster` drives it over REST (unpause, trigger) and reads
run and task-instance timings straight from the metadata database. This module does not import
``airflow``.

``executor="CeleryExecutor"`` runs the tasks on Celery instead: a private ``redis-server`` (the
broker) on a free loopback port and ``celery_workers`` ``airflow celery worker`` processes join
the same process group; the Celery results go to the metadata database. Each worker has its own
Celery node name and pid file, and writes ``worker<N>`` as its task instances' ``hostname`` (see
:func:`worker_hostname`), so tests can tell which worker ran what; the workers serve no logs
(task logs are local files the API server reads).

Example (not run here: it needs PostgreSQL, and takes ~30 s to start)::

    with running_airflow(tmp / "af", pg_url=os.environ["TRIDENT_PG_URL"], dags_folder=dags,
                         env={"AIRFLOW_CONN_SPARK_LOCAL": ...}, expect_dags=["my_dag"]) as af:
        af.unpause("my_dag")
        run_ids = [af.trigger("my_dag") for _ in range(5)]
        runs = af.wait_for_runs("my_dag", run_ids, timeout_s=600)
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import URL, make_url

from tests.harness.airflow import AirflowHome, migrate_home, prepare_airflow_home, run_airflow
from tests.harness.ports import free_port as _free_port

__all__ = [
    "COMPONENTS",
    "AirflowCluster",
    "RunInfo",
    "TaskInstanceInfo",
    "running_airflow",
    "worker_hostname",
]

COMPONENTS: tuple[str, ...] = ("api-server", "scheduler", "dag-processor", "triggerer")
"""What ``airflow standalone`` runs, started one by one so each gets its own log file."""

MARKER_ENV = "TRIDENT_AIRFLOW_CLUSTER"
WORKER_HOSTNAME_ENV = "TRIDENT_WORKER_HOSTNAME"
_FINISHED = frozenset({"success", "failed"})


@dataclass(frozen=True)
class RunInfo:
    """One DAG run, as the metadata database has it (timestamps are aware, UTC)."""

    run_id: str
    state: str
    queued_at: datetime | None
    start_date: datetime | None
    end_date: datetime | None


@dataclass(frozen=True)
class TaskInstanceInfo:
    """One task instance (its latest try), as the metadata database has it."""

    run_id: str
    task_id: str
    state: str | None
    try_number: int
    start_date: datetime | None
    end_date: datetime | None


def worker_hostname() -> str:
    """The ``[core] hostname_callable`` of the Celery workers :func:`running_airflow` starts:
    ``$TRIDENT_WORKER_HOSTNAME`` (``worker1``, ``worker2``...), else the machine's FQDN.

    >>> worker_hostname() == (os.environ.get("TRIDENT_WORKER_HOSTNAME") or socket.getfqdn())
    True
    """
    return os.environ.get(WORKER_HOSTNAME_ENV) or socket.getfqdn()


def _render(url: URL, driver: str) -> str:
    rendered: str = url.set(drivername=f"postgresql+{driver}").render_as_string(hide_password=False)
    return rendered


def _connect(url: URL, database: str | None = None) -> psycopg.Connection[Any]:
    return psycopg.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 5432,
        user=url.username,
        password=url.password,
        dbname=database or url.database,
        autocommit=True,
    )


@dataclass
class AirflowCluster:
    """A running Airflow; use :func:`running_airflow` to get one.

    Attributes
    ----------
    home:
        Its home (``home.env()`` is the environment of its processes).
    metadata_url:
        SQLAlchemy URL of its metadata database (carries the password: keep it out of logs).
    api_url:
        Base URL of its API server (``http://127.0.0.1:PORT``).
    log_dir:
        Where each component writes ``<component>.log``; task logs are under ``home/logs``.
    env:
        The environment of its processes (home settings, caller's ``env``, the kill marker).
    processes:
        The components, by name (all in the process group of the first).
    """

    home: AirflowHome
    metadata_url: URL
    api_url: str
    log_dir: Path
    env: dict[str, str]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    # ------------------------------------------------------------------ REST
    def api(self, method: str, path: str, body: Any = None, *, timeout_s: float = 30.0) -> Any:
        """Call the REST API (``/api/v2/...``) and return its decoded JSON answer.

        Raises
        ------
        RuntimeError
            On an HTTP error; the message carries the server's answer.
        """
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.api_url}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as answer:
                text = answer.read().decode()
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")[:2000]
            msg = f"{method} {path} -> HTTP {error.code}: {detail}"
            raise RuntimeError(msg) from error
        return json.loads(text) if text else None

    def health(self) -> dict[str, Any]:
        """``/api/v2/monitor/health``: status of the database, scheduler, triggerer, processor."""
        answer: dict[str, Any] = self.api("GET", "/api/v2/monitor/health", timeout_s=5)
        return answer

    def unpause(self, dag_id: str) -> None:
        """Unpause ``dag_id`` (new DAGs are paused)."""
        self.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def trigger(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        """Trigger a manual run with ``logical_date`` None (as ``airflow dags trigger`` does);
        returns its run id."""
        body: dict[str, Any] = {"logical_date": None}
        if conf is not None:
            body["conf"] = dict(conf)
        answer = self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)
        run_id: str = answer["dag_run_id"]
        return run_id

    def clear_run(self, dag_id: str, run_id: str) -> list[str]:
        """Clear every task of run ``run_id``, as the UI's "Clear" on a run does (the run goes
        back to queued and the scheduler runs its tasks again); returns the task ids cleared."""
        body = {"dag_run_id": run_id, "dry_run": False, "only_failed": False,
                "reset_dag_runs": True}  # fmt: skip
        answer = self.api("POST", f"/api/v2/dags/{dag_id}/clearTaskInstances", body)
        return sorted(ti["task_id"] for ti in answer.get("task_instances", []))

    def set_run_state(self, dag_id: str, run_id: str, state: str) -> None:
        """Mark run ``run_id`` ``"failed"``, ``"success"`` or ``"queued"``, as the UI's "Mark
        run as..." does (marking it failed stops its running and deferred tasks)."""
        self.api("PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}", {"state": state})

    def airflow(self, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run an ``airflow`` CLI command against this cluster."""
        extra = {k: v for k, v in self.env.items() if k not in self.home.overrides}
        return run_airflow(self.home, *args, timeout_s=timeout_s, extra_env=extra)

    # ------------------------------------------------------------ metadata
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read-only query on the metadata database."""
        with contextlib.closing(_connect(self.metadata_url)) as connection:
            return list(connection.execute(sql, params).fetchall())

    def dag_ids(self) -> set[str]:
        """DAGs the processor has serialized."""
        return {r[0] for r in self.query("SELECT dag_id FROM serialized_dag")}

    def runs(self, dag_id: str) -> list[RunInfo]:
        """Every run of ``dag_id``, oldest first."""
        rows = self.query(
            "SELECT run_id, state, queued_at, start_date, end_date FROM dag_run "
            "WHERE dag_id = %s ORDER BY id",
            (dag_id,),
        )
        return [RunInfo(*row) for row in rows]

    def task_instances(self, dag_id: str) -> list[TaskInstanceInfo]:
        """Every task instance of ``dag_id`` (latest try), by start date."""
        rows = self.query(
            "SELECT run_id, task_id, state, try_number, start_date, end_date FROM task_instance "
            "WHERE dag_id = %s ORDER BY start_date NULLS LAST, run_id, task_id",
            (dag_id,),
        )
        return [TaskInstanceInfo(*row) for row in rows]

    def return_values(self, dag_id: str, task_id: str) -> dict[str, Any]:
        """The return value (XCom) each run's task ``task_id`` left, by run id (runs whose task
        has not returned yet, or was cleared since, are missing)."""
        rows = self.query(
            "SELECT run_id, value FROM xcom WHERE dag_id = %s AND task_id = %s "
            "AND key = 'return_value' AND map_index = -1",
            (dag_id, task_id),
        )
        return {run_id: json.loads(v) if isinstance(v, str) else v for run_id, v in rows}

    def task_processes(self, dag_id: str, task_id: str) -> list[tuple[str, int, int]]:
        """``(run_id, try_number, pid)`` of each running instance of ``task_id``: the process
        that runs the task's code (the Task SDK titles it ``airflow worker -- <task instance
        id>``; its supervisor's title adds ``LocalExecutor:``), found with ``ps``."""
        running = {
            str(ti_id): (run_id, try_number)
            for ti_id, run_id, try_number in self.query(
                "SELECT id, run_id, try_number FROM task_instance "
                "WHERE dag_id = %s AND task_id = %s AND state = 'running'",
                (dag_id, task_id),
            )
        }
        if not running:
            return []
        listing = subprocess.run(
            ["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=False
        ).stdout
        found = []
        for line in listing.splitlines():
            pid, _, args = line.strip().partition(" ")
            title = args.strip().split()
            if len(title) == 4 and title[:3] == ["airflow", "worker", "--"] and title[3] in running:
                run_id, try_number = running[title[3]]
                found.append((run_id, try_number, int(pid)))
        return found

    def wait_for_runs(
        self, dag_id: str, run_ids: Sequence[str], *, timeout_s: float, poll_s: float = 1.0
    ) -> list[RunInfo]:
        """Wait until every run in ``run_ids`` has finished (success or failed).

        Raises
        ------
        TimeoutError
            With the runs' states and the logs' tails.
        """
        deadline = time.monotonic() + timeout_s
        wanted = set(run_ids)
        while True:
            runs = [r for r in self.runs(dag_id) if r.run_id in wanted]
            if len(runs) == len(wanted) and all(r.state in _FINISHED for r in runs):
                return runs
            if time.monotonic() > deadline:
                states = {r.run_id: r.state for r in runs}
                msg = (
                    f"runs of {dag_id} not finished after {timeout_s:g}s: {states}\n"
                    f"{self.describe(dag_id)}"
                )
                raise TimeoutError(msg)
            self.check_alive()
            time.sleep(poll_s)

    # ---------------------------------------------------------- diagnosis
    def check_alive(self) -> None:
        """Raise ``RuntimeError`` (with the logs' tails) if a component has exited."""
        dead = {name: p.returncode for name, p in self.processes.items() if p.poll() is not None}
        if dead:
            msg = f"airflow components exited: {dead}\n{self.logs_tail()}"
            raise RuntimeError(msg)

    def logs_tail(self, lines: int = 30) -> str:
        """The last lines of each component's log."""
        parts = []
        for name in self.processes:
            path = self.log_dir / f"{name}.log"
            text = path.read_text(errors="replace") if path.exists() else ""
            tail = "\n".join(text.splitlines()[-lines:])
            parts.append(f"----- {name} ({path}) -----\n{tail}")
        return "\n".join(parts)

    def task_logs_tail(
        self, dag_id: str, lines: int = 25, *, only_unsuccessful: bool = True
    ) -> str:
        """The last lines of the task logs of ``dag_id`` (by default only of tasks that did not
        succeed)."""
        states = {(t.run_id, t.task_id): t.state for t in self.task_instances(dag_id)}
        parts = []
        for path in sorted((self.home.path / "logs" / f"dag_id={dag_id}").glob("*/*/*.log")):
            run_id = path.parent.parent.name.removeprefix("run_id=")
            task_id = path.parent.name.removeprefix("task_id=")
            state = states.get((run_id, task_id))
            if only_unsuccessful and state == "success":
                continue
            tail = "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
            parts.append(f"----- task {run_id} {task_id} [{state}] {path.name} -----\n{tail}")
        return "\n".join(parts) or "(no task logs)"

    def describe(self, dag_id: str) -> str:
        """Runs, task instances and log tails: for assertion messages."""
        try:
            runs = "\n".join(f"  {r}" for r in self.runs(dag_id))
            tis = "\n".join(
                f"  {t.run_id} {t.task_id} {t.state} try={t.try_number} "
                f"{t.start_date} -> {t.end_date}"
                for t in self.task_instances(dag_id)
            )
        except psycopg.Error as error:  # pragma: no cover - diagnosis only
            runs, tis = f"  (metadata DB unreadable: {error})", ""
        return "\n".join([
            f"runs of {dag_id}:", runs, "task instances:", tis,
            self.logs_tail(), self.task_logs_tail(dag_id),
        ])  # fmt: skip


@contextlib.contextmanager
def running_airflow(
    root: Path,
    *,
    pg_url: str,
    dags_folder: Path,
    env: Mapping[str, str] | None = None,
    parallelism: int = 3,
    expect_dags: Sequence[str] = (),
    ready_timeout_s: float = 180.0,
    settings: Mapping[str, str] | None = None,
    executor: str = "LocalExecutor",
    celery_workers: int = 2,
    worker_concurrency: int = 2,
) -> Iterator[AirflowCluster]:
    """Start a real Airflow on a fresh PostgreSQL metadata database; kill it on exit.

    Parameters
    ----------
    root:
        Directory for the home (``root/airflow``) and the components' logs (``root/logs``).
    pg_url:
        SQLAlchemy URL of a PostgreSQL database whose role may ``CREATE DATABASE``; a new
        database ``airflow_<random>`` is created beside it (and dropped on exit).
    dags_folder:
        The DAGs folder; write the DAG files before calling (they are parsed at start).
    env:
        More environment for every component (connections, the topology's variables...).
    parallelism:
        ``[core] parallelism``: the LocalExecutor's worker processes (keep it low on 2 cores).
    expect_dags:
        DAG ids to wait for (serialized by the DAG processor) before yielding.
    settings:
        More ``AIRFLOW__SECTION__KEY`` settings (they override the defaults set here).
    executor:
        ``"LocalExecutor"`` or ``"CeleryExecutor"`` (starts Redis and the Celery workers).
    celery_workers, worker_concurrency:
        With Celery: how many workers, and the task slots of each.

    Raises
    ------
    RuntimeError
        If the migration fails, a component exits, or it is not healthy in time.
    """
    base = make_url(pg_url)
    if not base.drivername.startswith("postgresql"):
        msg = f"running_airflow needs a PostgreSQL URL, got driver {base.drivername!r}"
        raise RuntimeError(msg)
    database = f"airflow_{uuid.uuid4().hex[:12]}"
    metadata_url = base.set(database=database)
    marker = uuid.uuid4().hex
    log_dir = root / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    home = prepare_airflow_home(root / "airflow", dags_folder=dags_folder, migrate=False)
    port = _free_port()
    api_url = f"http://127.0.0.1:{port}"
    overrides = {
        **home.overrides,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": _render(metadata_url, "psycopg"),
        # Airflow derives the async URL as postgresql+asyncpg, which is not installed here.
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": _render(metadata_url, "psycopg_async"),
        "AIRFLOW__CORE__EXECUTOR": executor,
        "AIRFLOW__CORE__PARALLELISM": str(parallelism),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api_url}/execution/",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": api_url,
        "AIRFLOW__API__WORKERS": "1",
        # the four components start at once, in a home without airflow.cfg: each would write
        # one with a Fernet key of its own (a trigger encrypted by the DAG processor, then
        # undecryptable by the triggerer), so the generated secrets are set here
        "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
        "AIRFLOW__API__SECRET_KEY": uuid.uuid4().hex,
        "AIRFLOW__API_AUTH__JWT_SECRET": uuid.uuid4().hex,
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(_free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(_free_port()),
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        # The factory's waits follow [operators] default_deferrable (off in Airflow): these runs
        # exercise the triggerer, as production deployments that turn it on do.
        "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",
        **_celery_settings(executor, metadata_url, worker_concurrency),
        **(settings or {}),
    }
    home = replace(home, overrides=overrides)
    full_env = home.env({**(env or {}), MARKER_ENV: marker})
    cluster = AirflowCluster(
        home=home, metadata_url=metadata_url, api_url=api_url, log_dir=log_dir, env=full_env
    )
    template = _migrated_template(base, root / "template")
    with contextlib.closing(_connect(base)) as admin:
        admin.execute(f'CREATE DATABASE "{database}" TEMPLATE "{template}"')
    try:
        try:
            _start(cluster, celery_workers if executor == "CeleryExecutor" else 0)
            _wait_ready(cluster, expect_dags, ready_timeout_s)
            yield cluster
        finally:
            _kill(cluster, marker)
    finally:
        with contextlib.closing(_connect(base)) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


_templates: dict[str, str] = {}


def _migrated_template(base: URL, work: Path) -> str:
    """The name of this process's migrated metadata database beside ``base`` (made by its first
    call, dropped at exit): every cluster's database is a copy of it (``CREATE DATABASE ...
    TEMPLATE``, ~0.05 s, where ``airflow db migrate`` takes 3-7 s)."""
    key = base.render_as_string(hide_password=False)
    if key in _templates:
        return _templates[key]
    name = f"airflow_template_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    url = base.set(database=name)
    home = prepare_airflow_home(work, migrate=False)
    home = replace(home, overrides={
        **home.overrides,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": _render(url, "psycopg"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": _render(url, "psycopg_async"),
    })  # fmt: skip
    with contextlib.closing(_connect(base)) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    atexit.register(_drop_database, base, name)
    migrate_home(home, timeout_s=300)
    _templates[key] = name
    return name


def _drop_database(base: URL, name: str) -> None:
    with contextlib.suppress(psycopg.Error), contextlib.closing(_connect(base)) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _celery_settings(executor: str, metadata_url: URL, concurrency: int) -> dict[str, str]:
    if executor != "CeleryExecutor":
        return {}
    return {
        "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:{_free_port()}/0",
        "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{_render(metadata_url, 'psycopg')}",
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(concurrency),
    }


def _commands(cluster: AirflowCluster, workers: int) -> list[tuple[str, list[str], dict[str, str]]]:
    """``(name, argv, extra env)`` of each process to start, Redis first."""
    python, env = sys.executable, cluster.env
    commands: list[tuple[str, list[str], dict[str, str]]] = []
    if workers:
        port = env["AIRFLOW__CELERY__BROKER_URL"].rsplit(":", 1)[1].split("/")[0]
        commands.append(("redis", ["redis-server", "--port", port, "--bind", "127.0.0.1",
                                   "--save", "", "--appendonly", "no"], {}))  # fmt: skip
    commands += [(name, [python, "-m", "airflow", name], {}) for name in COMPONENTS]
    for n in range(1, workers + 1):
        argv = [python, "-m", "airflow", "celery", "worker", "--celery-hostname",
                f"worker{n}@%h", "--pid", str(cluster.log_dir / f"worker{n}.pid"),
                "--skip-serve-logs"]  # fmt: skip
        extra = {WORKER_HOSTNAME_ENV: f"worker{n}",
                 "AIRFLOW__CORE__HOSTNAME_CALLABLE": f"{__name__}.worker_hostname"}  # fmt: skip
        commands.append((f"worker{n}", argv, extra))
    return commands


def _start(cluster: AirflowCluster, workers: int = 0) -> None:
    pgid = 0
    for name, args, extra in _commands(cluster, workers):
        if name in ("scheduler", "triggerer"):
            args.append("--skip-serve-logs")  # task logs are local files: no log server ports
        if name == "api-server":
            args += ["--host", "127.0.0.1", "--port", cluster.env["AIRFLOW__API__PORT"]]
        with open(cluster.log_dir / f"{name}.log", "wb") as log:
            process = subprocess.Popen(
                args,
                env={**cluster.env, **extra},
                cwd=cluster.home.path,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=pgid,
            )
        cluster.processes[name] = process
        pgid = pgid or process.pid


def _wait_ready(cluster: AirflowCluster, expect_dags: Sequence[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        cluster.check_alive()
        try:
            last = cluster.health()
            healthy = all(
                (last.get(part) or {}).get("status") == "healthy"
                for part in ("metadatabase", "scheduler", "triggerer", "dag_processor")
            )
            workers = [cluster.log_dir / f"{n}.log" for n in cluster.processes if n[:6] == "worker"]
            healthy = healthy and all(" ready." in w.read_text(errors="replace") for w in workers)
            if healthy and set(expect_dags) <= cluster.dag_ids():
                return
        except (OSError, RuntimeError, ValueError, psycopg.Error) as error:
            last = error
        time.sleep(1)
    msg = f"airflow not ready after {timeout_s:g}s (last health: {last})\n{cluster.logs_tail()}"
    raise RuntimeError(msg)


def _marked_pids(marker: str) -> list[int]:
    needle = f"{MARKER_ENV}={marker}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _kill(cluster: AirflowCluster, marker: str) -> None:
    """SIGKILL the components' process group, then any process carrying the marker."""
    first = next(iter(cluster.processes.values()), None)
    if first is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(first.pid, signal.SIGKILL)
    for _ in range(3):  # tasks' own process groups, spark-submit JVMs, drivers
        pids = _marked_pids(marker)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    for process in cluster.processes.values():
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
