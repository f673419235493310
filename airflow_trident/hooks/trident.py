"""``TridentHook``: the one place that turns Airflow connections into a topology's batch lifecycle.

Operators, the sensor, the triggers and the CLI ask this hook for the
:class:`~airflow_trident.batch.steps.BatchSteps` of a topology: ZooKeeper from the
``trident_zookeeper`` connection, the state database from the state connection (``state_conn_id``,
any SQLAlchemy-reachable database, see :class:`~airflow_trident.hooks.state_store.StateStoreHook`)
and the staging root. The state database is bound to the topology's states that name none of
their own (``sql_state(None, ...)``) and hosts the commit ledger — in the worker, in a Spark job
(which receives the URL as a secret through its environment) and on Spark executors (inside the
task closure) alike; nothing is exported into the worker's environment.

Without a state connection, the user's ``TRIDENT_STATE_URL`` is the state database (read, never
written), else each state's own default.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from airflow.sdk.bases.hook import BaseHook

from airflow_trident.batch.lifecycle import zookeeper_batch_steps
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.client import ZkConfig
from airflow_trident.hooks.state_store import StateStoreHook
from airflow_trident.hooks.zookeeper import ZooKeeperHook
from airflow_trident.runtime.reference import load_topology
from airflow_trident.state.sql.factory import STATE_URL_ENV

__all__ = ["TridentHook"]


class TridentHook(BaseHook):
    """A topology's batch lifecycle from Airflow connections.

    :param zookeeper_conn_id: the ``trident_zookeeper`` connection.
    :param state_conn_id: the state database connection (``postgres``, ``sqlite``, or a
        ``trident_state`` connection); ``None``: ``TRIDENT_STATE_URL`` if set.
    """

    hook_name = "Trident"

    def __init__(
        self,
        *,
        zookeeper_conn_id: str = ZooKeeperHook.default_conn_name,
        state_conn_id: str | None = None,
        logger_name: str | None = None,
    ) -> None:
        super().__init__(logger_name=logger_name)
        self.zookeeper_conn_id = zookeeper_conn_id
        self.state_conn_id = state_conn_id

    def __repr__(self) -> str:
        return (
            f"TridentHook(zookeeper_conn_id={self.zookeeper_conn_id!r}, "
            f"state_conn_id={self.state_conn_id!r})"
        )

    def state_url(self) -> str | None:
        """The state database URL (with its password: never log it)."""
        if self.state_conn_id is None:
            return os.environ.get(STATE_URL_ENV) or None
        url = StateStoreHook(state_conn_id=self.state_conn_id).get_url()
        rendered: str = url.render_as_string(hide_password=False)
        return rendered

    def zookeeper_config(self) -> ZkConfig:
        """How to reach ZooKeeper (from the connection)."""
        config: ZkConfig = ZooKeeperHook(zookeeper_conn_id=self.zookeeper_conn_id).get_config()
        return config

    @contextmanager
    def batch_steps(
        self, topology: str, *, staging_root: str, keep_txids: int = 16
    ) -> Iterator[BatchSteps]:
        """The lifecycle of the topology ``module:attribute``, connected to ZooKeeper for the
        duration of the ``with`` block."""
        loaded = load_topology(topology)
        url = self.state_url()
        with ZooKeeperHook(zookeeper_conn_id=self.zookeeper_conn_id) as zk:
            yield zookeeper_batch_steps(
                loaded,
                zk.get_conn(),
                root=zk.get_config().root,
                staging_root=staging_root,
                state_url=url,
                keep_txids=keep_txids,
            )

    def drpc(self, topology: str, function: str, args: str) -> list[tuple[Any, ...]]:
        """Answer one request of the DRPC stream ``function`` of the topology
        ``module:attribute`` in this process, from the committed state in the state database."""
        from airflow_trident.hooks.drpc import DRPCClient

        with DRPCClient(
            topology=topology,
            zookeeper_conn_id=self.zookeeper_conn_id,
            state_conn_id=self.state_conn_id,
        ) as client:
            return client.execute_rows(function, args)

    def get_conn(self) -> Any:
        """Not a connection of its own: use :meth:`batch_steps`."""
        msg = "TridentHook has no single connection; use TridentHook.batch_steps(...)"
        raise NotImplementedError(msg)
