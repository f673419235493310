"""Where a Trident DAG's batch runs: the one lookup of a DAG's Trident tasks, in every layout.

A DAG made by :func:`~airflow_trident.dag.trident_dag` (or holding a
:func:`~airflow_trident.dag.trident_batch`) says, in its begin task, which topology it runs
(``module:attribute``), its ZooKeeper and state connections and its staging root. The begin task
is a ``BeginBatchOperator`` in the ``"standard"`` layout, a ``BeginWhenReadySensor`` in the
``"compact"`` one and the whole batch's ``ExpressBatchOperator`` in the ``"express"`` one;
:func:`dag_topology` finds any of them, from the serialized DAG in the metadata
database (the api-server needs no DAG files: those arguments are template fields, which the
serialized DAG keeps), else by parsing the DAG's file. The CLI's ``status``, ``backfill``,
``drpc`` and ``rebuild``, the status view and the DRPC endpoint all read a DAG through it.

The begin task's class in each layout (its carrier, which carries those arguments) is the
layouts' data (:data:`~airflow_trident.batch.layouts.CARRIER_TYPES`); this module never imports
the operators (it sits below them).

Examples
--------
>>> from airflow_trident.dag import trident_dag
>>> dag = trident_dag("airflow_trident.examples.topologies:word_count", dag_id="lookup_doc",
...                   layout="compact", staging_root="/stage")
>>> found = DagTopology.of_dag(dag)
>>> found.topology, found.layout, found.begin_task_id, found.staging_root
('airflow_trident.examples.topologies:word_count', 'compact', 'batch.begin', '/stage')
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from airflow_trident.batch.layouts import CARRIER_TYPES, LAYOUTS
from airflow_trident.errors import UnknownDagError

__all__ = ["BEGIN_TASK_TYPES", "DagTopology", "dag_topology", "is_begin_task", "trident_dag_ids"]

log = logging.getLogger(__name__)

BEGIN_TASK_TYPES: dict[str, str] = dict(CARRIER_TYPES)
"""The begin task's class in each layout of ``trident_dag`` -> the layout's name: it carries
the batch's arguments (:attr:`Layout.carrier <airflow_trident.batch.layouts.Layout.carrier>`).
"""


def _task_types(task: Any) -> set[str]:
    """The class names ``task`` answers to: its classes' (a parsed DAG's task, subclasses
    included) and its ``task_type`` (a serialized DAG's task keeps only that)."""
    names = {cls.__name__ for cls in type(task).__mro__}
    task_type = getattr(task, "task_type", None)
    if isinstance(task_type, str):
        names.add(task_type)
    return names


def is_begin_task(task: Any) -> bool:
    """Whether ``task`` is a Trident batch's begin task, in any layout."""
    return bool(_task_types(task) & set(BEGIN_TASK_TYPES))


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
    layout: str = "standard"
    """``"standard"``, ``"compact"`` or ``"express"`` (which begin task the DAG has)."""
    begin_task_id: str = f"batch.{LAYOUTS['standard'].carrier.task_id}"

    @classmethod
    def of_task(cls, dag_id: str, task: Any) -> DagTopology:
        """From a begin task (parsed or serialized) of DAG ``dag_id``."""
        staging = str(task.staging_root) if task.staging_root else None
        # the most derived type's layout first (a subclass of one carrier type is its layout's)
        names = [getattr(task, "task_type", None), *(c.__name__ for c in type(task).__mro__)]
        layouts = [BEGIN_TASK_TYPES[name] for name in names if name in BEGIN_TASK_TYPES]
        return cls(
            dag_id=dag_id,
            topology=str(task.topology),
            zookeeper_conn_id=str(task.zookeeper_conn_id),
            state_conn_id=None if task.state_conn_id is None else str(task.state_conn_id),
            staging_root=None if staging is None or "{{" in staging else staging,
            layout=layouts[0] if layouts else "standard",
            begin_task_id=str(task.task_id),
        )

    @classmethod
    def of_dag(cls, dag: Any) -> DagTopology:
        """From the first begin task of ``dag`` (a parsed or serialized DAG).

        Raises
        ------
        UnknownDagError
            If ``dag`` has no Trident begin task.
        """
        for task in dag.tasks:
            if is_begin_task(task):
                return cls.of_task(str(dag.dag_id), task)
        msg = (
            f"DAG {dag.dag_id!r} has no Trident batch (no {' or '.join(BEGIN_TASK_TYPES)}): it "
            f"is not a Trident DAG. Hint: make it with airflow_trident.dag.trident_dag"
        )
        raise UnknownDagError(msg)


def _serialized_dag(dag_id: str) -> Any:
    """``dag_id``'s serialized DAG in the metadata database (``None``: no metadata database
    here, or no such DAG in it)."""
    try:
        from airflow.models.serialized_dag import SerializedDagModel

        return SerializedDagModel.get_dag(dag_id)
    except Exception as exc:  # no metadata database here (a bare CLI home): parse the files
        log.debug("no serialized DAG %s: %s", dag_id, exc)
        return None


def _parsed_dag(dag_id: str) -> Any:
    """``dag_id`` parsed from its file if the metadata database knows it, else from the DAGs
    folder.

    Raises
    ------
    UnknownDagError
        If no file defines it.
    """
    from airflow.dag_processing.dagbag import DagBag

    fileloc = None
    try:
        from airflow.models.dag import DagModel

        model = DagModel.get_current(dag_id)
        fileloc = model.fileloc if model is not None else None
    except Exception as exc:  # no metadata database here: parse the whole folder
        log.debug("no DAG model %s: %s", dag_id, exc)
    bag = DagBag(dag_folder=fileloc) if fileloc else DagBag()
    dag = bag.dags.get(dag_id)
    if dag is None:
        msg = (
            f"DAG {dag_id!r} is not in the DAGs folder. Hint: `airflow dags list` shows the DAG "
            f"ids; AIRFLOW_HOME and the [core] dags_folder decide which folder is read"
        )
        raise UnknownDagError(msg)
    return dag


def dag_topology(dag_id: str) -> DagTopology:
    """Where the topology of Trident DAG ``dag_id`` runs (its begin task's arguments, in either
    layout), from the serialized DAG in the metadata database, else from the DAG's file.

    Raises
    ------
    UnknownDagError
        If no DAG ``dag_id`` is found, or it has no Trident begin task.
    """
    dag = _serialized_dag(dag_id)
    return DagTopology.of_dag(dag if dag is not None else _parsed_dag(dag_id))


def trident_dag_ids(dag_ids: list[str]) -> list[str]:
    """Those of ``dag_ids`` whose serialized DAG has a Trident begin task, in either layout (no
    DAG parsing)."""
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    markers = [json.dumps(name) for name in BEGIN_TASK_TYPES]
    found: set[str] = set()
    with create_session() as session:
        rows = session.scalars(
            select(SerializedDagModel).where(SerializedDagModel.dag_id.in_(dag_ids))
        )
        for row in rows:  # .data: the JSON, decompressed when [core] compresses it
            text = json.dumps(row.data)
            if row.dag_id not in found and any(marker in text for marker in markers):
                found.add(row.dag_id)
    return sorted(found)
