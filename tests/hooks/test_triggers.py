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
    zk_store.runs.allocate_txid()
    # a fallback poll far beyond the guard: only the watch can wake the trigger in time
    trigger = CommittedTxidTrigger(
        zookeeper_conn_id=conn_id, topology=zk_store.paths.topology, txid=1, poll_interval=3600
    )
    committer = threading.Timer(1.0, zk_store.commits.commit, args=(1,))
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
    zk_store.runs.allocate_txid()
    zk_store.commits.commit(1)
    trigger = CommittedTxidTrigger(
        zookeeper_conn_id=conn_id, topology=zk_store.paths.topology, txid=1, poll_interval=3600
    )
    assert asyncio.run(first_event(trigger, guard_s=60))["committed_txid"] == 1


def test_commit_trigger_gives_up_when_the_awaited_txids_run_failed(
    zk_store: CoordinatorStore,
    zk_config: ZkConfig,
    airflow_conn: SetConnection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given txid 1 bound to run r1, never committing, and Airflow answering that r1 failed (the
    # Task Execution API exists only inside the triggerer: its answer is what is given here)
    from airflow_trident.batch import order as stalls
    from airflow_trident.triggers import zookeeper as triggers

    host, _, port = zk_config.hosts.partition(":")
    conn_id = airflow_conn(conn_type="trident_zookeeper", host=host, port=int(port),
                           extra={"root": zk_config.root})  # fmt: skip
    zk_store.runs.bind_run("r1")
    asked: list[list[str]] = []

    def failed(dag_id: str, runs: list[str]) -> dict[str, str | None]:
        asked.append(list(runs))
        return dict.fromkeys(runs, "failed")

    monkeypatch.setattr(triggers, "dagrun_states", failed)
    monkeypatch.setattr(triggers, "STALL_CHECK_S", 0.0)
    monkeypatch.setattr(stalls, "STALL_CHECK_S", 0.0)
    # When txid 2's commit waits for txid 1 in the triggerer
    trigger = CommittedTxidTrigger(
        zookeeper_conn_id=conn_id, topology=zk_store.paths.topology, txid=1, poll_interval=0.2,
        dag_id="wc", waiting_run_id="r2",
    )  # fmt: skip
    payload = asyncio.run(first_event(trigger, guard_s=60))
    # Then it gives up, having asked about txid 1's run from ZooKeeper's index, and says why
    assert asked[0] == ["r1"]
    assert payload["status"] == "stalled"
    assert "txid 2 cannot commit before txid 1" in payload["message"]
    assert "--run-id r1" in payload["message"]
    # And the commit task fails with that message, without retrying
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_trident.operators.batch import CommitBatchOperator

    commit = CommitBatchOperator(task_id="commit", topology="m:t", staging_root="/x")
    with pytest.raises(AirflowFailException, match="cannot commit before txid 1"):
        commit.execute_complete({}, payload)


def test_the_commit_trigger_serialises_what_its_watch_needs() -> None:
    trigger = CommittedTxidTrigger(
        zookeeper_conn_id="zk", topology="t", txid=4, dag_id="wc", waiting_run_id="r5"
    )
    path, kwargs = trigger.serialize()
    again = CommittedTxidTrigger(**kwargs)
    assert path == "airflow_trident.triggers.zookeeper.CommittedTxidTrigger"
    assert (again.dag_id, again.waiting_run_id, again.txid) == ("wc", "r5", 4)
