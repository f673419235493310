"""Triggers that wait in the triggerer, holding no worker slot: for the previous txid's commit,
and for a spout to be ready.

Each keeps one ZooKeeper session for its whole life, opened through
:class:`~airflow_trident.hooks.trident.TridentHook` (the readiness trigger with the hook's light
readiness handle: the spouts' coordinators, no lifecycle).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from asgiref.sync import sync_to_async

from airflow_trident.batch.order import STALL_CHECK_S, StallWatch
from airflow_trident.hooks.dagruns import dagrun_states
from airflow_trident.hooks.trident import TridentHook

__all__ = ["BatchReadyTrigger", "CommittedTxidTrigger"]


class CommittedTxidTrigger(BaseTrigger):
    """Fires when topology ``topology``'s committed txid reaches ``txid``.

    It keeps one ZooKeeper session and a watch on the committed-txid node, so it wakes as soon
    as the previous commit lands (ordered commits form a chain: every second lost here is lost
    per batch); ``poll_interval`` is only the fallback re-check should a notification be missed.
    Only ids are serialised (no credentials): the triggerer reads the connection itself.
    """

    def __init__(
        self,
        *,
        zookeeper_conn_id: str,
        topology: str,
        txid: int,
        poll_interval: float = 10.0,
        dag_id: str | None = None,
        waiting_run_id: str | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.zookeeper_conn_id = zookeeper_conn_id
        self.topology = topology
        self.txid = txid
        self.poll_interval = poll_interval
        self.dag_id = dag_id
        self.waiting_run_id = waiting_run_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "zookeeper_conn_id": self.zookeeper_conn_id,
                "topology": self.topology,
                "txid": self.txid,
                "poll_interval": self.poll_interval,
                "dag_id": self.dag_id,
                "waiting_run_id": self.waiting_run_id,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        loop = asyncio.get_running_loop()
        # With a dag_id, the trigger also watches txid's runs: when none can make progress the
        # waiting commit gives its run slot back (see airflow_trident.batch.order).
        watch = (
            None
            if self.dag_id is None
            else StallWatch(self.dag_id, self.txid + 1, "commit", run_id=self.waiting_run_id)
        )
        checked = time.monotonic()
        changed = asyncio.Event()
        session = contextlib.ExitStack()
        try:
            hook = TridentHook(zookeeper_conn_id=self.zookeeper_conn_id)
            store = await asyncio.to_thread(
                session.enter_context, hook.coordinator_store(self.topology)
            )

            def on_change(data: Any, stat: Any) -> None:  # kazoo's thread
                loop.call_soon_threadsafe(changed.set)

            await asyncio.to_thread(store.client.DataWatch, store.paths.committed_txid, on_change)
            while True:
                changed.clear()
                committed = await asyncio.to_thread(store.commits.committed_txid)
                if committed >= self.txid:
                    yield TriggerEvent({"status": "committed", "committed_txid": committed})  # type: ignore[no-untyped-call]
                    return
                if watch is not None and time.monotonic() - checked >= STALL_CHECK_S:
                    checked = time.monotonic()
                    runs = await asyncio.to_thread(store.runs.runs_of_txid, self.txid)
                    states = await sync_to_async(dagrun_states)(watch.dag_id, runs)
                    verdict = watch.verdict(states, time.monotonic())
                    if verdict is not None:
                        yield TriggerEvent({"status": "stalled", "message": verdict})  # type: ignore[no-untyped-call]
                        return
                self.log.info(
                    "topology %s: waiting for txid %d to commit (committed: %d)",
                    self.topology,
                    self.txid,
                    committed,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), timeout=self.poll_interval)
        finally:
            await asyncio.to_thread(session.close)


class BatchReadyTrigger(BaseTrigger):
    """Fires when every spout of ``topology`` (a ``module:attribute`` reference) is ready.

    It polls every ``poll_interval`` seconds on one ZooKeeper session and one readiness handle
    (:meth:`TridentHook.readiness <airflow_trident.hooks.trident.TridentHook.readiness>`) for
    its whole life. ``staging_root`` is kept for the serialised form only (readiness needs no
    staging).
    """

    def __init__(
        self,
        *,
        topology: str,
        zookeeper_conn_id: str,
        staging_root: str,
        poll_interval: float = 5.0,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.topology = topology
        self.zookeeper_conn_id = zookeeper_conn_id
        self.staging_root = staging_root
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "topology": self.topology,
                "zookeeper_conn_id": self.zookeeper_conn_id,
                "staging_root": self.staging_root,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        session = contextlib.ExitStack()
        try:
            hook = TridentHook(zookeeper_conn_id=self.zookeeper_conn_id)
            ready = await asyncio.to_thread(session.enter_context, hook.readiness(self.topology))
            while not await asyncio.to_thread(ready.is_ready):
                await asyncio.sleep(self.poll_interval)
            yield TriggerEvent({"status": "ready"})  # type: ignore[no-untyped-call]
        finally:
            await asyncio.to_thread(session.close)
