"""The DRPC client: requests to a Trident DAG's DRPC functions, answered in this process.

:class:`DRPCClient` reaches the topology's committed state through the DAG's own Airflow
connections (its ``trident_zookeeper`` connection for the committed txid, its state connection
for the values: :meth:`TridentHook.drpc_executor
<airflow_trident.hooks.trident.TridentHook.drpc_executor>`) and runs each request with
:class:`~airflow_trident.drpc.DRPCExecutor`. The DAG is found in either layout
(:func:`~airflow_trident.hooks.dag_tasks.dag_topology`). The ``airflow-trident drpc`` command and
the HTTP endpoint of the Airflow API server (:mod:`airflow_trident.plugins.drpc`) use it.

Examples
--------
Without a DAG, name the topology and its connections directly (the state connection may be left
out: ``TRIDENT_STATE_URL``, else each state's own database):

>>> client = DRPCClient(topology="airflow_trident.examples.topologies:word_count")
>>> client.target.zookeeper_conn_id, client.target.state_conn_id
('trident_zookeeper_default', None)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from airflow_trident.drpc import DRPCExecutor, result_json
from airflow_trident.errors import ConfigurationError, DRPCUnknownFunctionError, UnknownDagError
from airflow_trident.hooks.dag_tasks import dag_topology
from airflow_trident.hooks.trident import TridentHook
from airflow_trident.hooks.zookeeper import ZooKeeperHook

__all__ = ["DRPCClient", "DRPCTarget", "dag_target"]

Row = tuple[Any, ...]

_TARGETS: dict[str, DRPCTarget] = {}
_TARGETS_LOCK = threading.Lock()


@dataclass(frozen=True)
class DRPCTarget:
    """What a DRPC request needs: the topology (``module:attribute``) and its connections."""

    topology: str
    zookeeper_conn_id: str = ZooKeeperHook.default_conn_name
    state_conn_id: str | None = None


def dag_target(dag_id: str) -> DRPCTarget:
    """The topology and connections of the Trident DAG ``dag_id`` (in either layout), read
    once per process.

    Raises
    ------
    DRPCUnknownFunctionError
        If there is no such DAG, or it is not a Trident DAG.
    """
    with _TARGETS_LOCK:
        found = _TARGETS.get(dag_id)
    if found is not None:
        return found
    try:
        where = dag_topology(dag_id)
    except UnknownDagError as exc:
        raise DRPCUnknownFunctionError(f"{exc}; it has no DRPC") from exc
    target = DRPCTarget(where.topology, where.zookeeper_conn_id, where.state_conn_id)
    with _TARGETS_LOCK:
        _TARGETS[dag_id] = target
    return target


class DRPCClient:
    """Executes DRPC requests of a Trident DAG (or a topology) against its committed state.

    Parameters
    ----------
    dag_id:
        The Trident DAG whose topology and connections to use.
    topology, zookeeper_conn_id, state_conn_id:
        Or the topology (``module:attribute``) and its connections, without a DAG.
    commit_wait_s:
        See :class:`~airflow_trident.drpc.DRPCExecutor`.

    The client connects on its first request and keeps its ZooKeeper session until
    :meth:`close` (or the end of a ``with`` block); it may be shared by threads.

    Raises
    ------
    ConfigurationError
        If neither or both of ``dag_id`` and ``topology`` are given.
    """

    def __init__(
        self,
        dag_id: str | None = None,
        *,
        topology: str | None = None,
        zookeeper_conn_id: str = ZooKeeperHook.default_conn_name,
        state_conn_id: str | None = None,
        commit_wait_s: float = 2.0,
    ) -> None:
        if (dag_id is None) == (topology is None):
            msg = "DRPCClient: give either a dag_id or a topology (module:attribute)"
            raise ConfigurationError(msg)
        self.dag_id = dag_id
        self._target = (
            None if topology is None else DRPCTarget(topology, zookeeper_conn_id, state_conn_id)
        )
        self.commit_wait_s = commit_wait_s
        self._lock = threading.Lock()
        self._hook: TridentHook | None = None
        self._executor: DRPCExecutor | None = None

    def __repr__(self) -> str:
        what = f"dag_id={self.dag_id!r}" if self.dag_id else f"{self._target!r}"
        return f"DRPCClient({what})"

    @property
    def target(self) -> DRPCTarget:
        """The topology and connections requests use."""
        if self._target is None:
            assert self.dag_id is not None
            self._target = dag_target(self.dag_id)
        return self._target

    def executor(self) -> DRPCExecutor:
        """The executor, connected to ZooKeeper on first use.

        Raises
        ------
        CoordinatorUnavailableError
            If ZooKeeper cannot be reached.
        """
        with self._lock:
            if self._executor is None:
                target = self.target
                hook = TridentHook(
                    zookeeper_conn_id=target.zookeeper_conn_id,
                    state_conn_id=target.state_conn_id,
                )
                hook.open_session()  # kept open until close()
                try:
                    self._executor = hook.drpc_executor(
                        target.topology, commit_wait_s=self.commit_wait_s
                    )
                except BaseException:
                    hook.close_session()
                    raise
                self._hook = hook
            return self._executor

    def execute_rows(self, function: str, args: Any) -> list[Row]:
        """The result tuples of one request (see :meth:`DRPCExecutor.execute`)."""
        return self.executor().execute(function, args)

    def execute(self, function: str, args: Any) -> str:
        """The result tuples of one request as Trident's JSON list, e.g. ``[["cow",2]]``.

        Raises
        ------
        DRPCUnknownFunctionError
            For an unknown DAG or function.
        DRPCArgumentsError
            For arguments that are not a string, or that a step failed on.
        DRPCCommitInProgressError, CoordinatorUnavailableError, StateStoreUnavailableError
            When the committed state cannot be read now.
        """
        return result_json(self.execute_rows(function, args))

    def close(self) -> None:
        """Close the ZooKeeper session (the client reconnects on its next request)."""
        with self._lock:
            hook, self._hook, self._executor = self._hook, None, None
        if hook is not None:
            hook.close_session()

    def __enter__(self) -> DRPCClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
