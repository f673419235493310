"""The project's own test harness (not shipped in the wheel): Airflow homes and ``dags test``
runs (:mod:`.airflow`), a real scheduler (:mod:`.scheduler`, :mod:`.scheduler_faults`), the UI
(:mod:`.ui`), private ZooKeeper and PostgreSQL servers (:mod:`.servers`), a Spark Connect server
(:mod:`.connect`), the in-process fault schedule's command line (:mod:`.fault_schedule`), the
source-chaos schedules and their command line (:mod:`.source_chaos_schedule`,
:mod:`.source_chaos`), the main job (:mod:`.run_dag`, :mod:`.main_ui`) and the topologies the
end-to-end tests ship by reference (``tests.harness.topologies:e2e_word_count``...).

Those references are imported by other processes: ``airflow dags test`` and its task processes,
the real scheduler's components and Celery workers, ``spark-submit`` drivers and their Python
workers, the Spark Connect server's workers. ``tests`` is not installed, so each of them needs
the project root on ``PYTHONPATH``: ``tests/conftest.py`` calls :func:`export_project_path` at
session start, every helper here that starts a process passes its environment through
:func:`with_project_path`, and the scripts that start clusters export it (``scripts/env.sh``,
``scripts/cluster.sh``).

>>> env = with_project_path({"PYTHONPATH": "/elsewhere"})
>>> env["PYTHONPATH"].split(os.pathsep) == [str(PROJECT_ROOT), "/elsewhere"]
True
>>> with_project_path(env) == env
True
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["PROJECT_ROOT", "export_project_path", "with_project_path"]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
"""The repository root: the directory holding ``tests/`` (and ``dags/``, ``bench/``)."""


def with_project_path(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with :data:`PROJECT_ROOT` first on ``PYTHONPATH`` (once), so a child process
    imports ``tests.harness``."""
    root = str(PROJECT_ROOT)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    return {**env, "PYTHONPATH": os.pathsep.join([root, *paths])}


def export_project_path() -> None:
    """Put :data:`PROJECT_ROOT` on this process's ``sys.path`` and on ``PYTHONPATH`` in
    ``os.environ`` (inherited by every child, a local Spark session's JVM and its Python
    workers included)."""
    if str(PROJECT_ROOT) not in sys.path:
        sys.path.insert(0, str(PROJECT_ROOT))
    os.environ["PYTHONPATH"] = with_project_path(os.environ)["PYTHONPATH"]
