"""The readiness sensor: waits until every spout's coordinator says the next batch may start.

The waiting (replays go on at once; a new batch behind a failed run is skipped, with the fix in
the log and XCom ``blocked_by``) is the generic sensor's,
:class:`~airflow_trident.tasks.readiness.BatchStepsSensor`, which the compact layout's begin
sensor and the express task are too; this one's slice is readiness alone (the standard
layout's ``wait_ready``).
"""

from __future__ import annotations

from airflow_trident.tasks.readiness import BatchStepsSensor, blocking_fix

__all__ = ["BatchReadySensor", "blocking_fix"]


class BatchReadySensor(BatchStepsSensor):
    """Poke (or defer to the triggerer) until the topology's spouts are ready (``is_ready``).

    :param topology: ``package.module:attribute`` of the topology (templated).
    :param staging_root: the staging root (templated).
    :param zookeeper_conn_id: the ``trident_zookeeper`` connection (templated).
    :param deferrable: wait in the triggerer instead of a worker slot; ``None`` (the default):
        Airflow's ``[operators] default_deferrable``.
    """

    batch_slice = ("ready",)
