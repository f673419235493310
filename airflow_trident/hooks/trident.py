"""``TridentHook``: the one place that turns Airflow connections into a topology's batch lifecycle.

Operators, sensors, triggers, the CLI, the status view and DRPC ask this hook for what they
need of a topology, each for the duration of a ``with`` block:

* :meth:`TridentHook.coordinator_store` — the topology's coordinator store in ZooKeeper (txids,
  runs, attempts): status, backfill, the commit trigger's watch;
* :meth:`TridentHook.readiness` — the light handle of a readiness check (a sensor's poke, a
  trigger's poll): the store and the spouts' coordinators, no committer, no interpreter, no
  ledger, no state database;
* :meth:`TridentHook.batch_steps` — the whole lifecycle
  (:class:`~airflow_trident.batch.steps.BatchSteps`), for the begin, process, commit and
  success steps;
* :meth:`TridentHook.drpc_executor` — a DRPC executor over the committed state, on a session
  the caller keeps open (:meth:`TridentHook.open_session` / :meth:`TridentHook.close_session`:
  the DRPC client keeps one for its life).

ZooKeeper comes from the ``trident_zookeeper`` connection, the state database from the state
connection (``state_conn_id``, any SQLAlchemy-reachable database, see
:class:`~airflow_trident.hooks.state_store.StateStoreHook`). The state database is bound to the
topology's states that name none of their own (``sql_state(None, ...)``) and hosts the commit
ledger — in the worker, in a Spark job (which receives the URL as a secret through its
environment) and on Spark executors (inside the task closure) alike; nothing is exported into the
worker's environment. Without a state connection, ``[trident] state_conn_id`` names it, else the
user's ``TRIDENT_STATE_URL`` is the state database (read, never written), else the
single-machine SQLite file when ``[trident] embedded`` allows it, else the task fails
(:mod:`airflow_trident.hooks.config`).

**One ZooKeeper session per task**: every ``with`` block above runs inside
:meth:`TridentHook.session`, which is reentrant: a task that wraps its work in ``with
hook.session():`` connects once, however many stores, handles and lifecycles it opens inside
(one hook instance per task); a lone block connects and closes on its own.

A missing connection is a :class:`~airflow_trident.errors.MissingConnectionError` naming it, with
a hint on how to define it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from airflow.sdk.bases.hook import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException
from kazoo.client import KazooClient

from airflow_trident.batch.lifecycle import zookeeper_batch_steps
from airflow_trident.batch.steps import BatchSteps, topology_spouts
from airflow_trident.coordination.client import ZkConfig
from airflow_trident.coordination.coordinator import TransactionalCoordinator
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.drpc import DRPCExecutor
from airflow_trident.errors import ConfigurationError, MissingConnectionError
from airflow_trident.hooks import config
from airflow_trident.hooks.connections import install as install_connections
from airflow_trident.hooks.state_store import StateStoreHook
from airflow_trident.hooks.zookeeper import ZooKeeperHook
from airflow_trident.runtime.reference import load_topology
from airflow_trident.spout.executor import EmitsInTxidOrder, OpaqueBatches, PartitionedBatches
from airflow_trident.state.binding import StateBinding

__all__ = ["BatchReadiness", "TridentHook", "missing_connection"]

CONNECTION_HINT = (
    "Hint: create it (`airflow connections add ...`, the UI's Admin > Connections, or an "
    "AIRFLOW_CONN_<ID> environment variable)"
)


def missing_connection(exc: AirflowNotFoundException) -> MissingConnectionError:
    """Airflow's "conn_id isn't defined" as the project's error, with the hint."""
    return MissingConnectionError(f"{exc}. {CONNECTION_HINT}")


@dataclass(frozen=True)
class BatchReadiness:
    """What a readiness check needs: the coordinator store and the spouts' coordinators.

    Built by :meth:`TridentHook.readiness`; building it does no ZooKeeper I/O and constructs
    neither the state committer, the interpreter, the ledger nor a state binding.
    """

    store: CoordinatorStore
    coordinator: TransactionalCoordinator

    def is_ready(self) -> bool:
        """Whether every spout is ready for the next batch."""
        return self.coordinator.is_ready()

    def settled(self, txid: int) -> bool:
        """Whether :meth:`is_ready` accounts for batch ``txid``: it is committed, or every
        partitioned spout has emitted it. A partitioned spout's readiness looks after its
        newest *emitted* batch: between a batch's begin and its emit, the records it is about
        to take still look new (``txid`` 0, none begun: settled)."""
        if txid <= self.store.commits.committed_txid():
            return True
        for name, spout in self.coordinator.spouts.items():
            if isinstance(spout, EmitsInTxidOrder):
                if not spout.emitted(txid):
                    return False
            elif isinstance(spout, OpaqueBatches):
                meta = self.store.metas.get_meta(name, txid)
                if meta is None:
                    return False
                fixed = spout.batch_partitions(txid, meta) if isinstance(
                    spout, PartitionedBatches) else {}  # fmt: skip
                if any(v is None for v in fixed.values()):
                    return False
        return True


class TridentHook(BaseHook):
    """A topology's coordinator store, readiness and batch lifecycle from Airflow connections.

    :param zookeeper_conn_id: the ``trident_zookeeper`` connection.
    :param state_conn_id: the state database connection (``postgres``, ``sqlite``, or a
        ``trident_state`` connection); ``None``: ``[trident] state_conn_id``, else
        ``TRIDENT_STATE_URL``, else the single-machine default (:mod:`~.hooks.config`).
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
        install_connections()  # sources' and sinks' conn_ids resolve through Airflow here
        self.zookeeper_conn_id = zookeeper_conn_id
        self.state_conn_id = state_conn_id
        self._zookeeper: ZooKeeperHook | None = None
        self._root = ""
        self._depth = 0
        self._readiness: dict[str, BatchReadiness] = {}

    def __repr__(self) -> str:
        return (
            f"TridentHook(zookeeper_conn_id={self.zookeeper_conn_id!r}, "
            f"state_conn_id={self.state_conn_id!r})"
        )

    def state_url(self) -> str | None:
        """The state database URL (with its password: never log it), read when called.

        Raises
        ------
        MissingConnectionError
            If the state connection names no connection.
        ConfigurationError
            If no state database is configured where the single-machine default is not allowed.
        """
        conn_id = config.state_conn_id(self.state_conn_id)
        if conn_id is None:
            return config.embedded_state_url()
        try:
            url = StateStoreHook(state_conn_id=conn_id).get_url()
        except AirflowNotFoundException as exc:
            raise missing_connection(exc) from None
        rendered: str = url.render_as_string(hide_password=False)
        return rendered

    def zookeeper_config(self) -> ZkConfig:
        """How to reach ZooKeeper (from the connection).

        Raises
        ------
        MissingConnectionError
            If ``zookeeper_conn_id`` names no connection.
        """
        try:
            config: ZkConfig = ZooKeeperHook(zookeeper_conn_id=self.zookeeper_conn_id).get_config()
        except AirflowNotFoundException as exc:
            raise missing_connection(exc) from None
        return config

    # -- the ZooKeeper session ------------------------------------------------------------------

    def open_session(self) -> KazooClient:
        """Open this hook's ZooKeeper session, or join the open one; every call needs its
        :meth:`close_session` (:meth:`session` pairs them).

        Raises
        ------
        MissingConnectionError
            If the ZooKeeper connection is not defined.
        CoordinatorUnavailableError
            If ZooKeeper does not answer within the connection's ``timeout``.
        """
        if self._zookeeper is None:
            self._zookeeper = ZooKeeperHook(zookeeper_conn_id=self.zookeeper_conn_id)
        self._depth += 1
        try:
            if self._depth == 1:
                self._root = self._zookeeper.get_config().root
            client: KazooClient = self._zookeeper.get_conn()
        except AirflowNotFoundException as exc:
            self.close_session()
            raise missing_connection(exc) from None
        except BaseException:
            self.close_session()
            raise
        return client

    def close_session(self) -> None:
        """Leave the session :meth:`open_session` opened or joined; the last one closes it."""
        self._depth -= 1
        if self._depth <= 0:
            zookeeper, self._zookeeper, self._depth = self._zookeeper, None, 0
            self._readiness.clear()
            if zookeeper is not None:
                zookeeper.close()

    @contextmanager
    def session(self) -> Iterator[KazooClient]:
        """One ZooKeeper session for the ``with`` block; blocks nested in it (here or in the
        methods below) share it, and the outermost one closes it."""
        client = self.open_session()
        try:
            yield client
        finally:
            self.close_session()

    @contextmanager
    def coordinator_store(self, topology_name: str) -> Iterator[CoordinatorStore]:
        """The coordinator store of the topology named ``topology_name`` (not a reference)."""
        with self.session() as client:
            yield CoordinatorStore(client, CoordinatorPaths(self._root, topology_name))

    # -- what the tasks open --------------------------------------------------------------------

    @contextmanager
    def readiness(self, topology: str) -> Iterator[BatchReadiness]:
        """The light readiness handle of the topology ``module:attribute``, built once per
        session (a sensor's pokes and a trigger's polls reuse it)."""
        with self.session():
            found = self._readiness.get(topology)
            if found is None:
                loaded = load_topology(topology)
                with self.coordinator_store(loaded.name) as store:
                    found = BatchReadiness(
                        store, TransactionalCoordinator(store, topology_spouts(loaded, store))
                    )
                self._readiness[topology] = found
            yield found

    @contextmanager
    def batch_steps(
        self, topology: str, *, staging_root: str, keep_txids: int = 16
    ) -> Iterator[BatchSteps]:
        """The lifecycle of the topology ``module:attribute``, connected to ZooKeeper for the
        duration of the ``with`` block."""
        loaded = load_topology(topology)
        url = self.state_url()
        with self.session() as client:
            yield zookeeper_batch_steps(
                loaded,
                client,
                root=self._root,
                staging_root=staging_root,
                state_url=url,
                keep_txids=keep_txids,
            )

    def drpc_executor(self, topology: str, *, commit_wait_s: float = 2.0) -> DRPCExecutor:
        """A DRPC executor of the topology ``module:attribute`` over its committed state in the
        state database (see :class:`~airflow_trident.drpc.DRPCExecutor`), reading ZooKeeper on
        this hook's session: open it first (:meth:`open_session`, or inside :meth:`session`);
        the executor works until that session closes.

        Raises
        ------
        ConfigurationError
            If no session is open.
        """
        if self._zookeeper is None:
            msg = "TridentHook.drpc_executor needs an open session (open_session() or session())"
            raise ConfigurationError(msg)
        loaded = load_topology(topology)
        store = CoordinatorStore(
            self._zookeeper.get_conn(), CoordinatorPaths(self._root, loaded.name)
        )
        return DRPCExecutor(
            loaded, store=store, states=StateBinding(self.state_url()), commit_wait_s=commit_wait_s
        )

    def drpc(self, topology: str, function: str, args: str) -> list[tuple[Any, ...]]:
        """Answer one request of the DRPC stream ``function`` of the topology
        ``module:attribute`` in this process, from the committed state in the state database."""
        with self.session():
            return self.drpc_executor(topology).execute(function, args)

    def get_conn(self) -> Any:
        """Not a connection of its own: use :meth:`batch_steps` (or the other blocks)."""
        msg = "TridentHook has no single connection; use TridentHook.batch_steps(...)"
        raise NotImplementedError(msg)
