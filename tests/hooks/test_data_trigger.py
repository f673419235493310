"""The event-driven start's trigger (``schedule="on_data"``) against a real ZooKeeper and a
file log: it fires when a file lands, once per batch's worth of data (not again until a batch
begins, nor while the begun batch is not emitted: the data it is about to take is not new), and
again when a batch was emitted and more data landed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.client import ZkConfig
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.runtime.reference import load_topology
from airflow_trident.triggers.data import NewDataTrigger
from tests.harness.file_log import land
from tests.hooks.conftest import SetConnection

pytestmark = pytest.mark.integration

QUIET_S = 1.5
"""How long the trigger is watched for an event that must not come (20 polls)."""


async def _next(events: asyncio.Queue[Any], guard_s: float) -> Any:
    return (await asyncio.wait_for(events.get(), timeout=guard_s)).payload


async def _quiet(events: asyncio.Queue[Any]) -> bool:
    """Whether no event comes within QUIET_S."""
    try:
        await asyncio.wait_for(events.get(), timeout=QUIET_S)
    except TimeoutError:
        return True
    return False


def test_new_data_trigger_fires_once_per_landing_and_after_a_batch_begins(
    zk_store: CoordinatorStore,
    zk_config: ZkConfig,
    airflow_conn: SetConnection,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    host, _, port = zk_config.hosts.partition(":")
    conn_id = airflow_conn(conn_type="trident_zookeeper", host=host, port=int(port),
                           extra={"root": zk_config.root})  # fmt: skip
    monkeypatch.setenv("TRIDENT_TEST_TOPOLOGY", zk_store.paths.topology)
    monkeypatch.setenv("TRIDENT_TEST_LANDING", str(tmp_path))
    monkeypatch.setenv("TRIDENT_TEST_FILE_LOG_KIND", "transactional")
    trigger = NewDataTrigger(
        topology="tests.harness.file_log:file_log_word_count", zookeeper_conn_id=conn_id,
        poll_interval=0.05, refire_s=3600,
    )  # fmt: skip

    async def scenario() -> list[Any]:
        seen: list[Any] = []
        events: asyncio.Queue[Any] = asyncio.Queue()

        async def consume() -> None:
            async for event in trigger.run():
                await events.put(event)

        consumer = asyncio.ensure_future(consume())
        try:
            # Given an empty log, Then no event
            seen.append(await _quiet(events))
            # When a file lands, Then an event
            land(tmp_path, "p0", "0001.jsonl", ["a b"])
            seen.append(await _next(events, guard_s=60))
            # While no batch began, Then no second event for the same data
            seen.append(await _quiet(events))
            # When a batch began (txid 1), not emitted yet, Then no event for the file it takes
            steps = BatchSteps(load_topology(trigger.topology), zk_store, None)
            assert steps.begin(None)["txid"] == 1
            seen.append(await _quiet(events))
            # When it was emitted and another file landed, Then an event again
            steps.emit(steps.plan(1))
            land(tmp_path, "p0", "0002.jsonl", ["c"])
            seen.append(await _next(events, guard_s=60))
        finally:
            consumer.cancel()
            await asyncio.gather(consumer, return_exceptions=True)
        return seen

    quiet_empty, first, quiet_same, quiet_begun, second = asyncio.run(scenario())
    assert quiet_empty is True
    assert first == {"topology": trigger.topology, "after_txid": 0}
    assert quiet_same is True
    assert quiet_begun is True
    assert second == {"topology": trigger.topology, "after_txid": 1}
    # and the trigger serialises only ids (the triggerer rebuilds it from them)
    path, kwargs = trigger.serialize()
    assert path == "airflow_trident.triggers.data.NewDataTrigger"
    assert NewDataTrigger(**kwargs).serialize() == (path, kwargs)
