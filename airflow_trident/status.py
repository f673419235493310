"""The status of a Trident DAG, from its Airflow connections: ``airflow-trident status DAG_ID``
and the UI view read it here.

A DAG made by :func:`~airflow_trident.dag.trident_dag` says, in its begin task, which topology it
runs (``module:attribute``), its ZooKeeper and state connections and its staging root.
:func:`dag_topology` reads them from the DAG file; :func:`collect_status` connects through
:class:`~airflow_trident.hooks.trident.TridentHook` and hands ZooKeeper, the commit ledger and the
staging area to :class:`~airflow_trident.batch.status.StatusCollector` (what each fact means:
:mod:`airflow_trident.batch.status`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.status import StatusCollector, TopologyStatus
from airflow_trident.coordination.client import connect
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.runtime.reference import load_topology
from airflow_trident.runtime.staging import StagingArea

__all__ = ["DagTopology", "collect_status", "dag_topology", "status_command", "trident_dag_ids"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DagTopology:
    """What a Trident DAG's begin task says about where its topology runs."""

    dag_id: str
    topology: str
    """``module:attribute`` of the topology."""
    zookeeper_conn_id: str
    state_conn_id: str | None
    staging_root: str | None
    """``None`` when it is templated (known only in a task)."""

    @classmethod
    def of_task(cls, dag_id: str, task: Any) -> DagTopology:
        """From a ``BeginBatchOperator`` (any of the DAG's batch operators would do)."""
        staging = str(task.staging_root) if task.staging_root else None
        return cls(
            dag_id=dag_id,
            topology=str(task.topology),
            zookeeper_conn_id=str(task.zookeeper_conn_id),
            state_conn_id=None if task.state_conn_id is None else str(task.state_conn_id),
            staging_root=None if staging is None or "{{" in staging else staging,
        )


def _serialized_begin_task(dag_id: str) -> Any:
    """The begin task of ``dag_id``'s serialized DAG in the metadata database (``None``: no
    metadata database, or no such DAG; a DAG without one raises ``LookupError``). Its
    connection ids, topology and staging root are template fields, so the serialized DAG keeps
    them: the api-server needs no DAG files."""
    try:
        from airflow.models.serialized_dag import SerializedDagModel

        dag = SerializedDagModel.get_dag(dag_id)
    except Exception as exc:  # no metadata database here (a bare CLI home): parse the files
        log.debug("no serialized DAG %s: %s", dag_id, exc)
        return None
    if dag is None:
        return None
    for task in dag.tasks:
        if getattr(task, "task_type", None) == "BeginBatchOperator":
            return task
    msg = f"DAG {dag_id!r} has no BeginBatchOperator: it is not a Trident DAG"
    raise LookupError(msg)


def _parsed_begin_task(dag_id: str) -> Any:
    """The begin task of ``dag_id`` parsed from the DAGs folder (raises when not found)."""
    from airflow.dag_processing.dagbag import DagBag

    from airflow_trident.operators.batch import BeginBatchOperator

    dag = DagBag().dags.get(dag_id)
    if dag is None:
        msg = (
            f"DAG {dag_id!r} is not in the DAGs folder. Hint: `airflow dags list` shows the DAG "
            f"ids; AIRFLOW_HOME and the [core] dags_folder decide which folder is read"
        )
        raise LookupError(msg)
    for task in dag.tasks:
        if isinstance(task, BeginBatchOperator):
            return task
    msg = f"DAG {dag_id!r} has no BeginBatchOperator: it is not a Trident DAG"
    raise LookupError(msg)


def dag_topology(dag_id: str) -> DagTopology:
    """Where the topology of Trident DAG ``dag_id`` runs (its begin task's arguments), from the
    serialized DAG in the metadata database, else from the DAGs folder.

    Raises
    ------
    LookupError
        If no DAG ``dag_id`` is found, or it has no Trident begin task.
    """
    task = _serialized_begin_task(dag_id)
    return DagTopology.of_task(dag_id, task if task is not None else _parsed_begin_task(dag_id))


def trident_dag_ids(dag_ids: list[str]) -> list[str]:
    """Those of ``dag_ids`` whose serialized DAG has a Trident begin task (no DAG parsing)."""
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    found: set[str] = set()
    with create_session() as session:
        rows = session.scalars(
            select(SerializedDagModel).where(SerializedDagModel.dag_id.in_(dag_ids))
        )
        for row in rows:  # .data: the JSON, decompressed when [core] compresses it
            if row.dag_id not in found and '"BeginBatchOperator"' in json.dumps(row.data):
                found.add(row.dag_id)
    return sorted(found)


def collect_status(target: DagTopology, *, last: int = 10) -> TopologyStatus:
    """Read the status of ``target``'s topology through its connections.

    Raises
    ------
    LookupError
        If a connection is not defined (the message says which, and how to define it).
    CoordinatorUnavailableError
        If ZooKeeper does not answer.
    """
    from airflow.sdk.exceptions import AirflowNotFoundException

    from airflow_trident.hooks.trident import TridentHook

    hook = TridentHook(zookeeper_conn_id=target.zookeeper_conn_id,
                       state_conn_id=target.state_conn_id)  # fmt: skip
    try:
        config = hook.zookeeper_config()
        url = hook.state_url()
    except AirflowNotFoundException as exc:
        msg = (
            f"DAG {target.dag_id!r}: {exc}. Hint: define it with `airflow connections add` or "
            f"an AIRFLOW_CONN_<ID> environment variable, as the DAG's tasks see it"
        )
        raise LookupError(msg) from exc
    topology = load_topology(target.topology)
    engine = sa.create_engine(url) if url else None
    client = connect(config)
    try:
        collector = StatusCollector(
            CoordinatorStore(client, CoordinatorPaths(config.root, topology.name)),
            ledger=CommitLedger(engine) if engine is not None else None,
            topology=topology,
            staging=StagingArea(target.staging_root, topology.name)
            if target.staging_root
            else None,
            last=last,
        )
        return collector.collect(dag_id=target.dag_id)
    finally:
        client.stop()
        client.close()
        if engine is not None:
            engine.dispose()  # the api-server calls this per request: keep no pool behind


def status_command(dag_id: str, *, as_json: bool = False, last: int = 10) -> int:
    """``airflow-trident status DAG_ID [--json] [--last N]``: the report on stdout, exit 0.

    Mistakes (an unknown DAG, a missing connection, ZooKeeper down) raise; the command line
    prints them in one line and exits 2.
    """
    with _output_to_stderr():  # Airflow's log lines (DagBag, hooks) print to stdout
        status = collect_status(dag_topology(dag_id), last=last)
    print(status.to_json() if as_json else status.format_text())
    return 0


@contextmanager
def _output_to_stderr() -> Iterator[None]:
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
