"""The readiness sensor of a file log whose landing root is missing fails with the reason
(issue 19, symptom 4); before, ``is_ready`` was False for ever and the run waited silently."""

from __future__ import annotations

import json
import sys
import types
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_trident.errors import SpoutUnavailableError
from airflow_trident.operation import Count
from airflow_trident.sensors.ready import BatchReadySensor
from airflow_trident.spout.file_log import FileLogSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology

pytestmark = pytest.mark.integration


class _Run:
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.conf: dict[str, Any] = {}
        self.logical_date = None


def test_the_sensor_of_a_missing_root_fails_naming_it(
    tmp_path: Path, zk_hosts: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a topology over a landing root that does not exist
    root = tmp_path / "not_mounted"
    name = f"root_{uuid.uuid4().hex[:8]}"
    topology = TridentTopology(name)
    topology.new_stream("ws", FileLogSpout(str(root), ["w"])).persistent_aggregate(
        memory_state(f"{name}_n", "transactional"), Count(), ["n"], name="n"
    )
    module = types.ModuleType(f"root_topology_{name}")
    module.topology = topology  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    host, _, port = zk_hosts.partition(":")
    conn = f"zk_{name}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn.upper()}", json.dumps({
        "conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
        "extra": {"root": "/trident_ready_tests"},
    }))  # fmt: skip
    sensor = BatchReadySensor(
        task_id="wait_ready", topology=f"{module.__name__}:topology",
        staging_root=str(tmp_path / "staging"), zookeeper_conn_id=conn, deferrable=False,
        timeout=30, poke_interval=0.1,
    )  # fmt: skip
    # When the sensor runs: it fails at once with the reason (not a timeout, not a wait)
    with pytest.raises(SpoutUnavailableError, match=f"root '{root}' does not exist.*Hint"):
        sensor.execute({"dag_run": _Run("r1")})
