"""Airflow Assets for committed batches: downstream DAGs run on committed data, once per txid.

The commit task of a :func:`~airflow_trident.dag.trident_batch` declares the outlet
:func:`commits_alias` of its topology. Each commit that changed state (a new txid, not the
replay of a committed one) adds one event of the asset :func:`committed_asset` through that
alias, with the extra ``{"topology", "txid", "records_in", "keys_written"}``. A replay adds
none (an outlet ``Asset`` would emit an event on every success of the task; the alias lets the
task decide), so a DAG scheduled on the asset runs once per committed txid. The same task lists
the asset among its ``inlets`` (a commit reads the state it extends), so the DAG processor
registers it when it parses the DAG, before any commit reports an event::

    from airflow.sdk import DAG, task
    from airflow_trident.operators.assets import committed_asset

    with DAG("after_word_count", schedule=[committed_asset("word_count")]):
        @task
        def report(triggering_asset_events=None):
            for event in triggering_asset_events[committed_asset("word_count")]:
                print(event.extra["txid"])

>>> committed_asset("word_count").uri, commits_alias("word_count").name
('trident://word_count/', 'trident_word_count_commits')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import Asset, AssetAlias, AssetWatcher

from airflow_trident.triggers.data import NewDataTrigger

__all__ = ["add_commit_event", "commits_alias", "committed_asset", "data_asset"]


def committed_asset(topology: str) -> Asset:
    """The asset of ``topology``'s committed state (``trident://<topology>``): one event per
    committed txid."""
    return Asset(name=f"trident_{topology}", uri=f"trident://{topology}")


def data_asset(
    topology: str,
    reference: str,
    *,
    zookeeper_conn_id: str = "trident_zookeeper_default",
    poll_interval: float = 0.5,
) -> Asset:
    """The asset of ``topology``'s new data (``trident://<topology>/new-data``), watched by a
    :class:`~airflow_trident.triggers.data.NewDataTrigger` of the topology ``reference``
    (``module:attribute``): a DAG scheduled on it starts a run when data for a new batch lands
    (``trident_dag(..., schedule="on_data")``).

    >>> asset = data_asset("word_count", "airflow_trident.examples.topologies:word_count")
    >>> asset.uri, asset.watchers[0].name, type(asset.watchers[0].trigger).__name__
    ('trident://word_count/new-data', 'trident_word_count_new_data', 'NewDataTrigger')
    """
    trigger = NewDataTrigger(
        topology=reference, zookeeper_conn_id=zookeeper_conn_id, poll_interval=poll_interval
    )
    return Asset(
        name=f"trident_{topology}_new_data",
        uri=f"trident://{topology}/new-data",
        watchers=[AssetWatcher(name=f"trident_{topology}_new_data", trigger=trigger)],
    )


def commits_alias(topology: str) -> AssetAlias:
    """The alias the commit task of ``topology`` declares as its outlet."""
    return AssetAlias(name=f"trident_{topology}_commits")


def add_commit_event(context: Mapping[str, Any], summary: Mapping[str, Any]) -> bool:
    """Add the asset event of a commit that changed state, when the task declares the alias;
    return whether it did."""
    if not summary.get("applied"):
        return False
    topology = str(summary["topology"])
    alias = commits_alias(topology)
    outlets = getattr(context.get("task"), "outlets", None) or []
    if not any(isinstance(o, AssetAlias) and o.name == alias.name for o in outlets):
        return False
    extra = {
        "topology": topology,
        "txid": int(summary["txid"]),
        "records_in": int(summary.get("records_in", 0)),
        "keys_written": {str(k): int(v) for k, v in (summary.get("keys_written") or {}).items()},
    }
    context["outlet_events"][alias].add(committed_asset(topology), extra=extra)
    return True
