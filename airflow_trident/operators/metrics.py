"""Batch metrics through Airflow's ``Stats`` (StatsD, Datadog or OpenTelemetry, as configured in
Airflow's ``[metrics]`` section; the names below get Airflow's prefix, ``airflow.`` by default).

Emitted by the process task (every attempt) and the commit task (once per committed txid):

=========================================== ======== ==========================================
name                                        type     what
=========================================== ======== ==========================================
``trident.process.records_in.<topology>``   counter  records the attempt emitted
``trident.process.duration.<topology>``     timer    the process task's run, start to staged
``trident.commit.records_in.<topology>``    counter  records of the committed batch
``trident.commit.keys_written.<topology>``  counter  keys written, all states together
``trident.commit.keys_written.<topology>.<state>`` counter  keys written to one state
``trident.commit.duration.<topology>``      timer    the commit itself (apply + compare-and-set)
``trident.commit.wait.<topology>``          timer    the commit task's wait for txid-1's commit
``trident.commit.batches.<topology>``       counter  committed batches (1 per txid)
``trident.commit.txid.<topology>``          gauge    the committed txid
``trident.lag.<topology>.<spout>.<partition>`` gauge the source partition's lag after the txid
=========================================== ======== ==========================================

Every metric also carries the tags ``topology`` (and ``state``), which Datadog, OpenTelemetry
and StatsD with ``statsd_influxdb_enabled`` use. A replay of a committed txid emits nothing
under ``trident.commit``: it changed nothing.

The lag gauges are emitted by the success step (the success task, or the commit task that does
its step) when its txid is the newest committed one: one per source partition of each spout that
tells its lag (the status table's lag, :mod:`airflow_trident.spout.lag`: a Kafka partition's
offsets after the batch's end), tagged ``topology``, ``spout``, ``partition`` and ``unit``. A
partition name's characters that a metric name cannot hold become ``_`` (:func:`lag_metric`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from airflow.sdk.observability.stats import Stats

from airflow_trident.operators.assets import add_commit_event, await_first_event_turn
from airflow_trident.tasks.batch_task import Recording

__all__ = [
    "RECORDING",
    "emit_committed",
    "emit_lag",
    "emit_processed",
    "lag_metric",
    "metric_names",
]


def metric_names(topology: str, states: tuple[str, ...] = ()) -> list[str]:
    """The names a topology's batches emit (without Airflow's prefix).

    >>> metric_names("wc", ("counts",))[:3]
    ['trident.process.records_in.wc', 'trident.process.duration.wc', 'trident.commit.records_in.wc']
    """
    return [
        f"trident.process.records_in.{topology}",
        f"trident.process.duration.{topology}",
        f"trident.commit.records_in.{topology}",
        f"trident.commit.keys_written.{topology}",
        *[f"trident.commit.keys_written.{topology}.{state}" for state in states],
        f"trident.commit.duration.{topology}",
        f"trident.commit.wait.{topology}",
        f"trident.commit.batches.{topology}",
        f"trident.commit.txid.{topology}",
    ]


def lag_metric(topology: str, spout: str, partition: str) -> str:
    """The lag gauge of a source partition (without Airflow's prefix): characters a metric
    name cannot hold (Airflow's validator allows letters, digits and ``_.-/``) become ``_``.

    >>> lag_metric("orders", "events", "orders:3")
    'trident.lag.orders.events.orders_3'
    """
    return f"trident.lag.{topology}.{spout}.{_metric_safe(partition)}"


def _metric_safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-/]", "_", text)


def emit_lag(steps: Any, txid: int, log: Any = None) -> dict[str, int]:
    """Emit the lag gauge of each source partition once ``txid`` committed
    (``steps.committed_lag``; nothing unless ``txid`` is the newest committed txid); the
    gauges emitted, by name. Monitoring only: a source that cannot be asked is logged."""
    topology = str(steps.topology.name)
    try:
        lags = steps.committed_lag(txid)
    except Exception as exc:  # a source down must not fail the success step
        if log is not None:
            log.warning("txid %d: the lag gauges are not emitted (%s: %s)",
                        txid, type(exc).__name__, exc)  # fmt: skip
        return {}
    emitted: dict[str, int] = {}
    for spout, partitions in lags.items():
        for partition, lag in partitions.items():
            if lag is None:
                continue
            name = lag_metric(topology, spout, partition)
            tags = {"topology": topology, "spout": spout, "partition": _metric_safe(partition),
                    "unit": lag.unit}  # fmt: skip
            Stats.gauge(name, int(lag.count), tags=tags)
            emitted[name] = int(lag.count)
    return emitted


def _since_start(context: Mapping[str, Any]) -> float | None:
    """Seconds since this task instance started (kept across a deferral), if known."""
    started = getattr(context.get("ti"), "start_date", None)
    if not isinstance(started, datetime):
        return None
    if started.tzinfo is None:
        started = started.replace(tzinfo=UTC)
    return max(0.0, (datetime.now(UTC) - started).total_seconds())


def emit_processed(context: Mapping[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """Emit the process task's metrics from its XCom ``summary``; return ``summary``."""
    if "records_in" not in summary:  # a committed txid's skip: nothing was processed
        return summary
    topology = str(summary.get("topology") or _topology(context))
    tags = {"topology": topology}
    Stats.incr(f"trident.process.records_in.{topology}", int(summary["records_in"]), tags=tags)
    elapsed = _since_start(context)
    if elapsed is not None:
        Stats.timing(f"trident.process.duration.{topology}", elapsed * 1000.0, tags=tags)
    return summary


def emit_committed(
    context: Mapping[str, Any],
    commit: Callable[[], dict[str, Any]],
    runs_of_txid: Callable[[int], Sequence[str]] | None = None,
    log: Any = None,
) -> dict[str, Any]:
    """Run ``commit`` (the commit task's commit), emit its metrics and its asset event
    (:func:`~airflow_trident.operators.assets.add_commit_event`; a topology's first events in
    txid order when ``runs_of_txid`` names the runs of a txid:
    :func:`~airflow_trident.operators.assets.await_first_event_turn`), return its summary."""
    waited = _since_start(context)
    started = time.monotonic()
    summary = commit()
    duration = time.monotonic() - started
    if not summary.get("applied"):
        return summary
    if runs_of_txid is not None:
        await_first_event_turn(context, summary, runs_of_txid, log=log)
    add_commit_event(context, summary)
    topology = str(summary.get("topology") or _topology(context))
    tags = {"topology": topology}
    keys = {str(k): int(v) for k, v in (summary.get("keys_written") or {}).items()}
    Stats.incr(f"trident.commit.records_in.{topology}", int(summary["records_in"]), tags=tags)
    Stats.incr(f"trident.commit.keys_written.{topology}", sum(keys.values()), tags=tags)
    for state, written in keys.items():
        Stats.incr(
            f"trident.commit.keys_written.{topology}.{state}",
            written,
            tags={**tags, "state": state},
        )
    Stats.timing(f"trident.commit.duration.{topology}", duration * 1000.0, tags=tags)
    if waited is not None:
        Stats.timing(f"trident.commit.wait.{topology}", waited * 1000.0, tags=tags)
    Stats.incr(f"trident.commit.batches.{topology}", tags=tags)
    Stats.gauge(f"trident.commit.txid.{topology}", int(summary["txid"]), tags=tags)
    return summary


def _topology(context: Mapping[str, Any]) -> str:
    task = context.get("task")
    reference = str(getattr(task, "topology", "unknown"))
    return reference.rsplit(":", 1)[-1]


RECORDING = Recording(processed=emit_processed, committed=emit_committed, lag=emit_lag)
"""What the batch operators record of their steps (the task object's
:class:`~airflow_trident.tasks.batch_task.Recording`): these metrics and the commit's asset
event."""
