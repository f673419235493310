"""A run whose begin failed blocks the later runs' begins (``depends_on_past``): the later run's
readiness sensor names the blocking run, its failed task and the fix, in its log and in XCom,
and skips its run (no txid taken) instead of waiting in a run slot the failed run needs.

Real ``airflow dags test`` runs (SQLite metadata database, real ZooKeeper, SQLite state). The
first run's begin fails (its spout's coordinator raises while ``TRIDENT_FAIL_BEGIN`` is set); the
second run is skipped by its sensor. Slow: ~1 min.
"""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.harness.airflow import AirflowHome, prepare_airflow_home, run_dag_test

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

DAG_ID = "e2e_blocked_begin"
TOPOLOGY_MODULE = '''
"""Word count whose spout's coordinator raises in begin while TRIDENT_FAIL_BEGIN is set."""
import os

from airflow_trident.examples.topologies import state_url
from airflow_trident.operation import Count, Split
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology


class FailingCoordinator:
    def __init__(self, inner):
        self.inner = inner

    def get_partitions_for_batch(self):
        if os.environ.get("TRIDENT_FAIL_BEGIN"):
            raise ConnectionError("the source is down (TRIDENT_FAIL_BEGIN)")
        return self.inner.get_partitions_for_batch()

    def is_ready(self, txid):
        return self.inner.is_ready(txid)

    def close(self):
        self.inner.close()


class FlakySpout(MemoryTransactionalSpout):
    def get_partitioned_coordinator(self):
        return FailingCoordinator(super().get_partitioned_coordinator())


def topology():
    name = os.environ["TRIDENT_TEST_TOPOLOGY"]
    t = TridentTopology(name)
    spout = FlakySpout({"p0": [("a b",), ("b c",)]}, ["sentence"], take_per_batch=1)
    t.new_stream("sentences", spout).each(["sentence"], Split(), ["word"]).group_by(
        ["word"]
    ).persistent_aggregate(
        sql_state(state_url(), name, "transactional", key_fields=("word",), value_type="bigint"),
        Count(), ["count"], name="counts",
    )
    return t
'''
DAG_FILE = f"""
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "flaky_begin_topology:topology", dag_id="{DAG_ID}", spark_conn_id="spark_local", retries=0,
)
"""


def _env(root: Path, zk_hosts: str) -> dict[str, str]:
    host, _, port = zk_hosts.partition(":")
    return {
        "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT": json.dumps({
            "conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
            "extra": {"root": "/trident_e2e_blocked"},
        }),
        "TRIDENT_STATE_URL": f"sqlite:///{root / 'state.db'}",
        "TRIDENT_STAGING_ROOT": str(root / "staging"),
        "TRIDENT_TEST_TOPOLOGY": f"e2e_blk_{uuid.uuid4().hex[:8]}",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONPATH": os.pathsep.join([str(root / "modules"), os.environ.get("PYTHONPATH", "")]),
    }  # fmt: skip


def _xcom(home: AirflowHome, run_id: str, task_id: str, key: str) -> Any:
    with closing(sqlite3.connect(f"file:{home.metadata_db}?mode=ro", uri=True)) as db:
        rows = db.execute(
            "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = ? AND key = ?",
            (DAG_ID, run_id, task_id, key),
        ).fetchall()
    return json.loads(rows[0][0]) if rows else None


@pytest.mark.timeout(600)
@pytest.mark.long  # a failed run blocking later ones stays in the test command: the fault run
def test_a_run_blocked_by_an_earlier_failed_begin_says_which_run_and_how_to_fix_it(
    tmp_path: Path, zk_hosts: str
) -> None:
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "flaky_begin_topology.py").write_text(TOPOLOGY_MODULE)
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / f"{DAG_ID}.py").write_text(DAG_FILE)
    home = prepare_airflow_home(tmp_path / "airflow", dags_folder=tmp_path / "dags")
    env = _env(tmp_path, zk_hosts)
    # Given a run whose begin failed (its spout's source was down)
    failed = run_dag_test(
        DAG_ID, home=home, logical_date="2026-01-01", timeout_s=240,
        extra_env={**env, "TRIDENT_FAIL_BEGIN": "1"},
    )  # fmt: skip
    assert failed.task_states.get("batch.begin") == "failed", failed.describe()
    # When the next run (a later logical date) starts; begun, it could only wait
    blocked = run_dag_test(
        DAG_ID, home=home, logical_date="2026-01-02", timeout_s=180, extra_env=env
    )
    # Then its sensor skipped it, with no txid taken (it would hold a run slot the failed run
    # needs once cleared)
    output = blocked.process.stdout + blocked.process.stderr
    assert blocked.task_states.get("batch.wait_ready") == "skipped", blocked.describe(80)
    assert blocked.task_states.get("batch.begin") == "skipped", blocked.describe()
    assert "no new batch begins while the earlier run" in output, blocked.describe(80)
    # And it named the blocking run, its failed task and the fix, in its log
    assert failed.run_id is not None
    assert f"earlier run {failed.run_id}" in output, blocked.describe(80)
    assert "has batch.begin failed" in output, blocked.describe(80)
    fix = f"airflow dags clear {DAG_ID} --run-id {failed.run_id} --only-failed --yes"
    assert fix in output, blocked.describe(80)
    # And in the sensor's XCom, which the UI shows
    assert blocked.run_id is not None
    blocked_by = _xcom(home, blocked.run_id, "batch.wait_ready", "blocked_by")
    assert blocked_by is not None, blocked.describe(80)
    assert blocked_by["run_id"] == failed.run_id
    assert blocked_by["task_id"] == "batch.begin"
    assert blocked_by["state"] == "failed"
    assert fix in blocked_by["fix"]
