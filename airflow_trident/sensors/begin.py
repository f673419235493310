"""Readiness and begin in one task: the first task of the DAG's ``layout="compact"``.

:class:`BeginWhenReadySensor` waits as :class:`~airflow_trident.sensors.ready.BatchReadySensor`
does (poke, reschedule or deferred; replays do not wait; a new batch behind a failed run is
skipped: the generic :class:`~airflow_trident.tasks.readiness.BatchStepsSensor`, with the slice
``ready``, ``begin``) and then begins the batch as the begin task does, in the same task
process. Its XCom is the begin summary, so later tasks name it as their ``begin_task_id``. One
task process and one scheduling hand-off fewer per batch than a sensor followed by a begin
task.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_trident.tasks.readiness import BatchStepsSensor

__all__ = ["BeginWhenReadySensor"]


class BeginWhenReadySensor(BatchStepsSensor):
    """Wait until the topology's spouts are ready, then bind the run to its txid and store the
    batch metadata (XCom: txid, attempt, metadata).

    ``depends_on_past`` is on by default, as for the begin task: begins run in logical-date
    order, so txids follow the runs' order.

    :param topology: ``package.module:attribute`` of the topology (templated).
    :param staging_root: the staging root (templated).
    :param zookeeper_conn_id: the ``trident_zookeeper`` connection (templated).
    :param state_conn_id: the state connection (templated; ``None``: the embedded default).
    :param keep_txids: ZooKeeper keeps batch metadata for that many txids.
    :param deferrable: wait in the triggerer; ``None``: ``[operators] default_deferrable``.

    Examples
    --------
    >>> from airflow.sdk import DAG
    >>> with DAG("begin_doc", schedule=None):
    ...     task = BeginWhenReadySensor(
    ...         task_id="begin", topology="airflow_trident.examples.topologies:word_count",
    ...         staging_root="/tmp/staging", poke_interval=1, mode="reschedule")
    >>> task.depends_on_past, task.mode
    (True, 'reschedule')
    """

    template_fields: Sequence[str] = (*BatchStepsSensor.template_fields, "state_conn_id")
    ui_color = "#e8f4fd"
    batch_slice = ("ready", "begin")

    def __init__(
        self, *, state_conn_id: str | None = None, keep_txids: int = 16, **kwargs: Any
    ) -> None:
        kwargs.setdefault("depends_on_past", True)
        super().__init__(**kwargs)
        self.state_conn_id = state_conn_id
        self.keep_txids = keep_txids
