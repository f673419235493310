"""Trident batches pipelined across two Celery workers: Airflow's CeleryExecutor (the celery
provider) with a private ``redis-server`` as broker, scheduler, DAG processor, triggerer and API
server on a fresh PostgreSQL metadata database (``running_airflow(executor="CeleryExecutor")``),
batches processed on a Spark Connect server, real ZooKeeper, SQLite state.

Six runs with ``max_active_batches=4``: the counts are exact, the commit ledger holds txids 1..6
committed in txid order, and the task instances name both workers as their host (each worker
reports ``worker<N>``). ``retries=1`` as in ``tests/e2e/test_scheduler.py`` (a commit resumed
from deferral may fail once under load; its retry commits nothing twice).
It starts its own Airflow, Redis and Connect server (not ``scripts/cluster.sh``'s cluster).
Slow: ~70 s idle, ~2 min under load (``bash scripts/cluster-test.sh``, or alone:
``TRIDENT_CLUSTER=1 .venv/bin/pytest -m cluster tests/cluster/test_celery.py``).
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.harness.connect import running_connect_server
from tests.harness.scheduler import running_airflow
from tests.harness.topologies import e2e_expected_counts as expected

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

DAG_ID = "cluster_celery"
RUNS = 6
DAG_FILE = f"""
from datetime import timedelta
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.topologies:e2e_word_count",
    dag_id="{DAG_ID}",
    schedule=None,
    max_active_batches=4,
    process_mode="connect",
    spark_connect_conn_id="cluster_connect",
    retries=1,
    retry_delay=timedelta(seconds=1),
)
"""


@pytest.mark.timeout(900)
def test_pipelined_batches_across_two_celery_workers(
    tmp_path: Path, zk_hosts: str, pg_url: str
) -> None:
    # Given: a word-count DAG on CeleryExecutor with two workers, processing on Spark Connect
    topology = f"cluster_celery_{uuid.uuid4().hex[:8]}"
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / f"{DAG_ID}.py").write_text(DAG_FILE)
    state_db = tmp_path / "state.db"
    host, _, port = zk_hosts.partition(":")
    env = {
        "AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT": json.dumps({
            "conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
            "extra": {"root": "/trident_cluster_celery"},
        }),
        "TRIDENT_STATE_URL": f"sqlite:///{state_db}",
        "TRIDENT_STAGING_ROOT": str(tmp_path / "staging"),
        "TRIDENT_TEST_TOPOLOGY": topology,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }  # fmt: skip
    started = time.monotonic()
    with running_connect_server(tmp_path / "connect") as url:
        server_host, _, server_port = url.rpartition(":")
        env["AIRFLOW_CONN_CLUSTER_CONNECT"] = json.dumps(
            {"conn_type": "spark_connect", "host": server_host, "port": int(server_port)}
        )
        with running_airflow(
            tmp_path, pg_url=pg_url, dags_folder=dags, env=env, expect_dags=[DAG_ID],
            executor="CeleryExecutor", celery_workers=2, worker_concurrency=2,
        ) as af:  # fmt: skip
            ready = time.monotonic() - started
            # When: six runs are triggered at once
            af.unpause(DAG_ID)
            run_ids = [af.trigger(DAG_ID) for _ in range(RUNS)]
            try:
                runs = af.wait_for_runs(DAG_ID, run_ids, timeout_s=600)
            except TimeoutError as error:
                pytest.fail(str(error))
            describe = af.describe(DAG_ID)
            hosts = Counter(
                h for (h,) in af.query(
                    "SELECT hostname FROM task_instance WHERE dag_id = %s", (DAG_ID,)
                )
            )  # fmt: skip
            commit_ends = af.query(
                "SELECT x.value, t.end_date FROM task_instance t JOIN xcom x ON x.dag_id = "
                "t.dag_id AND x.run_id = t.run_id AND x.task_id = 'batch.begin' "
                "AND x.key = 'return_value' WHERE t.dag_id = %s AND t.task_id = 'batch.commit'",
                (DAG_ID,),
            )
    print(f"airflow ready after {ready:.1f}s; {RUNS} runs done after "
          f"{time.monotonic() - started:.1f}s; task instances per host: {dict(hosts)}")  # fmt: skip

    # Then: every run succeeded, the tasks ran on both workers
    assert [r.state for r in runs] == ["success"] * RUNS, describe
    assert {"worker1", "worker2"} <= set(hosts), f"task instances per host: {hosts}\n{describe}"
    # ... the commit tasks ended in txid order
    txid_end = sorted(
        (int((v if isinstance(v, dict) else json.loads(v))["txid"]), end) for v, end in commit_ends
    )
    assert [t for t, _ in txid_end] == list(range(1, RUNS + 1)), txid_end
    ends = [end for _, end in txid_end]
    assert ends == sorted(ends), f"commits not in txid order: {txid_end}"
    # ... the ledger holds each txid once, in commit order, with no hole; the counts are exact
    with sqlite3.connect(state_db) as db:
        ledger = [
            t for (t,) in db.execute(
                "SELECT txid FROM trident_commit_ledger WHERE topology = ? ORDER BY committed_at",
                (topology,),
            )
        ]  # fmt: skip
        counts = dict(db.execute(f'SELECT word, val FROM "{topology}"').fetchall())
    assert ledger == list(range(1, RUNS + 1)), ledger
    assert counts == expected(RUNS)
