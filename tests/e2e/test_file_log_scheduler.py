"""The opaque file log under a real Airflow scheduler (``running_airflow``: scheduler, DAG
processor, triggerer, API server; real ``spark-submit``): files land while batches run, one
partition is unreadable (behind a link whose target is gone) for the first batch and is caught
up by the second, which reads everything left; the opaque state's counts end exact key by key.

Slow: ~1.5 min (Airflow's start, two runs).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import uuid
from pathlib import Path

import pytest

from tests.harness.file_log import land, word_counts
from tests.harness.scheduler import running_airflow

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.scheduler]

DAG_ID = "e2e_file_log"
DAG_FILE = f"""
from datetime import timedelta
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.file_log:file_log_word_count",
    dag_id="{DAG_ID}",
    schedule=None,
    max_active_batches=2,
    spark_conn_id="spark_local",
    retries=1,
    retry_delay=timedelta(seconds=1),
)
"""


def deployment_env(root: Path, zk_hosts: str, topology: str) -> dict[str, str]:
    host, _, port = zk_hosts.partition(":")
    return {
        "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT": json.dumps({
            "conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
            "extra": {"root": "/trident_e2e_file_log"},
        }),
        "TRIDENT_STATE_URL": f"sqlite:///{root / 'state.db'}",
        "TRIDENT_STAGING_ROOT": str(root / "staging"),
        "TRIDENT_TEST_TOPOLOGY": topology,
        "TRIDENT_TEST_LANDING": str(root / "log"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        # these batches are small: 0 has Spark's tasks read them (the other DAG runs: the driver)
        "AIRFLOW__TRIDENT__SPARK_READ_HERE_BYTES": "0",
    }  # fmt: skip


def ledger(state_db: Path, topology: str) -> dict[int, dict[str, int]]:
    """txid -> records emitted per partition, from the commit ledger."""
    with sqlite3.connect(state_db) as db:
        rows = db.execute(
            "SELECT txid, emitted FROM trident_commit_ledger WHERE topology = ? ORDER BY txid",
            (topology,),
        ).fetchall()
    return {txid: json.loads(emitted).get("sentences", {}) for txid, emitted in rows}


@pytest.mark.timeout(600)
def test_files_landing_while_batches_run_and_a_partition_unreadable_for_a_while(
    tmp_path: Path, zk_hosts: str, pg_url: str
) -> None:
    # Given a log of partitions a and b, b behind a link whose target is gone
    topology = f"e2e_file_log_{uuid.uuid4().hex[:8]}"
    log, b_files = tmp_path / "log", tmp_path / "b_target"
    land(log, "a", "0001.jsonl", ["the cow", "the moon"])
    land(tmp_path, "b_target", "0001.jsonl", ["the end of b"])
    os.symlink(tmp_path / "gone", log / "b")
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / f"{DAG_ID}.py").write_text(DAG_FILE)
    env = deployment_env(tmp_path, zk_hosts, topology)
    with running_airflow(
        tmp_path, pg_url=pg_url, dags_folder=dags, env=env, parallelism=3, expect_dags=[DAG_ID]
    ) as af:
        af.unpause(DAG_ID)
        # When a run goes while files keep landing (every 2 s), b still unreadable
        stop = threading.Event()
        landed = {"a": 1, "b": 1}

        def keep_landing() -> None:
            while not stop.wait(2.0):
                for partition, root in (("a", log), ("b_target", tmp_path)):
                    key = partition[0]
                    landed[key] += 1
                    land(root, partition, f"{landed[key]:04d}.jsonl", [f"w{landed[key]} the"])

        lander = threading.Thread(target=keep_landing, daemon=True)
        lander.start()
        try:
            (run,) = af.wait_for_runs(DAG_ID, [af.trigger(DAG_ID)], timeout_s=300)
        finally:
            stop.set()
            lander.join()
        assert run.state == "success", af.describe(DAG_ID)
        # and b comes back, one more file lands and a second run goes
        (log / "b").unlink()
        os.symlink(b_files, log / "b")
        land(log, "a", "9999.jsonl", ["last words"])
        (run,) = af.wait_for_runs(DAG_ID, [af.trigger(DAG_ID)], timeout_s=300)
        assert run.state == "success", af.describe(DAG_ID)
    # Then b emitted nothing until it was back, and its files came in the last batch
    emitted = ledger(tmp_path / "state.db", topology)
    print(f"emitted per txid: {emitted}")
    assert sorted(emitted) == [1, 2]
    assert emitted[1].get("b", 0) == 0
    assert emitted[2]["b"] == landed["b"]  # one record per b file
    assert sum(sum(p.values()) for p in emitted.values()) == 2 + landed["a"] + landed["b"]
    # and the opaque state's counts are exact, key by key
    expected = word_counts(log)
    with sqlite3.connect(tmp_path / "state.db") as db:
        stored = dict(db.execute(f'SELECT word, val FROM "{topology}"').fetchall())
    assert stored == dict(expected)
