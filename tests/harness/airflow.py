"""Run Airflow against an isolated home in tests, always in a subprocess under a hard timeout.

Airflow reads its configuration once per process, and a ``dags test`` whose task is blocked (by
``depends_on_past``, say) loops forever and ignores SIGTERM. So these helpers drive the ``airflow``
CLI of the running interpreter in a child process under ``timeout -s KILL``, which kills the
child's whole process group (a task's ``spark-submit`` JVM included). This module does not import
``airflow``.

The home is *not* put in Airflow's ``unit_test_mode``: that mode loads Airflow's own
``unit_tests.cfg`` (examples on, LocalExecutor, deserialization limited to ``airflow.*`` and
``tests.*``), which suits Airflow's test suite, not a provider's.

Examples
--------
>>> import tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     home = prepare_airflow_home(Path(tmp), migrate=False)
...     env = home.env({"AIRFLOW__CORE__PARALLELISM": "2"})
>>> env["AIRFLOW_HOME"] == str(home.path), env["AIRFLOW__CORE__LOAD_EXAMPLES"]
(True, 'False')
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.harness import with_project_path

__all__ = [
    "AirflowHome",
    "DagTestResult",
    "migrate_home",
    "prepare_airflow_home",
    "run_airflow",
    "run_dag_test",
]

# `timeout -s KILL` signals its whole process group, itself included: the caller sees -SIGKILL
# (or 128 + SIGKILL from a shell).
_KILLED = (-signal.SIGKILL, 128 + signal.SIGKILL)
_INHERITED_CONFIG_PREFIXES = ("AIRFLOW__",)
_INHERITED_CONFIG_NAMES = ("AIRFLOW_HOME", "AIRFLOW_CONFIG")


@dataclass(frozen=True)
class AirflowHome:
    """An isolated ``AIRFLOW_HOME`` with its SQLite metadata database.

    Parameters
    ----------
    path:
        The home directory.
    dags_folder:
        The DAGs folder its processes parse.
    overrides:
        Environment variables that configure Airflow for this home.
    """

    path: Path
    dags_folder: Path
    overrides: Mapping[str, str]

    @property
    def metadata_db(self) -> Path:
        """The SQLite file of the metadata database."""
        return self.path / "airflow.db"

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of a child process using this home.

        Inherited ``AIRFLOW__*`` settings, ``AIRFLOW_HOME`` and ``AIRFLOW_CONFIG`` are dropped so
        the home stays isolated; ``AIRFLOW_CONN_*`` and ``AIRFLOW_VAR_*`` pass through. ``extra``
        comes last (use it for more ``AIRFLOW__SECTION__KEY`` settings). The interpreter's ``bin``
        leads ``PATH``, so the venv's ``spark-submit`` is found, and the project root leads
        ``PYTHONPATH``, so the tasks, ``spark-submit`` and its Python workers import the
        topologies of :mod:`tests.harness` by reference.
        """
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(_INHERITED_CONFIG_PREFIXES) and key not in _INHERITED_CONFIG_NAMES
        }
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env.update(self.overrides)
        env.update(extra or {})
        return with_project_path(env)


@dataclass(frozen=True)
class DagTestResult:
    """What one ``airflow dags test`` did.

    Attributes
    ----------
    process:
        The finished process (``args``, ``returncode``, ``stdout``, ``stderr``).
    timed_out:
        Whether it was killed at the time limit.
    elapsed_s:
        Wall-clock seconds.
    run_id, run_state:
        The DAG run it created (``None`` if none was created).
    task_states:
        State per task id (``task_id[map_index]`` for mapped tasks), read from the metadata
        database; ``None`` for a task that never got a state.
    """

    process: subprocess.CompletedProcess[str]
    timed_out: bool
    elapsed_s: float
    run_id: str | None
    run_state: str | None
    task_states: Mapping[str, str | None]

    @property
    def ok(self) -> bool:
        """The process exited 0 and the run succeeded."""
        return self.process.returncode == 0 and self.run_state == "success"

    def describe(self, tail_lines: int = 40) -> str:
        """A summary for assertion messages: states, exit code and the output's last lines."""
        output = (self.process.stdout + self.process.stderr).splitlines()[-tail_lines:]
        return "\n".join(
            [
                f"run {self.run_id} state={self.run_state} exit={self.process.returncode} "
                f"timed_out={self.timed_out} elapsed={self.elapsed_s:.1f}s",
                f"tasks: {dict(self.task_states)}",
                *output,
            ]
        )


def prepare_airflow_home(
    path: Path,
    *,
    dags_folder: Path | None = None,
    migrate: bool = True,
    timeout_s: float = 120.0,
) -> AirflowHome:
    """Create (or reuse) an isolated Airflow home at ``path``.

    Parameters
    ----------
    path:
        Directory of the home; created if missing.
    dags_folder:
        DAGs folder (default ``<path>/dags``, created if missing).
    migrate:
        Give the home a migrated metadata database; needed before anything touches it. A home
        without one gets a copy of this process's template, migrated once by the first call
        (``airflow db migrate`` takes 4-7 s; a copy, milliseconds); an existing database is
        migrated in place.
    timeout_s:
        Time limit of the migration.

    Raises
    ------
    RuntimeError
        If the migration fails; the message carries its output.
    """
    path = path.resolve()
    dags = (dags_folder or path / "dags").resolve()
    path.mkdir(parents=True, exist_ok=True)
    dags.mkdir(parents=True, exist_ok=True)
    overrides = {
        "AIRFLOW_HOME": str(path),
        "AIRFLOW_CONFIG": str(path / "airflow.cfg"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{path / 'airflow.db'}",
    }
    home = AirflowHome(path=path, dags_folder=dags, overrides=overrides)
    if migrate and home.metadata_db.exists():
        migrate_home(home, timeout_s)
    elif migrate:
        template = _migrated_template(timeout_s)
        shutil.copyfile(template.metadata_db, home.metadata_db)
        _copy_config(template, home)
    return home


def _copy_config(template: AirflowHome, home: AirflowHome) -> None:
    """The template's ``airflow.cfg`` (Airflow's defaults, written by its migration, with the
    secrets it generated: the Fernet key, the API's keys) with its paths made this home's,
    unless the home has one. Without it, processes started at once (a scheduler's components)
    would each write their own, each with another Fernet key."""
    config = home.path / "airflow.cfg"
    if config.exists():
        return
    text = (template.path / "airflow.cfg").read_text()
    config.write_text(text.replace(str(template.path), str(home.path)))
    config.chmod(0o600)


def migrate_home(home: AirflowHome, timeout_s: float) -> None:
    """Run ``airflow db migrate`` for ``home``; ``RuntimeError`` with its output if it fails."""
    done = run_airflow(home, "db", "migrate", timeout_s=timeout_s)
    if done.returncode != 0:
        output = done.stderr[-4000:]
        msg = f"`airflow db migrate` in {home.path} exited {done.returncode}:\n{output}"
        raise RuntimeError(msg)


_template_lock = threading.Lock()
_template: list[AirflowHome] = []


def _migrated_template(timeout_s: float) -> AirflowHome:
    """This process's migrated home (made by its first call, removed at exit): every migration
    of a new home gives the same database file, so one is made and copied."""
    with _template_lock:
        if not _template:
            root = Path(tempfile.mkdtemp(prefix="trident-airflow-db-"))
            atexit.register(shutil.rmtree, root, ignore_errors=True)
            template = prepare_airflow_home(root, migrate=False)
            migrate_home(template, timeout_s)
            _template.append(template)
        return _template[0]


def run_airflow(
    home: AirflowHome,
    *args: str,
    timeout_s: float,
    extra_env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``airflow *args`` with ``home``, killed (with its process group) after ``timeout_s``."""
    command = ["timeout", "-s", "KILL", f"{timeout_s:g}", sys.executable, "-m", "airflow", *args]
    return subprocess.run(
        command,
        env=home.env(extra_env),
        cwd=home.path,
        capture_output=True,
        text=True,
        check=False,
        start_new_session=True,
    )


def run_dag_test(
    dag_id: str,
    *,
    home: AirflowHome,
    dag_file: Path | None = None,
    logical_date: str | None = None,
    conf: Mapping[str, Any] | None = None,
    timeout_s: float = 180.0,
    extra_env: Mapping[str, str] | None = None,
    use_executor: bool = False,
) -> DagTestResult:
    """Run ``airflow dags test`` in a subprocess and read back the states of its run.

    Parameters
    ----------
    dag_id:
        The DAG to run.
    home:
        A migrated home (:func:`prepare_airflow_home`).
    dag_file:
        Parse only this file (``--dagfile-path``) instead of the home's DAGs folder.
    logical_date:
        Logical date (``2026-01-01``); Airflow's default is now.
    conf:
        Run conf (``{"txid": 7}``), passed as JSON.
    timeout_s:
        Hard time limit: a blocked run loops forever, so this is how such a test ends.
    extra_env:
        More environment (connections as ``AIRFLOW_CONN_*``, settings as ``AIRFLOW__*``).
    use_executor:
        Run the tasks with the home's executor (``--use-executor``): each task in a process of
        its own, writing its log file for the UI (plain ``dags test`` writes none). Needs an
        API server for the tasks (``[core] execution_api_server_url``) and shared secrets:
        :func:`tests.harness.ui.write_ui_config`, ``serving_airflow``.
    """
    args = ["dags", "test", dag_id]
    if use_executor:
        args.append("--use-executor")
    if logical_date is not None:
        args.append(logical_date)
    if dag_file is not None:
        args += ["--dagfile-path", str(dag_file)]
    if conf is not None:
        args += ["--conf", json.dumps(conf)]
    started_at = _db_timestamp(datetime.now(UTC))
    started = time.monotonic()
    process = run_airflow(home, *args, timeout_s=timeout_s, extra_env=extra_env)
    elapsed = time.monotonic() - started
    run_id, run_state, task_states = _read_run(home.metadata_db, dag_id, started_at)
    return DagTestResult(
        process=process,
        timed_out=process.returncode in _KILLED and elapsed >= timeout_s,
        elapsed_s=elapsed,
        run_id=run_id,
        run_state=run_state,
        task_states=task_states,
    )


def _db_timestamp(moment: datetime) -> str:
    # Airflow stores naive UTC timestamps in SQLite as text in this format.
    return moment.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


def _read_run(
    db: Path, dag_id: str, created_since: str
) -> tuple[str | None, str | None, dict[str, str | None]]:
    """The newest run of ``dag_id`` created since ``created_since``, and its task states.

    Selected by creation time, not by id: ``dags test`` deletes and recreates a run of the same
    logical date, and SQLite may then hand out the deleted run's id again.
    """
    if not db.exists():
        return None, None, {}
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as connection:
        run = connection.execute(
            "SELECT run_id, state FROM dag_run WHERE dag_id = ? AND created_at >= ? "
            "ORDER BY created_at DESC, id DESC LIMIT 1",
            (dag_id, created_since),
        ).fetchone()
        if run is None:
            return None, None, {}
        rows = connection.execute(
            "SELECT task_id, map_index, state FROM task_instance "
            "WHERE dag_id = ? AND run_id = ? ORDER BY task_id, map_index",
            (dag_id, run[0]),
        ).fetchall()
    states = {(t if m < 0 else f"{t}[{m}]"): s for t, m, s in rows}
    return run[0], run[1], states
