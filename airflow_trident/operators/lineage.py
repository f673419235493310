"""OpenLineage for the process and commit tasks, as the Spark provider's operators report it:
``get_openlineage_facets_on_complete`` returns an ``OperatorLineage`` whose inputs are the
topology's spouts and outputs its states.

Without ``apache-airflow-providers-openlineage`` installed the method returns ``None`` (Airflow
only calls it when that provider is). Each source and sink names its own datasets
(:class:`~airflow_trident.names.LineageDatasets`) per the OpenLineage naming spec, so they
join other producers' datasets of the same table, topic or files (credentials never appear):

==============================  ===============================  ===============================
source or sink                  namespace                        name
==============================  ===============================  ===============================
Kafka spouts, Kafka sink        ``kafka://host:port`` (the       the topic (a spout's ``pattern``:
                                first bootstrap server)          the pattern)
PostgreSQL table (table         ``postgres://host:port``         ``database.schema.table``
spout, SQL state)
SQLite table                    ``sqlite://<file>``              ``table``
file log spout, Delta sink      ``file`` (local),                the absolute path; the key
                                ``s3://bucket``, ``gs://bucket``,  (no leading ``/``) in a bucket
                                ``hdfs://namenode:port``
Iceberg sink                    the catalog: REST URI, Hive      ``namespace.table``
                                ``hive://host:port``, else the
                                warehouse location
anything else (memory spouts    ``trident://<topology>``         the spout's or state's name
and states, your own spouts)
==============================  ===============================  ===============================

A connection id (a Kafka connection's ``bootstrap.servers``, a table spout's database, an
Iceberg catalog's connection) is resolved when the task asks for its lineage, at run time. A
source or sink that cannot be named then (a missing connection, say) is logged and named by its
topology instead: lineage never fails a task.

>>> from airflow_trident.examples.topologies import word_count
>>> inputs, outputs = lineage_datasets(word_count, "postgresql+psycopg://u:pw@db/trident")
>>> inputs, outputs
([('trident://word_count', 'sentences')], [('postgres://db:5432', 'trident.public.word_counts')])
>>> table_dataset("mysql+pymysql://u:pw@my:3307/shop", "orders")
('mysql://my:3307', 'shop.orders')
>>> location_dataset("s3a://lake/events/2026/"), location_dataset("/data/log")
(('s3://lake', 'events/2026'), ('file', '/data/log'))
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_trident.errors import ConfigurationError
from airflow_trident.hooks.trident import TridentHook
from airflow_trident.names import Dataset, LineageDatasets, location_dataset, table_dataset
from airflow_trident.runtime.reference import load_topology
from airflow_trident.tasks.base import moved
from airflow_trident.topology import TridentTopology

__all__ = ["lineage_datasets", "location_dataset", "table_dataset", "task_lineage"]

log = logging.getLogger(__name__)

_MOVED = {"TridentLineageMixin": "airflow_trident.operators.lineage.task_lineage"}
"""Deprecated names: the mixin's method is a function the tasks call (no base class)."""


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _MOVED)


def _named(
    what: str, obj: Any, fallback: Dataset, topology: str, state_url: str | None
) -> list[Dataset]:
    """The datasets ``obj`` names itself (:class:`LineageDatasets`), else ``[fallback]``; on
    an error the fallback, with a log line naming the spout or state and the error's kind
    (the message of one of our errors: another's may quote a URL)."""
    if not isinstance(obj, LineageDatasets):
        return [fallback]
    try:
        found = obj.openlineage_datasets(state_url)
    except Exception as exc:  # lineage is worth no failed task
        why = f"{type(exc).__name__}: {exc}" if isinstance(exc, ConfigurationError) else (
            type(exc).__name__)  # fmt: skip
        log.warning("lineage of topology %r: %s %r cannot be named (%s); reported as %s",
                    topology, what, fallback[1], why, fallback)  # fmt: skip
        return [fallback]
    return list(found) or [fallback]


def lineage_datasets(
    topology: TridentTopology, state_url: str | None
) -> tuple[list[Dataset], list[Dataset]]:
    """``(namespace, name)`` of the topology's inputs (spouts) and outputs (states), in the
    order of the spouts' and states' names. ``state_url`` is the run's state database (where
    SQL states made without a database of their own live). Connections are resolved now."""
    ours = f"trident://{topology.name}"
    inputs: list[Dataset] = []
    for name in sorted(topology.spouts):
        spout = topology.nodes[topology.spouts[name]].spout  # type: ignore[attr-defined]
        inputs += _named("spout", spout, (ours, name), topology.name, state_url)
    outputs: list[Dataset] = []
    for state, node_id in sorted(topology.states.items()):
        factory = getattr(topology.nodes[node_id], "factory", None)
        outputs += _named("state", factory, (ours, state), topology.name, state_url)
    return inputs, outputs


def task_lineage(reference: str, state_conn_id: str | None) -> Any:
    """The lineage of a batch task of the topology ``reference`` (``module:attribute``) whose
    state database is ``state_conn_id``'s: an ``OperatorLineage``, or ``None`` without the
    OpenLineage provider (or when the topology cannot be loaded: logged). What the process,
    commit and express tasks' ``get_openlineage_facets_on_complete`` returns."""
    try:
        from airflow.providers.common.compat.openlineage.facet import Dataset
        from airflow.providers.openlineage.extractors import (  # type: ignore[import-not-found,unused-ignore]
            OperatorLineage,
        )
    except ImportError:
        return None
    from airflow_trident.hooks import connections

    connections.install()  # connection ids resolve through Airflow, now (at run time)
    try:
        url: str | None = TridentHook(state_conn_id=state_conn_id).state_url()
    except Exception as exc:  # lineage is worth no failed task
        log.warning("lineage: the state database cannot be read (%s); SQL states are "
                    "named by their topology", type(exc).__name__)  # fmt: skip
        url = None
    try:
        topology = load_topology(reference)
    except Exception as exc:
        log.warning("lineage: topology %r cannot be loaded (%s); no lineage reported",
                    reference, type(exc).__name__)  # fmt: skip
        return None
    inputs, outputs = lineage_datasets(topology, url)
    return OperatorLineage(
        inputs=[Dataset(namespace=ns, name=name) for ns, name in inputs],
        outputs=[Dataset(namespace=ns, name=name) for ns, name in outputs],
    )
