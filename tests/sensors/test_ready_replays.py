"""A replayed or cleared run does not wait for new data: its batch is fixed already.

Before the fix, the readiness sensor asked the spouts for a *new* batch even in a run replaying
txid 1 (``conf={"txid": 1}``) or a cleared run bound to it: with a real source and nothing new,
that run waited for ever (and held a run slot).
"""

from __future__ import annotations

import json
import sys
import types
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_trident.hooks.trident import TridentHook
from airflow_trident.operation import Count
from airflow_trident.sensors.ready import BatchReadySensor
from airflow_trident.spout.file_log import FileLogSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology

pytestmark = pytest.mark.integration


class _Run:
    def __init__(self, run_id: str, conf: dict[str, Any] | None = None) -> None:
        self.run_id = run_id
        self.conf = conf or {}
        self.logical_date = None


@pytest.fixture
def sensor(
    tmp_path: Path, zk_hosts: str, monkeypatch: pytest.MonkeyPatch
) -> BatchReadySensor:
    # Given a file log with one file, a topology over it (importable by reference) and a
    # ZooKeeper connection
    (tmp_path / "log" / "p0").mkdir(parents=True)
    (tmp_path / "log" / "p0" / "0001.json").write_text('{"w": "a"}\n{"w": "b"}\n')
    name = f"ready_{uuid.uuid4().hex[:8]}"
    topology = TridentTopology(name)
    topology.new_stream("ws", FileLogSpout(str(tmp_path / "log"), ["w"])).persistent_aggregate(
        memory_state(f"{name}_n", "transactional"), Count(), ["n"], name="n"
    )
    module = types.ModuleType(f"ready_topology_{name}")
    module.topology = topology  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    host, _, port = zk_hosts.partition(":")
    conn = f"zk_{name}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn.upper()}", json.dumps({
        "conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
        "extra": {"root": "/trident_ready_tests"},
    }))  # fmt: skip
    return BatchReadySensor(
        task_id="wait_ready", topology=f"{module.__name__}:topology",
        staging_root=str(tmp_path / "staging"), zookeeper_conn_id=conn, deferrable=False,
        timeout=1, poke_interval=0.1,
    )  # fmt: skip


def test_a_cleared_or_replayed_run_goes_on_without_new_data(sensor: BatchReadySensor) -> None:
    # Given txid 1 begun by run r1, which took the only file: nothing new is ready
    hook = TridentHook(zookeeper_conn_id=sensor.zookeeper_conn_id)
    with hook.batch_steps(sensor.topology, staging_root=sensor.staging_root) as steps:
        assert steps.begin("r1")["txid"] == 1
        steps.process_local(1)
    assert sensor._ready() is False
    # When r1 is cleared (its sensor runs again), or a new run replays txid 1 by conf
    cleared = sensor.execute({"dag_run": _Run("r1")})
    replay = sensor.execute({"dag_run": _Run("replay_1", {"txid": 1})})
    # Then both go on at once (returning, not timing out)
    assert (cleared, replay) == (None, None)
    # And a new run's sensor still waits for new data
    assert sensor._replayed_txid({"dag_run": _Run("r2")}) is None
