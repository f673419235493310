"""The status of a Trident DAG, from its Airflow connections: ``airflow-trident status DAG_ID``
and the UI view read it here.

:func:`~airflow_trident.hooks.dag_tasks.dag_topology` finds the DAG's topology, connections and
staging root (in either layout); :func:`collect_status` opens the topology's coordinator store
through :class:`~airflow_trident.hooks.trident.TridentHook` and hands it, the commit ledger and
the staging area to :class:`~airflow_trident.batch.status.StatusCollector` (what each fact means:
:mod:`airflow_trident.batch.status`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.status import RunStatus, StatusCollector, TopologyStatus
from airflow_trident.errors import ConfigurationError, MissingConnectionError
from airflow_trident.hooks import config
from airflow_trident.hooks.dag_tasks import DagTopology, dag_topology, trident_dag_ids
from airflow_trident.hooks.trident import TridentHook
from airflow_trident.runtime.reference import load_topology
from airflow_trident.runtime.staging import StagingArea

__all__ = [
    "DagTopology",
    "collect_run_status",
    "collect_status",
    "dag_topology",
    "status_command",
    "trident_dag_ids",
]


def collect_status(target: DagTopology, *, last: int = 10) -> TopologyStatus:
    """Read the status of ``target``'s topology through its connections.

    Raises
    ------
    MissingConnectionError
        If a connection is not defined (the message says which, and how to define it).
    CoordinatorUnavailableError
        If ZooKeeper does not answer.
    """
    with _collector(target, last=last) as collector:
        return collector.collect(dag_id=target.dag_id)


def collect_run_status(target: DagTopology, run_id: str) -> RunStatus:
    """What run ``run_id`` of ``target`` is to its topology (its txid as soon as its begin
    bound it in ZooKeeper, and that batch's phase), read as :func:`collect_status` reads.

    Raises
    ------
    MissingConnectionError, CoordinatorUnavailableError
        As :func:`collect_status`.
    """
    with _collector(target, last=1) as collector:
        return collector.run(run_id, dag_id=target.dag_id)


@contextmanager
def _collector(target: DagTopology, *, last: int) -> Iterator[StatusCollector]:
    """A status collector over ``target``'s connections, for the time of one read."""
    hook = TridentHook(zookeeper_conn_id=target.zookeeper_conn_id,
                       state_conn_id=target.state_conn_id)  # fmt: skip
    try:
        url = hook.state_url()
        hook.zookeeper_config()
    except MissingConnectionError as exc:
        raise MissingConnectionError(f"DAG {target.dag_id!r}: {exc}") from None
    topology = load_topology(target.topology)
    engine = sa.create_engine(url) if url else None
    try:
        with hook.coordinator_store(topology.name) as store:
            yield StatusCollector(
                store,
                ledger=CommitLedger(engine) if engine is not None else None,
                topology=topology,
                staging=_staging(target.staging_root, topology.name),
                last=last,
            )
    finally:
        if engine is not None:
            engine.dispose()  # the api-server calls this per request: keep no pool behind


def _staging(given: str | None, topology: str) -> StagingArea | None:
    """The staging area the DAG's tasks use: the DAG's root, else the one configured here
    (``[trident] staging_root``, ...); ``None`` when none is (the status then shows no
    staged manifests)."""
    try:
        root = config.staging_root(given)
    except ConfigurationError:
        return None
    return StagingArea(root, topology)


def status_command(dag_id: str, *, as_json: bool = False, last: int = 10) -> int:
    """``airflow-trident status DAG_ID [--json] [--last N]``: the report on stdout, exit 0.

    Mistakes (an unknown DAG, a missing connection, ZooKeeper down) raise; the command line
    prints them in one line and exits 2.
    """
    with output_to_stderr():  # Airflow's log lines (DagBag, hooks) print to stdout
        status = collect_status(dag_topology(dag_id), last=last)
    print(status.to_json() if as_json else status.format_text())
    return 0


@contextmanager
def output_to_stderr() -> Iterator[None]:
    """Send everything written to stdout (file descriptor 1) to stderr meanwhile: loggers
    configured with the stdout stream keep writing there, so only the descriptor can move."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
