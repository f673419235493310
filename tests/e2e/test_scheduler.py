"""Trident batches pipelined by a real Airflow scheduler: scheduler, DAG processor, triggerer and
API server (LocalExecutor) on a fresh PostgreSQL metadata database, real ``spark-submit`` (Spark
local), real ZooKeeper, SQLite state. Five runs with ``max_active_batches=3``: processing
overlaps, commits stay in txid order (the commit defers to the triggerer until txid-1 is in).

``trident_dag`` fixes ``catchup=False``, so a frequent schedule would give one run a minute: the
runs are triggered instead (manual runs, ``logical_date`` None, as ``airflow dags trigger``;
with logical dates, the commit's ``depends_on_past`` can deadlock against the txid order).
``retries=1``: under load Airflow 3.3 may fail a commit resumed from deferral (a late executor
event of the deferring try); its retry finds the txid committed or commits it once. Then the
committed run of txid 2 is cleared through the REST API (what the UI's "Clear" does): it runs
again and changes no state.
Slow: ~2 min (~12 s to start Airflow, ~65-75 s for the runs on 2 cores, ~25 s for the clear).
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from datetime import datetime
from itertools import combinations
from pathlib import Path

import pytest

from tests.harness.scheduler import AirflowCluster, TaskInstanceInfo, running_airflow
from tests.harness.topologies import E2E_DATA
from tests.harness.topologies import e2e_expected_counts as expected

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.scheduler]

DAG_ID = "e2e_scheduler"
RUNS = 5
DAG_FILE = f"""
from datetime import timedelta
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.topologies:e2e_word_count",
    dag_id="{DAG_ID}",
    schedule=None,
    max_active_batches=3,
    spark_conn_id="spark_local",
    retries=1,
    retry_delay=timedelta(seconds=1),
)
"""


def keys_per_batch(batches: int) -> list[int]:
    """Distinct words of each batch 1..``batches`` (what its commit writes), in txid order.

    Checked per txid because the totals cannot tell every mix-up apart: batches 1 and 5 hold
    the same words, so a run that emits batch 1 twice and no batch 5 has the totals of 1..5.
    """
    return [
        len(
            {
                w
                for rows in E2E_DATA.values()
                for (s,) in rows[2 * (t - 1) : 2 * t]
                for w in s.split()
            }
        )
        for t in range(1, batches + 1)
    ]


def last_writers(batches: int) -> set[int]:
    """The txids a transactional state keeps after ``batches``: each word's last batch."""
    last: dict[str, int] = {}
    for txid in range(1, batches + 1):
        for rows in E2E_DATA.values():
            for (sentence,) in rows[2 * (txid - 1) : 2 * txid]:
                last.update(dict.fromkeys(sentence.split(), txid))
    return set(last.values())


def deployment_env(root: Path, zk_hosts: str, topology: str) -> dict[str, str]:
    """Connections and the topology's settings, as in ``test_dag_runs.py``."""
    host, _, port = zk_hosts.partition(":")
    return {
        "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT": json.dumps({
            "conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
            "extra": {"root": "/trident_e2e_scheduler"},
        }),
        "TRIDENT_STATE_URL": f"sqlite:///{root / 'state.db'}",
        "TRIDENT_STAGING_ROOT": str(root / "staging"),
        "TRIDENT_TEST_TOPOLOGY": topology,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }  # fmt: skip


def overlapping(tis: list[TaskInstanceInfo]) -> list[tuple[str, str, float]]:
    """Pairs of task instances (run ids) whose [start, end] intervals overlap, with seconds."""
    pairs = []
    for a, b in combinations(tis, 2):
        if a.start_date and a.end_date and b.start_date and b.end_date:
            seconds = (
                min(a.end_date, b.end_date) - max(a.start_date, b.start_date)
            ).total_seconds()
            if seconds > 0:
                pairs.append((a.run_id, b.run_id, seconds))
    return pairs


def timeline(af: AirflowCluster, txids: dict[str, int], origin: datetime) -> str:
    """Per run: txid and each task's [start, end] in seconds since ``origin``."""
    lines = []
    by_run: dict[str, list[TaskInstanceInfo]] = {}
    for ti in af.task_instances(DAG_ID):
        by_run.setdefault(ti.run_id, []).append(ti)
    for run_id, tis in sorted(by_run.items(), key=lambda kv: txids.get(kv[0], 0)):
        cells = []
        for ti in sorted(tis, key=lambda t: t.start_date or origin):
            start = (ti.start_date - origin).total_seconds() if ti.start_date else float("nan")
            end = (ti.end_date - origin).total_seconds() if ti.end_date else float("nan")
            name = ti.task_id.removeprefix("batch.")
            cells.append(f"{name}[{start:5.1f},{end:5.1f}]{'' if ti.try_number == 1 else '*'}")
        lines.append(f"txid {txids.get(run_id, '?')}: " + " ".join(cells))
    return "\n".join(lines)


def xcom(af: AirflowCluster, run_id: str, task_id: str) -> dict[str, object]:
    """The return value a task of ``run_id`` left in XCom."""
    ((value,),) = af.query(
        "SELECT value FROM xcom WHERE dag_id = %s AND run_id = %s AND task_id = %s "
        "AND key = 'return_value'",
        (DAG_ID, run_id, task_id),
    )
    return dict(value if isinstance(value, dict) else json.loads(value))


def state_snapshot(state_db: Path, topology: str) -> tuple[object, ...]:
    """Every stored (word, count, txid) and ledger row (txid, attempt, keys written)."""
    with sqlite3.connect(state_db) as db:
        state = sorted(db.execute(f'SELECT word, val, txid FROM "{topology}"').fetchall())
        ledger = db.execute(
            "SELECT txid, attempt_id, keys_written FROM trident_commit_ledger "
            "WHERE topology = ? ORDER BY txid",
            (topology,),
        ).fetchall()
    return tuple(state), tuple(ledger)


def begin_txids(af: AirflowCluster) -> dict[str, int]:
    """run id -> txid, from the begin tasks' XComs."""
    rows = af.query(
        "SELECT run_id, value FROM xcom WHERE dag_id = %s AND task_id = 'batch.begin' "
        "AND key = 'return_value'",
        (DAG_ID,),
    )
    return {
        run_id: int((v if isinstance(v, dict) else json.loads(v))["txid"]) for run_id, v in rows
    }


@pytest.mark.timeout(900)  # above the runs' own 600 s limit, whose failure prints the logs
def test_pipelined_runs_under_a_real_scheduler(tmp_path: Path, zk_hosts: str, pg_url: str) -> None:
    topology = f"e2e_sched_{uuid.uuid4().hex[:8]}"
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / f"{DAG_ID}.py").write_text(DAG_FILE)
    env = deployment_env(tmp_path, zk_hosts, topology)
    state_db = tmp_path / "state.db"
    with running_airflow(
        tmp_path, pg_url=pg_url, dags_folder=dags, env=env, parallelism=3, expect_dags=[DAG_ID]
    ) as af:
        af.unpause(DAG_ID)
        started = time.monotonic()
        run_ids = [af.trigger(DAG_ID) for _ in range(RUNS)]
        try:
            runs = af.wait_for_runs(DAG_ID, run_ids, timeout_s=600)
        except TimeoutError as error:
            pytest.fail(str(error))
        elapsed = time.monotonic() - started
        txids = begin_txids(af)
        origin = min(r.queued_at for r in runs if r.queued_at is not None)
        report = f"{RUNS} runs in {elapsed:.1f}s\n{timeline(af, txids, origin)}"
        print(report)
        describe = f"{report}\n{af.describe(DAG_ID)}"

        assert [r.state for r in runs] == ["success"] * RUNS, describe
        assert sorted(txids.values()) == list(range(1, RUNS + 1)), describe

        tis = af.task_instances(DAG_ID)
        commits = sorted(
            (t for t in tis if t.task_id == "batch.commit"), key=lambda t: txids[t.run_id]
        )
        ends = [t.end_date for t in commits]
        assert ends == sorted(ends), f"commits not in txid order\n{describe}"  # type: ignore[type-var]

        processes = [t for t in tis if t.task_id == "batch.process"]
        overlaps = overlapping(processes)
        print(f"overlapping process tasks: {overlaps}")
        assert overlaps, f"no two process tasks overlapped in time\n{describe}"

        # The UI's "Clear" on a committed run (txid 2, with later txids committed): every task
        # runs again — the same txid is re-bound, re-processed as a new attempt — and the
        # commit changes nothing.
        before = state_snapshot(state_db, topology)
        run_2 = next(run_id for run_id, txid in txids.items() if txid == 2)
        cleared = af.clear_run(DAG_ID, run_2)
        assert "batch.commit" in cleared, cleared
        try:
            (again,) = af.wait_for_runs(DAG_ID, [run_2], timeout_s=300)
        except TimeoutError as error:
            pytest.fail(str(error))
        assert again.state == "success", af.describe(DAG_ID)
        assert begin_txids(af)[run_2] == 2
        retried = {t.task_id: t.try_number for t in af.task_instances(DAG_ID) if t.run_id == run_2}
        assert retried["batch.process"] >= 2, retried
        assert xcom(af, run_2, "batch.commit")["applied"] is False
        assert state_snapshot(state_db, topology) == before

    with sqlite3.connect(state_db) as db:
        counts = dict(db.execute(f'SELECT word, val FROM "{topology}"').fetchall())
        state_txids = {r[0] for r in db.execute(f'SELECT DISTINCT txid FROM "{topology}"')}
        ledger = db.execute(
            "SELECT txid, keys_written FROM trident_commit_ledger WHERE topology = ? "
            "ORDER BY committed_at",
            (topology,),
        ).fetchall()
    # The commit ledger has one row per committed txid, committed in txid order, and each txid
    # wrote the keys of *its* batch (a txid that emitted another txid's tuples shows here).
    assert [txid for txid, _ in ledger] == list(range(1, RUNS + 1)), ledger
    written = [json.loads(keys)["counts"] for _, keys in ledger]
    assert written == keys_per_batch(RUNS), f"keys written per txid {written}\n{report}"
    assert counts == expected(RUNS)
    # Each key keeps the txid that last wrote it (here only 4 and 5: every word recurs late).
    assert state_txids == last_writers(RUNS)
