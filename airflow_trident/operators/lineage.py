"""OpenLineage for the process and commit tasks, as the Spark provider's operators report it:
``get_openlineage_facets_on_complete`` returns an ``OperatorLineage`` whose inputs are the
topology's spouts and outputs its states.

Without ``apache-airflow-providers-openlineage`` installed the method returns ``None`` (Airflow
only calls it when that provider is). Datasets are named per the OpenLineage naming spec, so they
join other producers' datasets of the same table or files (credentials never appear):

==========================  ==========================  ===================================
what                        namespace                   name
==========================  ==========================  ===================================
PostgreSQL table            ``postgres://host:port``    ``database.schema.table``
MySQL table                 ``mysql://host:port``       ``database.table``
SQLite table                ``sqlite://<file>``         ``table``
local files (a file log,    ``file://``                 the absolute path
a Delta table)
object store / HDFS         ``s3://bucket``,            the key / path (no leading ``/``
                            ``gs://bucket``,            for buckets)
                            ``hdfs://namenode:port``
a spout of unknown source   ``trident://<topology>``    the spout's name
==========================  ==========================  ===================================

>>> from airflow_trident.examples.topologies import word_count
>>> inputs, outputs = lineage_datasets(word_count, "postgresql+psycopg://u:pw@db/trident")
>>> inputs, outputs
([('trident://word_count', 'sentences')], [('postgres://db:5432', 'trident.public.word_counts')])
>>> table_dataset("mysql+pymysql://u:pw@my:3307/shop", "orders")
('mysql://my:3307', 'shop.orders')
>>> location_dataset("s3a://lake/events/2026/"), location_dataset("/data/log")
(('s3://lake', 'events/2026'), ('file://', '/data/log'))
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa

from airflow_trident.graph import PersistNode
from airflow_trident.hooks.trident import TridentHook
from airflow_trident.runtime.reference import load_topology
from airflow_trident.topology import TridentTopology

__all__ = ["TridentLineageMixin", "lineage_datasets", "location_dataset", "table_dataset"]

Named = tuple[str, str]

_DEFAULT_PORTS = {"postgres": 5432, "mysql": 3306}
_SCHEMES = {"postgresql": "postgres", "s3a": "s3", "s3n": "s3", "gcs": "gs"}


def table_dataset(url: str | None, table: str, schema: str | None = None) -> Named:
    """``(namespace, name)`` of ``table`` (in ``schema``) in the database of ``url``."""
    if not url:
        return ("trident://state", table)
    parsed = sa.make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return (f"sqlite://{parsed.database or ':memory:'}", table)
    scheme = _SCHEMES.get(backend, backend)
    port = parsed.port or _DEFAULT_PORTS.get(scheme)
    authority = f"{parsed.host or 'localhost'}{f':{port}' if port else ''}"
    database = parsed.database or ""
    if scheme == "postgres":
        return (f"postgres://{authority}", f"{database}.{schema or 'public'}.{table}")
    parts = [p for p in (database, schema, table) if p]
    return (f"{scheme}://{authority}", ".".join(parts))


def location_dataset(location: str) -> Named:
    """``(namespace, name)`` of files at ``location``: a local path or ``file:`` URL, or an
    object store / HDFS URL."""
    parts = urlsplit(location)
    if parts.scheme in ("", "file") or len(parts.scheme) == 1:  # a path (or a drive letter)
        path = parts.path if parts.scheme == "file" else location
        return ("file://", os.path.abspath(path).rstrip("/") or "/")
    scheme = _SCHEMES.get(parts.scheme, parts.scheme)
    name = parts.path.strip("/") if scheme != "hdfs" else (parts.path.rstrip("/") or "/")
    return (f"{scheme}://{parts.netloc}", name or "/")


def _spout_dataset(
    topology: TridentTopology, name: str, connection_url: Callable[[str], str | None]
) -> Named:
    spout = topology.nodes[topology.spouts[name]].spout  # type: ignore[attr-defined]
    table = getattr(spout, "table", None)
    if isinstance(table, str):
        conn_id = getattr(spout, "conn_id", None)
        url: Any = None
        if isinstance(conn_id, str):
            url = connection_url(conn_id)
        else:
            try:
                url = getattr(spout, "url", None)
            except Exception:  # a source that cannot say where it reads: named by the topology
                url = None
        if isinstance(url, str):
            return table_dataset(url, table, getattr(spout, "schema", None) or None)
    root = getattr(spout, "root", None)
    if isinstance(root, str | os.PathLike):
        return location_dataset(os.fspath(root))
    return (f"trident://{topology.name}", name)


def _state_dataset(node: Any, state: str, state_url: str | None) -> Named:
    factory = node.factory if isinstance(node, PersistNode) else None
    path = getattr(factory, "path", None)
    if isinstance(path, str | os.PathLike):  # a Delta table
        return location_dataset(os.fspath(path))
    layout = getattr(factory, "layout", None)
    table = getattr(layout, "table", None)
    name = getattr(table, "name", None) or state
    schema = getattr(table, "schema", None)
    return table_dataset(state_url, str(name), schema if isinstance(schema, str) else None)


def lineage_datasets(
    topology: TridentTopology,
    state_url: str | None,
    connection_url: Callable[[str], str | None] = lambda conn_id: None,
) -> tuple[list[Named], list[Named]]:
    """``(namespace, name)`` of the topology's inputs (spouts) and outputs (states);
    ``connection_url`` gives the URL of a spout's connection id (credentials are dropped)."""
    inputs = [_spout_dataset(topology, name, connection_url) for name in sorted(topology.spouts)]
    outputs = [
        _state_dataset(topology.nodes[node_id], state, state_url)
        for state, node_id in sorted(topology.states.items())
    ]
    return inputs, outputs


def _connection_url(conn_id: str) -> str | None:
    """The SQLAlchemy URL of an Airflow connection (for its host, port and database only)."""
    try:
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(conn_id)
    except Exception:  # lineage is worth no failed task
        return None
    scheme = {"postgres": "postgresql", "mysql": "mysql"}.get(conn.conn_type or "", conn.conn_type)
    if not scheme or not conn.host:
        return None
    port = f":{conn.port}" if conn.port else ""
    return f"{scheme}://{conn.host}{port}/{conn.schema or ''}"


class TridentLineageMixin:
    """``get_openlineage_facets_on_complete`` for a batch task with ``topology`` (a
    ``module:attribute`` reference) and ``state_conn_id`` attributes."""

    topology: str
    state_conn_id: str | None

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The task's lineage (an ``OperatorLineage``), or ``None`` without the OpenLineage
        provider."""
        try:
            from airflow.providers.common.compat.openlineage.facet import Dataset
            from airflow.providers.openlineage.extractors import (  # type: ignore[import-not-found,unused-ignore]
                OperatorLineage,
            )
        except ImportError:
            return None
        url = TridentHook(state_conn_id=self.state_conn_id).state_url()
        inputs, outputs = lineage_datasets(load_topology(self.topology), url, _connection_url)
        return OperatorLineage(
            inputs=[Dataset(namespace=ns, name=name) for ns, name in inputs],
            outputs=[Dataset(namespace=ns, name=name) for ns, name in outputs],
        )
