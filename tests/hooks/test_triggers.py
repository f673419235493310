"""The commit trigger against a real ZooKeeper: it wakes on the committed-txid node's watch,
not on its fallback poll."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from airflow_trident.coordination.client import ZkConfig
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.triggers.zookeeper import CommittedTxidTrigger
from tests.hooks.conftest import SetConnection

pytestmark = pytest.mark.integration


async def first_event(trigger: CommittedTxidTrigger, guard_s: float) -> Any:
    async def first() -> Any:
        async for event in trigger.run():
            return event.payload
        return None

    return await asyncio.wait_for(first(), timeout=guard_s)


def test_commit_trigger_fires_on_the_watch_when_the_previous_txid_commits(
    zk_store: CoordinatorStore, zk_config: ZkConfig, airflow_conn: SetConnection
) -> None:
    host, _, port = zk_config.hosts.partition(":")
    conn_id = airflow_conn(conn_type="trident_zookeeper", host=host, port=int(port),
                           extra={"root": zk_config.root})  # fmt: skip
    zk_store.allocate_txid()
    # a fallback poll far beyond the guard: only the watch can wake the trigger in time
    trigger = CommittedTxidTrigger(
        zookeeper_conn_id=conn_id, topology=zk_store.paths.topology, txid=1, poll_interval=3600
    )
    committer = threading.Timer(1.0, zk_store.commit, args=(1,))
    committer.start()
    try:
        payload = asyncio.run(first_event(trigger, guard_s=60))
    finally:
        committer.join()
    assert payload == {"status": "committed", "committed_txid": 1}


def test_commit_trigger_fires_at_once_when_already_committed(
    zk_store: CoordinatorStore, zk_config: ZkConfig, airflow_conn: SetConnection
) -> None:
    host, _, port = zk_config.hosts.partition(":")
    conn_id = airflow_conn(conn_type="trident_zookeeper", host=host, port=int(port),
                           extra={"root": zk_config.root})  # fmt: skip
    zk_store.allocate_txid()
    zk_store.commit(1)
    trigger = CommittedTxidTrigger(
        zookeeper_conn_id=conn_id, topology=zk_store.paths.topology, txid=1, poll_interval=3600
    )
    assert asyncio.run(first_event(trigger, guard_s=60))["committed_txid"] == 1
