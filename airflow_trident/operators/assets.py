"""Airflow Assets for committed batches: downstream DAGs run on committed data, once per txid.

The commit task of a :func:`~airflow_trident.dag.trident_batch` declares the outlet
:func:`commits_alias` of its topology. Each commit that changed state (a new txid, not the
replay of a committed one) adds one event of the asset :func:`committed_asset` through that
alias, with the extra ``{"topology", "txid", "records_in", "keys_written"}``. A replay adds
none (an outlet ``Asset`` would emit an event on every success of the task; the alias lets the
task decide), so a DAG scheduled on the asset runs once per committed txid. The same task lists
the asset among its ``inlets`` (a commit reads the state it extends), so the DAG processor
registers it when it parses the DAG, before any commit reports an event.

Airflow links the alias to the asset when the first event goes through it, and two task
instances that report the *first* events of a topology at once both insert that link: one of
them fails on the database's unique key (pipelined first commits of a new topology, seen with
the express and compact layouts). :func:`await_first_event_turn` keeps those first reports in
txid order: while the asset has no event yet, a commit reports only after the task of the txid
before it has finished (each commit waits for txid-1's commit anyway; this adds the wait for its
task's end, the first commits only)::

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

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow.sdk import Asset, AssetAlias, AssetWatcher

from airflow_trident.operators.asset_uris import asset_name, asset_uri
from airflow_trident.triggers.data import NewDataTrigger

__all__ = [
    "add_commit_event",
    "await_first_event_turn",
    "commits_alias",
    "committed_asset",
    "data_asset",
]

FIRST_EVENT_WAIT_S = 120.0
"""How long a first commit event waits for txid-1's task to end before it is reported anyway."""
_ENDED = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})


def committed_asset(topology: str) -> Asset:
    """The asset of ``topology``'s committed state (``trident://<topology>/``): one event per
    committed txid. Airflow checks the URI with our ``trident`` scheme's handler
    (:mod:`~airflow_trident.operators.asset_uris`)."""
    return Asset(name=asset_name(topology), uri=asset_uri(topology))


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
    name = asset_name(topology, new_data=True)
    return Asset(
        name=name,
        uri=asset_uri(topology, new_data=True),
        watchers=[AssetWatcher(name=name, trigger=trigger)],
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


def _has_events(context: Mapping[str, Any], topology: str) -> bool | None:
    """Whether the asset of ``topology`` has an event (``None``: this task cannot ask)."""
    try:
        events = context["inlet_events"][committed_asset(topology)].limit(1)
        return len(events) > 0
    except Exception:  # not among the task's inlets, or no Task Execution API here
        return None


def _previous_task_running(context: Mapping[str, Any], runs: Sequence[str]) -> bool:
    """Whether this task, in any of ``runs``, has not ended yet."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    ti = context["ti"]
    found = RuntimeTaskInstance.get_task_states(
        dag_id=ti.dag_id, task_ids=[ti.task_id], run_ids=list(runs)
    )
    for per_run in found.values():
        states = per_run.values() if isinstance(per_run, Mapping) else [per_run]
        if any(str(getattr(s, "value", s)) not in _ENDED for s in states if s is not None):
            return True
    return False


def await_first_event_turn(
    context: Mapping[str, Any],
    summary: Mapping[str, Any],
    runs_of_txid: Callable[[int], Sequence[str]],
    *,
    timeout_s: float = FIRST_EVENT_WAIT_S,
    poll_s: float = 1.0,
    log: Any = None,
) -> float:
    """Before the commit of ``summary`` reports its event: while the topology's asset has no
    event yet, wait until this task has ended in the runs of txid-1 (``runs_of_txid``), so
    that the first events (and the alias's link to the asset they create) are written one at a
    time. Return the seconds waited (0 once the asset has an event, or for a replay)."""
    if not summary.get("applied") or int(summary["txid"]) <= 1:
        return 0.0
    topology = str(summary["topology"])
    if _has_events(context, topology) is not False:
        return 0.0
    own = getattr(context.get("ti"), "run_id", None)
    started = time.monotonic()
    while True:
        runs = [r for r in runs_of_txid(int(summary["txid"]) - 1) if r != own]
        try:
            running = bool(runs) and _previous_task_running(context, runs)
        except Exception:  # no Task Execution API here: nothing to order against
            running = False
        waited = time.monotonic() - started
        if not running or _has_events(context, topology):
            if waited >= poll_s and log is not None:
                log.info("txid %s: its asset event waited %.0f s for txid %d's task (the "
                         "topology's first events go one at a time)", summary["txid"], waited,
                         int(summary["txid"]) - 1)  # fmt: skip
            return waited
        if waited > timeout_s:
            if log is not None:
                log.warning("txid %s: txid %d's task %s still running after %.0f s; reporting "
                            "the asset event anyway", summary["txid"], int(summary["txid"]) - 1,
                            runs, waited)  # fmt: skip
            return waited
        time.sleep(poll_s)
