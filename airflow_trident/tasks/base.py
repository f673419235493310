"""What the batch tasks (operators and sensors) share: the txid of a run, the deferrable
default, a stalled wait failing the task without retry, and the deprecated names of the task
modules (:func:`moved`).

What a batch task does is its task object's
(:class:`~airflow_trident.tasks.batch_task.BatchTask`, holding its hook); the batch lifecycle
itself comes from :class:`~airflow_trident.hooks.trident.TridentHook`.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowFailException

from airflow_trident.errors import BatchStalledError, ConfigurationError

__all__ = [
    "default_deferrable",
    "moved",
    "no_retry_when_stalled",
    "run_id_of",
    "txid_of",
]

_MOVED = {"TridentTask": "airflow_trident.tasks.batch_task.BatchTask"}


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _MOVED)


def moved(module: str, name: str, moves: Mapping[str, str]) -> Any:
    """What the deprecated name ``name`` of ``module`` is now (``moves``: old name -> the
    dotted path of where it lives), with a :class:`DeprecationWarning`: a module's
    ``__getattr__`` (the old name goes away in 0.2.0).

    Raises
    ------
    AttributeError
        For any other name.

    >>> import airflow_trident.tasks.base as base
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     base.TridentTask.__name__
    'BatchTask'
    >>> print(caught[0].message)
    airflow_trident.tasks.base.TridentTask moved to airflow_trident.tasks.batch_task.BatchTask, \
goes away in 0.2.0
    """
    target = moves.get(name)
    if target is None or name.startswith("__"):
        msg = f"module {module!r} has no attribute {name!r}"
        raise AttributeError(msg)
    warnings.warn(
        f"{module}.{name} moved to {target}, goes away in 0.2.0", DeprecationWarning, stacklevel=3
    )
    path, _, attribute = target.rpartition(".")
    return getattr(importlib.import_module(path), attribute)


def default_deferrable() -> bool:
    """Airflow's ``[operators] default_deferrable`` (``False`` when unset), read when called.

    What a ``deferrable=None`` argument of our operators, sensor and factory means — the
    common providers' convention, read at construction rather than at import, so a DAG file
    parsed after a configuration change sees the new value.

    >>> import os
    >>> os.environ["AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"] = "True"
    >>> default_deferrable()
    True
    >>> del os.environ["AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"]
    """
    return bool(conf.getboolean("operators", "default_deferrable", fallback=False))


def run_id_of(context: Any) -> str | None:
    """The run id of the task's context (``None`` outside a DAG run)."""
    run = context.get("dag_run")
    return None if run is None else str(run.run_id)


def txid_of(context: Any, begin_task_id: str) -> int:
    """The txid the begin task of this run bound (from its XCom).

    Raises
    ------
    ConfigurationError
        If the begin task left no summary (it did not run in this DAG run).
    """
    summary = context["ti"].xcom_pull(task_ids=begin_task_id)
    if not isinstance(summary, dict) or "txid" not in summary:
        msg = (
            f"task {begin_task_id!r} left no batch summary in XCom for run "
            f"{context['run_id']!r}; hint: clear the begin task too"
        )
        raise ConfigurationError(msg)
    return int(summary["txid"])


@contextmanager
def no_retry_when_stalled() -> Iterator[None]:
    """A wait in txid order that found txid-1 unable to progress
    (:class:`~airflow_trident.errors.BatchStalledError`, :mod:`airflow_trident.batch.order`)
    fails the task without retrying: its run gives its slot back (the message says which runs
    to clear)."""
    try:
        yield
    except BatchStalledError as exc:
        raise AirflowFailException(str(exc)) from exc
