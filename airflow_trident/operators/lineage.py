"""OpenLineage for the process and commit tasks, as the Spark provider's operators report it:
``get_openlineage_facets_on_complete`` returns an ``OperatorLineage`` whose inputs are the
topology's spouts and outputs its state tables.

Without ``apache-airflow-providers-openlineage`` installed the method returns ``None`` (Airflow
only calls it when that provider is). The datasets follow OpenLineage's naming: a state table
is ``<database URL without credentials>`` / ``<table>``; a spout, whose source only the spout
knows, is ``trident://<topology>`` / ``<spout name>``.

>>> from airflow_trident.examples.topologies import word_count
>>> inputs, outputs = lineage_datasets(word_count, "postgresql://u:pw@db:5432/trident")
>>> inputs, outputs
([('trident://word_count', 'sentences')], [('postgresql://db:5432/trident', 'word_counts')])
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from airflow_trident.graph import PersistNode
from airflow_trident.hooks.trident import TridentHook
from airflow_trident.runtime.reference import load_topology
from airflow_trident.topology import TridentTopology

__all__ = ["TridentLineageMixin", "lineage_datasets"]

Named = tuple[str, str]


def _namespace(url: str | None) -> str:
    """An OpenLineage namespace for a database URL: scheme (without the driver), host, port,
    database; never the credentials."""
    if not url:
        return "trident://state"
    parsed = sa.make_url(url)
    scheme = parsed.get_backend_name()
    if scheme == "sqlite":
        return f"sqlite://{parsed.database or ':memory:'}"
    port = f":{parsed.port}" if parsed.port else ""
    return f"{scheme}://{parsed.host or 'localhost'}{port}/{parsed.database or ''}"


def lineage_datasets(
    topology: TridentTopology, state_url: str | None
) -> tuple[list[Named], list[Named]]:
    """``(namespace, name)`` of the topology's inputs (spouts) and outputs (state tables)."""
    inputs = [(f"trident://{topology.name}", spout) for spout in sorted(topology.spouts)]
    outputs = []
    for state, node_id in sorted(topology.states.items()):
        node = topology.nodes[node_id]
        layout = getattr(node.factory, "layout", None) if isinstance(node, PersistNode) else None
        table = getattr(getattr(layout, "table", None), "name", None) or state
        outputs.append((_namespace(state_url), str(table)))
    return inputs, outputs


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
        inputs, outputs = lineage_datasets(load_topology(self.topology), url)
        return OperatorLineage(
            inputs=[Dataset(namespace=ns, name=name) for ns, name in inputs],
            outputs=[Dataset(namespace=ns, name=name) for ns, name in outputs],
        )
