"""Deprecated path: what every task that commits does (wait for txid-1's commit, commit by the
route, record and log it) is its task object's,
:class:`~airflow_trident.tasks.batch_task.BatchTask` (``commit_in_turn`` returns a
:class:`~airflow_trident.batch.driver.Defer` that the adapter defers on, ``commit_now``,
``commit_route``, ``spark_route``, ``resumed``, ``on_kill``), which the operators hold instead
of inheriting the mixin ``CommitInTurn``; this path warns and goes away in 0.2.0.
"""

from __future__ import annotations

from typing import Any

from airflow_trident.tasks.base import moved

_MOVED = {"CommitInTurn": "airflow_trident.tasks.batch_task.BatchTask"}


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _MOVED)
