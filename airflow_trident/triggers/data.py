"""Event-driven batch start: a trigger that fires when a topology has new data.

:class:`NewDataTrigger` is a ``BaseEventTrigger`` for Airflow 3's event-driven scheduling: an
``AssetWatcher`` runs it in the triggerer, and each event it yields updates the watched asset,
which queues a run of every DAG scheduled on that asset (``trident_dag(..., schedule="on_data")``
builds both, :func:`data_asset`). It asks the spouts' own readiness (``is_ready``: a file log's
new partition or file, a database table past its mark, a memory spout's rows), the same check
the DAG's readiness step makes — which still runs in the started run, with its rules (a new
batch behind a failed run is skipped).

It fires once per batch's worth of data: after an event it waits until a batch begins (ZooKeeper's
current txid moves on) before it fires again, so data that stays ready while its run starts
queues one run, not one per poll; and if no batch began ``refire_s`` seconds after an event
(the run was skipped, or the DAG paused), it fires again. The readiness counts only once the
newest begun batch is *settled* (committed, or emitted by every partitioned spout,
:meth:`~airflow_trident.hooks.trident.BatchReadiness.settled`): a partitioned spout (file log,
Kafka) looks for records after its newest emitted batch, so between a batch's begin and its
emit — the ``spark-submit`` start of the standard layout's process task — the records that
batch is about to take would look new and queue a run with nothing to read. Only ids are
serialised.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_trident.hooks.trident import TridentHook

__all__ = ["NewDataTrigger", "should_fire"]


def should_fire(
    *,
    ready: bool,
    current_txid: int,
    fired_txid: int | None,
    since_fired_s: float,
    refire_s: float,
    settled: bool = True,
) -> bool:
    """Whether the trigger fires now: the spouts are ready, the newest begun batch is
    ``settled`` (their readiness accounts for it), and either it never fired, a batch began
    since it last fired (``current_txid`` moved past ``fired_txid``), or ``refire_s`` passed
    since then with no batch begun.

    >>> should_fire(ready=True, current_txid=4, fired_txid=None, since_fired_s=0, refire_s=60)
    True
    >>> should_fire(ready=True, current_txid=4, fired_txid=4, since_fired_s=1, refire_s=60)
    False
    >>> should_fire(ready=True, current_txid=5, fired_txid=4, since_fired_s=1, refire_s=60)
    True
    >>> should_fire(ready=True, current_txid=5, fired_txid=4, since_fired_s=1, refire_s=60,
    ...             settled=False)
    False
    >>> should_fire(ready=False, current_txid=5, fired_txid=4, since_fired_s=99, refire_s=60)
    False
    """
    if not ready or not settled:
        return False
    if fired_txid is None or current_txid != fired_txid:
        return True
    return since_fired_s >= refire_s


class NewDataTrigger(BaseEventTrigger):
    """Yields an event each time topology ``topology`` (``module:attribute``) has data for a new
    batch (see the module's docstring).

    :param topology: the topology reference.
    :param zookeeper_conn_id: the ``trident_zookeeper`` connection.
    :param poll_interval: seconds between two readiness checks (one ZooKeeper session and one
        readiness handle for the trigger's life).
    :param refire_s: fire again after that long if no batch began since the last event.
    """

    def __init__(
        self,
        *,
        topology: str,
        zookeeper_conn_id: str = "trident_zookeeper_default",
        poll_interval: float = 0.5,
        refire_s: float = 60.0,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.topology = topology
        self.zookeeper_conn_id = zookeeper_conn_id
        self.poll_interval = poll_interval
        self.refire_s = refire_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "topology": self.topology,
                "zookeeper_conn_id": self.zookeeper_conn_id,
                "poll_interval": self.poll_interval,
                "refire_s": self.refire_s,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        session = contextlib.ExitStack()
        fired_txid: int | None = None
        fired_at = 0.0
        try:
            hook = TridentHook(zookeeper_conn_id=self.zookeeper_conn_id)
            handle = await asyncio.to_thread(session.enter_context, hook.readiness(self.topology))

            def look() -> tuple[bool, int, bool]:
                ready = handle.is_ready()  # then the txid: a batch begun meanwhile is unsettled
                current = handle.store.runs.current_txid()
                return ready, current, ready and handle.settled(current)

            while True:
                ready, current, settled = await asyncio.to_thread(look)
                if should_fire(
                    ready=ready, current_txid=current, fired_txid=fired_txid,
                    since_fired_s=time.monotonic() - fired_at, refire_s=self.refire_s,
                    settled=settled,
                ):  # fmt: skip
                    fired_txid, fired_at = current, time.monotonic()
                    self.log.info(
                        "topology %s has new data (txid %d begun)", self.topology, current
                    )
                    yield TriggerEvent({"topology": self.topology, "after_txid": current})  # type: ignore[no-untyped-call]
                await asyncio.sleep(self.poll_interval)
        finally:
            await asyncio.to_thread(session.close)
