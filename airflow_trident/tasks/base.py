"""What the batch tasks (operators and sensors) share: their hook, the txid of a run, the
deferrable default, and a stalled wait failing the task without retry.

The batch lifecycle itself comes from :class:`~airflow_trident.hooks.trident.TridentHook`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowFailException

from airflow_trident.errors import BatchStalledError, ConfigurationError
from airflow_trident.hooks import config
from airflow_trident.hooks.trident import TridentHook

__all__ = ["TridentTask", "default_deferrable", "no_retry_when_stalled", "run_id_of", "txid_of"]


class TridentTask:
    """Mixin of the batch tasks: one :class:`TridentHook` per task, for its (rendered)
    connection ids, so the blocks a task opens inside ``with self.trident_hook().session():``
    share one ZooKeeper session."""

    zookeeper_conn_id: str
    state_conn_id: str | None = None
    staging_root: str  # None until rendered when the DAG gave none (then resolved)
    _trident_hook: TridentHook | None = None

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Render the templated fields, then resolve a staging root the DAG did not give
        (``[trident] staging_root``, ...: :func:`~airflow_trident.hooks.config.staging_root`):
        here, in the task, never when the DAG file is parsed."""
        super().render_template_fields(context, jinja_env)  # type: ignore[misc]
        self.staging_root = config.staging_root(self.staging_root)

    def trident_hook(self) -> TridentHook:
        """This task's hook (made on first use, after the connection ids were rendered)."""
        hook = self._trident_hook
        if hook is None or (hook.zookeeper_conn_id, hook.state_conn_id) != (
            self.zookeeper_conn_id,
            self.state_conn_id,
        ):
            hook = TridentHook(
                zookeeper_conn_id=self.zookeeper_conn_id, state_conn_id=self.state_conn_id
            )
            self._trident_hook = hook
        return hook


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
