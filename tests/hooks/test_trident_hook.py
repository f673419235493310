"""``TridentHook`` against a real ZooKeeper: one session per task, and the light readiness
handle a sensor's poke or a trigger's poll opens (no committer, no interpreter).

Before the hook's session and readiness handle, the readiness trigger built the whole batch
lifecycle on a new ZooKeeper session at every poll (every 5 s per waiting run), and the
readiness sensor opened up to five sessions per try.
"""

from __future__ import annotations

import asyncio
import json
import sys
import types
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.coordinator import TransactionalCoordinator
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import MissingConnectionError
from airflow_trident.hooks import zookeeper as zookeeper_hook
from airflow_trident.hooks.trident import TridentHook
from airflow_trident.operation import Count
from airflow_trident.runtime.commit import StateCommitter
from airflow_trident.runtime.local import LocalBatchProcessor
from airflow_trident.sensors.ready import BatchReadySensor
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology
from airflow_trident.triggers.zookeeper import BatchReadyTrigger

pytestmark = pytest.mark.integration

ROOT = "/trident_hook_tests"


class Deployment:
    """A topology importable by reference, its ZooKeeper connection, and counters of the
    ZooKeeper sessions opened and the readiness checks made."""

    def __init__(self, reference: str, conn_id: str, name: str) -> None:
        self.reference = reference
        self.conn_id = conn_id
        self.name = name
        self.sessions = 0
        self.checks = 0
        self.ready_after = 1  # the check that first answers "ready"

    def hook(self) -> TridentHook:
        return TridentHook(zookeeper_conn_id=self.conn_id)


@pytest.fixture
def deployment(zk_hosts: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    name = f"hook_{uuid.uuid4().hex[:8]}"
    topology = TridentTopology(name)
    spout = MemoryTransactionalSpout({"p0": [("a",), ("b",)]}, ["w"], take_per_batch=1)
    topology.new_stream("ws", spout).persistent_aggregate(
        memory_state(f"{name}_n", "transactional"), Count(), ["n"], name="n"
    )
    module = types.ModuleType(f"hook_topology_{name}")
    module.topology = topology  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    host, _, port = zk_hosts.partition(":")
    conn_id = f"zk_{name}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({
        "conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
        "extra": {"root": ROOT},
    }))  # fmt: skip
    found = Deployment(f"{module.__name__}:topology", conn_id, name)
    real_connect = zookeeper_hook.connect

    def counting_connect(config: ZkConfig) -> Any:
        found.sessions += 1
        return real_connect(config)

    def is_ready(self: TransactionalCoordinator, txid: int | None = None) -> bool:
        found.checks += 1
        return found.checks >= found.ready_after

    monkeypatch.setattr(zookeeper_hook, "connect", counting_connect)
    monkeypatch.setattr(TransactionalCoordinator, "is_ready", is_ready)
    yield found
    client = connect(ZkConfig(hosts=zk_hosts, root=ROOT, timeout=5.0))
    CoordinatorStore(client, CoordinatorPaths(ROOT, name)).delete_all()
    client.stop()
    client.close()


@pytest.fixture
def no_lifecycle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building the batch lifecycle's committer or interpreter fails the test."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a readiness check built the batch lifecycle")

    monkeypatch.setattr(StateCommitter, "__init__", refused)
    monkeypatch.setattr(LocalBatchProcessor, "__init__", refused)


def test_a_task_opens_one_zookeeper_session_however_many_blocks(deployment: Deployment) -> None:
    hook = deployment.hook()
    # When a task opens readiness handles, a store and the lifecycle inside one session
    with hook.session():
        for _ in range(3):
            with hook.readiness(deployment.reference) as readiness:
                readiness.is_ready()
        with hook.coordinator_store(deployment.name) as store:
            store.runs.allocate_txid()
        with hook.batch_steps(deployment.reference, staging_root="/tmp/unused") as steps:
            assert steps.store.runs.current_txid() == 1
    # Then it connected once
    assert deployment.sessions == 1
    # And a lone block connects and closes on its own
    with hook.coordinator_store(deployment.name) as store:
        assert store.runs.current_txid() == 1
    assert deployment.sessions == 2


def test_the_readiness_handle_builds_no_committer_nor_interpreter(
    deployment: Deployment, no_lifecycle: None
) -> None:
    # When readiness is checked through the hook's light handle
    with deployment.hook().readiness(deployment.reference) as readiness:
        # Then it answers from the spouts' coordinators (the lifecycle was never built)
        assert readiness.is_ready() is True
        assert readiness.store.commits.committed_txid() == 0
    # while the whole lifecycle's committer is one
    with (
        pytest.raises(AssertionError, match="built the batch lifecycle"),
        deployment.hook().batch_steps(deployment.reference, staging_root="/tmp/x") as steps,
    ):
        assert steps.ctx.committer is not None


def test_the_readiness_trigger_polls_on_one_session_without_a_lifecycle(
    deployment: Deployment, no_lifecycle: None
) -> None:
    # Given spouts that become ready at the fifth check
    deployment.ready_after = 5
    trigger = BatchReadyTrigger(
        topology=deployment.reference, zookeeper_conn_id=deployment.conn_id,
        staging_root="/tmp/unused", poll_interval=0.01,
    )  # fmt: skip

    async def first() -> Any:
        async for event in trigger.run():
            return event.payload
        return None

    # When the trigger waits
    payload = asyncio.run(asyncio.wait_for(first(), timeout=60))
    # Then it fired after five polls, all on one ZooKeeper session, building no lifecycle
    assert payload == {"status": "ready"}
    assert (deployment.checks, deployment.sessions) == (5, 1)


def test_the_readiness_sensor_pokes_on_one_session_without_a_lifecycle(
    deployment: Deployment, no_lifecycle: None
) -> None:
    # Given spouts that become ready at the fourth check and a sensor poking in its task
    deployment.ready_after = 4
    sensor = BatchReadySensor(
        task_id="wait_ready", topology=deployment.reference, staging_root="/tmp/unused",
        zookeeper_conn_id=deployment.conn_id, deferrable=False, mode="poke", poke_interval=0.01,
        timeout=60,
    )  # fmt: skip

    class Run:
        run_id, conf, logical_date = "r1", None, None

    # When the task runs (a new run: it checks the run's txid, earlier runs, then pokes)
    sensor.execute({"dag_run": Run()})
    # Then every check used the task's one ZooKeeper session, and no lifecycle was built
    assert (deployment.checks, deployment.sessions) == (4, 1)


def test_a_missing_connection_is_the_projects_error_with_a_hint() -> None:
    hook = TridentHook(zookeeper_conn_id="trident_nowhere", state_conn_id="trident_nothing")
    with pytest.raises(MissingConnectionError, match=r"`trident_nothing`.*Hint: create it"):
        hook.state_url()
    with (
        pytest.raises(MissingConnectionError, match=r"`trident_nowhere`.*AIRFLOW_CONN_"),
        hook.coordinator_store("t"),
    ):
        pass
