"""The express layout and the event-driven start under a real Airflow scheduler (scheduler, DAG
processor, triggerer, API server; LocalExecutor on PostgreSQL), a Spark Connect server, real
ZooKeeper and SQLite state. Short: ~2 min.

* ``e2e_express_sched`` (``layout="express"``, ``max_active_batches=3``): four triggered runs
  commit txids 1..4 in order with exact counts; the committed run of txid 2, cleared as the UI
  does, replays txid 2 and changes nothing.
* ``e2e_on_data`` (``layout="express"``, ``schedule="on_data"``): no run while the file log is
  empty; a landed file starts a run (asset-triggered, by the ``NewDataTrigger`` in the
  triggerer) that commits it; a second landed file starts a second run. The landing ->
  committed seconds are printed (no timed assertion; ``bench/latency.py --on-data`` measures).
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from pathlib import Path

import pytest

from tests.harness.connect import running_connect_server
from tests.harness.file_log import land, word_counts
from tests.harness.scheduler import AirflowCluster, running_airflow
from tests.harness.topologies import e2e_expected_counts as expected

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.scheduler]

EXPRESS = "e2e_express_sched"
ON_DATA = "e2e_on_data"
EXPRESS_DAG = """
import os
from datetime import timedelta
os.environ["TRIDENT_TEST_TOPOLOGY"] = "{topology}"
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.topologies:e2e_word_count",
    dag_id="{dag_id}",
    schedule=None,
    max_active_batches=3,
    layout="express",
    process_mode="connect",
    spark_connect_conn_id="e2e_connect",
    retries=1,
    retry_delay=timedelta(seconds=1),
)
"""
ON_DATA_DAG = """
from datetime import timedelta
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.file_log:file_log_word_count",
    dag_id="{dag_id}",
    schedule="on_data",
    max_active_batches=1,
    layout="express",
    process_mode="connect",
    spark_connect_conn_id="e2e_connect",
    retries=1,
    retry_delay=timedelta(seconds=1),
)
"""


def _xcom(af: AirflowCluster, dag_id: str, run_id: str) -> dict[str, object]:
    ((value,),) = af.query(
        "SELECT value FROM xcom WHERE dag_id = %s AND run_id = %s AND task_id = 'batch.run' "
        "AND key = 'return_value'",
        (dag_id, run_id),
    )
    return dict(value if isinstance(value, dict) else json.loads(value))


def _rows(state_db: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    with sqlite3.connect(state_db) as db:
        return db.execute(sql, params).fetchall()


def _wait_runs(af: AirflowCluster, dag_id: str, count: int, timeout_s: float) -> list[str]:
    """The ids of ``dag_id``'s runs once there are ``count`` of them, all finished."""
    deadline = time.monotonic() + timeout_s
    while True:
        runs = af.runs(dag_id)
        if len(runs) >= count:
            ids = [r.run_id for r in runs]
            af.wait_for_runs(dag_id, ids, timeout_s=max(1.0, deadline - time.monotonic()))
            return ids
        if time.monotonic() > deadline:
            pytest.fail(f"{dag_id}: {len(runs)} runs after {timeout_s:g}s\n{af.describe(dag_id)}")
        af.check_alive()
        time.sleep(0.2)


@pytest.mark.timeout(900)
def test_express_and_on_data_under_a_real_scheduler(
    tmp_path: Path, zk_hosts: str, pg_url: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    express_topology, data_topology = f"e2e_xs_{tag}", f"e2e_od_{tag}"
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / f"{EXPRESS}.py").write_text(EXPRESS_DAG.format(topology=express_topology,
                                                           dag_id=EXPRESS))  # fmt: skip
    (dags / f"{ON_DATA}.py").write_text(ON_DATA_DAG.format(dag_id=ON_DATA))
    landing = tmp_path / "log"
    landing.mkdir()
    state_db = tmp_path / "state.db"
    host, _, port = zk_hosts.partition(":")
    env = {
        "AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT": json.dumps({
            "conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
            "extra": {"root": "/trident_e2e_express"},
        }),
        "TRIDENT_STATE_URL": f"sqlite:///{state_db}",
        "TRIDENT_STAGING_ROOT": str(tmp_path / "staging"),
        "TRIDENT_TEST_TOPOLOGY": data_topology,  # the on_data DAG's (and its trigger's)
        "TRIDENT_TEST_LANDING": str(landing),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }  # fmt: skip
    with running_connect_server(tmp_path / "connect") as url:
        server_host, _, server_port = url.rpartition(":")
        env["AIRFLOW_CONN_E2E_CONNECT"] = json.dumps(
            {"conn_type": "spark_connect", "host": server_host, "port": int(server_port)}
        )
        with running_airflow(
            tmp_path, pg_url=pg_url, dags_folder=dags, env=env, parallelism=3,
            expect_dags=[EXPRESS, ON_DATA],
        ) as af:  # fmt: skip
            # -- express: four pipelined runs, then a cleared committed run ------------------
            af.unpause(EXPRESS)
            # The first run commits alone: Airflow links an alias to its asset at the first
            # event through it, and first events reported at once race on that insert
            # (UniqueViolation on asset_alias_asset; see docs/howto/operators.md)
            first = af.trigger(EXPRESS)
            af.wait_for_runs(EXPRESS, [first], timeout_s=300)
            run_ids = [first, *(af.trigger(EXPRESS) for _ in range(3))]
            runs = af.wait_for_runs(EXPRESS, run_ids, timeout_s=400)
            describe = af.describe(EXPRESS)
            assert [r.state for r in runs] == ["success"] * 4, describe
            txids = {r: int(_xcom(af, EXPRESS, r)["txid"]) for r in run_ids}  # type: ignore[call-overload]
            assert sorted(txids.values()) == [1, 2, 3, 4], describe
            ledger = _rows(state_db, "SELECT txid FROM trident_commit_ledger WHERE topology = ? "
                           "ORDER BY committed_at", express_topology)  # fmt: skip
            assert [t for (t,) in ledger] == [1, 2, 3, 4], ledger
            counts = dict(_rows(state_db, f'SELECT word, val FROM "{express_topology}"'))
            assert counts == expected(4)
            run_2 = next(r for r, t in txids.items() if t == 2)
            before = _rows(state_db, f'SELECT word, val, txid FROM "{express_topology}"')
            assert af.clear_run(EXPRESS, run_2) == ["batch.run"]
            (again,) = af.wait_for_runs(EXPRESS, [run_2], timeout_s=300)
            assert again.state == "success", af.describe(EXPRESS)
            replayed = _xcom(af, EXPRESS, run_2)
            assert replayed["txid"] == 2
            assert replayed["committed"]["applied"] is False  # type: ignore[index]
            assert _rows(state_db, f'SELECT word, val, txid FROM "{express_topology}"') == before

            # -- on_data: a run per landed file, started by the triggerer ----------------------
            af.unpause(ON_DATA)
            time.sleep(3)  # the watcher polls an empty log: no run
            assert af.runs(ON_DATA) == [], af.describe(ON_DATA)
            latencies = []
            for i, sentences in enumerate((["the cow jumped", "over the moon"], ["the man"])):
                landed = time.time()
                land(landing, "p0", f"{i:04d}.jsonl", sentences)
                ids = _wait_runs(af, ON_DATA, i + 1, timeout_s=240)
                done = [r for r in af.runs(ON_DATA) if r.run_id in ids]
                assert all(r.state == "success" for r in done), af.describe(ON_DATA)
                end = max(r.end_date for r in done if r.end_date)
                latencies.append(end.timestamp() - landed)
                counts = dict(_rows(state_db, f'SELECT word, val FROM "{data_topology}"'))
                assert counts == dict(word_counts(landing)), af.describe(ON_DATA)
            types = af.query("SELECT DISTINCT run_type FROM dag_run WHERE dag_id = %s", (ON_DATA,))
            assert types == [("asset_triggered",)], types
            print(f"landing -> committed: {', '.join(f'{s:.2f}s' for s in latencies)}")
