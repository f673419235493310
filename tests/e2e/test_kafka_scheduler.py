"""Kafka through every way in under a real Airflow (scheduler, DAG processor, triggerer, API
server; LocalExecutor on PostgreSQL), real ``spark-submit`` (Spark local[2]), the shared Kafka
broker, real ZooKeeper and PostgreSQL state reached through an Airflow connection (issue 35).
One Airflow, two DAGs of the standard layout (:mod:`tests.harness.kafka_topologies`):

* ``e2e_kafka_tx`` (``KafkaSpout``, transactional state): the Spark connector jars reach
  ``spark-submit`` only through ``[trident] spark_jars``; the Airflow ``kafka`` connection only
  through ``TRIDENT_CONNECTIONS`` (its secret is in no log, no command line). Triggered runs
  commit txids 1 and 2, txid 1's processing failing once and retried by Airflow; after more
  records are produced, the committed run of txid 1 is cleared (as the UI does) and replays its
  offsets; ``airflow-trident backfill`` of txids 2..3 (a replay and a new txid), then of
  2..3 again (two replays), the scheduler running the runs it created. Every txid reads
  exactly the offsets its records were produced at; the counts equal the words produced,
  exactly, after each step.
* ``e2e_kafka_on_data`` (``OpaqueKafkaSpout``, opaque state, ``schedule="on_data"``): no run
  while the topic is empty; records produced start a run (asset-triggered, the
  ``NewDataTrigger`` in the triggerer asking the spout's ``is_ready``) that counts them; more
  records a second; then no new records, no new run.

Scheduler tier (``bash scripts/scheduler-test.sh``): ~6 min on 2 cores (9 ``spark-submit``
runs). The test command runs Kafka DAG runs nowhere (the demo's, on Spark Connect, is in the
long tier); the in-process counterpart of the retry, clear and backfill is
``tests/spout/test_kafka_ways_in.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.examples.kafka import produce_sentences, word_counts
from tests.harness.jars import require_jars, spark_jars_csv
from tests.harness.kafka import create_topic
from tests.harness.kafka_topologies import (
    FAIL_ONCE_ENV,
    OPAQUE_TOPIC_ENV,
    TX_TOPIC_ENV,
)
from tests.harness.scheduler import AirflowCluster, running_airflow

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.scheduler]

TX, ON_DATA = "e2e_kafka_tx", "e2e_kafka_on_data"
DAG = """
from datetime import timedelta
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.kafka_topologies:{topology}",
    dag_id="{dag_id}",
    schedule={schedule},
    max_active_batches={pending},
    spark_conn_id="spark_local",
    state_conn_id="e2e_state_pg",
    retries=1,
    retry_delay=timedelta(seconds=1),
)
"""
SECRET = f"kafka-secret-{uuid.uuid4().hex}"
"""The ``kafka`` connection's ``sasl.password`` (neither client uses it on the broker's PLAINTEXT
listener; Spark's options carry it in the Java client's JAAS line): in no log or command line."""


def _dag(topology: str, dag_id: str, schedule: str | None, pending: int) -> str:
    return DAG.format(topology=topology, dag_id=dag_id, schedule=repr(schedule), pending=pending)


class Kafka:
    """The records produced into a topic (2 partitions), by batch."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.batches: list[list[str]] = []
        create_topic(bootstrap, topic, partitions=2)

    def produce(self, n: int) -> None:
        """``n`` sentences, round robin over the partitions."""
        seed = len(self.batches) + 1
        self.batches.append(produce_sentences(self.bootstrap, self.topic, n, seed))

    def words(self, batches: int | None = None) -> dict[str, int]:
        return dict(word_counts(s for b in self.batches[:batches] for s in b))


def _counts(pg_url: str, table: str) -> dict[str, int]:
    engine = sa.create_engine(pg_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text(f'SELECT word, val FROM "{table}"')).all()
    finally:
        engine.dispose()
    return {r[0]: int(r[1]) for r in rows}


def _ranges(pg_url: str, topology: str) -> dict[int, dict[int, tuple[int, int]]]:
    """txid -> partition -> the offsets ``[first, next)`` it read (the commit ledger's batch
    archive; an opaque batch's partition is ``{"start": <the batch before>, "end": <its own>}``)."""
    from airflow_trident.batch.ledger import CommitLedger

    out: dict[int, dict[int, tuple[int, int]]] = {}
    for row in CommitLedger(pg_url).rows(topology):
        archive = json.loads(row["batch_meta"] or "{}")
        parts: dict[str, Any] = archive["spouts"]["sentences"]["partitions"]
        metas = [m.get("end", m) for m in parts.values() if m]
        out[int(row["txid"])] = {
            int(m["partition"]): (int(m["first"]), int(m["next"])) for m in metas
        }
    return out


def _offsets(batches: list[int]) -> dict[int, dict[int, tuple[int, int]]]:
    """txid -> partition -> offsets of ``batches`` (records per batch, even: half a partition)."""
    out, first = {}, 0
    for txid, n in enumerate(batches, start=1):
        out[txid] = {p: (first, first + n // 2) for p in (0, 1)}
        first += n // 2
    return out


def _txids(af: AirflowCluster, dag_id: str) -> dict[str, int]:
    """run id -> the txid its begin bound."""
    return {r: int(v["txid"]) for r, v in af.return_values(dag_id, "batch.begin").items()}


def _wait_new_runs(af: AirflowCluster, dag_id: str, before: set[str], count: int) -> list[str]:
    """The ids of ``count`` runs of ``dag_id`` not in ``before``, once all have finished."""
    deadline = time.monotonic() + 300
    while True:
        new = [r.run_id for r in af.runs(dag_id) if r.run_id not in before]
        if len(new) >= count:
            runs = af.wait_for_runs(dag_id, new, timeout_s=max(1.0, deadline - time.monotonic()))
            assert [r.state for r in runs] == ["success"] * len(runs), af.describe(dag_id)
            return new
        if time.monotonic() > deadline:
            pytest.fail(f"{dag_id}: {len(new)} new runs, not {count}\n{af.describe(dag_id)}")
        af.check_alive()
        time.sleep(0.5)


def _backfill(af: AirflowCluster, first: int, last: int) -> str:
    done = subprocess.run(
        ["timeout", "-s", "KILL", "120", sys.executable, "-m", "airflow_trident.cli", "backfill",
         TX, "--from-txid", str(first), "--to-txid", str(last)],
        env=af.env, cwd=af.home.path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    return done.stdout


@pytest.mark.timeout(1500)
def test_kafka_through_every_way_in_under_a_real_scheduler(
    tmp_path: Path, zk_hosts: str, pg_url: str, kafka_bootstrap: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    tx = Kafka(kafka_bootstrap, f"e2e_ktx_{tag}")
    od = Kafka(kafka_bootstrap, f"e2e_kod_{tag}")
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / f"{TX}.py").write_text(_dag("kafka_tx_word_count", TX, None, 3))
    (dags / f"{ON_DATA}.py").write_text(_dag("kafka_opaque_word_count", ON_DATA, "on_data", 1))
    url = sa.make_url(pg_url)
    host, _, port = zk_hosts.partition(":")
    fail_once = tmp_path / "failed-once"
    require_jars("spark")
    env = {
        "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT": json.dumps({
            "conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
            "extra": {"root": f"/trident_e2e_kafka_{tag}"},
        }),
        "AIRFLOW_CONN_E2E_STATE_PG": json.dumps({
            "conn_type": "postgres", "host": url.host, "port": url.port, "login": url.username,
            "password": url.password, "schema": url.database,
        }),
        "AIRFLOW_CONN_E2E_KAFKA": json.dumps({
            "conn_type": "kafka",
            "extra": {"bootstrap.servers": kafka_bootstrap, "sasl.username": "e2e",
                      "sasl.password": SECRET},
        }),
        # the connector jars: only through the deployment's [trident] spark_jars
        "AIRFLOW__TRIDENT__SPARK_JARS": spark_jars_csv(),
        "TRIDENT_HOME": str(tmp_path / "trident_home"),
        "TRIDENT_STAGING_ROOT": str(tmp_path / "staging"),
        TX_TOPIC_ENV: tx.topic,
        OPAQUE_TOPIC_ENV: od.topic,
        FAIL_ONCE_ENV: str(fail_once),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }  # fmt: skip
    timings: dict[str, float] = {}
    with running_airflow(
        tmp_path, pg_url=pg_url, dags_folder=dags, env=env, parallelism=3,
        expect_dags=[TX, ON_DATA],
    ) as af:  # fmt: skip
        # -- scheduled (triggered) runs; txid 1's processing fails once, Airflow retries it ---
        started = time.monotonic()
        af.unpause(TX)
        for i, n in enumerate((20, 16), start=1):
            tx.produce(n)
            (run,) = af.wait_for_runs(TX, [af.trigger(TX)], timeout_s=400)
            assert run.state == "success", af.describe(TX)
            assert _counts(pg_url, tx.topic) == tx.words(i)
        assert fail_once.exists()  # the first processing attempt failed ...
        tries = {(t.run_id, t.task_id): t.try_number for t in af.task_instances(TX)}
        txids = _txids(af, TX)
        run_1 = next(r for r, t in txids.items() if t == 1)
        assert tries[(run_1, "batch.process")] == 2, af.describe(TX)  # ... and its retry won
        assert sorted(txids.values()) == [1, 2]
        timings["2 runs, a retry"] = time.monotonic() - started

        # -- clear: the committed run of txid 1 replays its offsets, not the newer records ----
        started = time.monotonic()
        tx.produce(12)
        cleared = af.clear_run(TX, run_1)
        assert {"batch.begin", "batch.process", "batch.commit"} <= set(cleared), cleared
        (again,) = af.wait_for_runs(TX, [run_1], timeout_s=400)
        assert again.state == "success", af.describe(TX)
        assert _txids(af, TX)[run_1] == 1
        assert _counts(pg_url, tx.topic) == tx.words(2)
        timings["clear"] = time.monotonic() - started

        # -- backfill 2..3 (replays 2, binds the new txid 3), then 2..3 again (replays) -----
        started = time.monotonic()
        for _ in range(2):
            before = {r.run_id for r in af.runs(TX)}
            printed = _backfill(af, 2, 3)
            assert "2 runs created" in printed, printed
            _wait_new_runs(af, TX, before, 2)
            assert _counts(pg_url, tx.topic) == tx.words(3)
        timings["2 backfills"] = time.monotonic() - started
        by_run = _txids(af, TX)
        assert sorted(Counter(by_run.values()).items()) == [(1, 1), (2, 3), (3, 2)], by_run
        assert _ranges(pg_url, tx.topic) == _offsets([20, 16, 12])

        # -- on_data: records produced start a run, none start none --------------------------
        started = time.monotonic()
        af.unpause(ON_DATA)
        time.sleep(5)  # the watcher polls an empty topic
        assert af.runs(ON_DATA) == [], af.describe(ON_DATA)
        for i, n in enumerate((14, 6), start=1):
            before = {r.run_id for r in af.runs(ON_DATA)}
            od.produce(n)
            _wait_new_runs(af, ON_DATA, before, 1)
            assert _counts(pg_url, od.topic) == od.words(i)
        time.sleep(5)  # everything produced is committed: no new run
        assert len(af.runs(ON_DATA)) == 2, af.describe(ON_DATA)
        types = af.query("SELECT DISTINCT run_type FROM dag_run WHERE dag_id = %s", (ON_DATA,))
        assert types == [("asset_triggered",)], types
        assert _ranges(pg_url, od.topic) == _offsets([14, 6])
        timings["on_data, 2 runs"] = time.monotonic() - started

        # -- the connection's secret reached the job only through its environment -------------
        logs = [*(af.home.path / "logs").rglob("*.log"), *af.log_dir.glob("*.log")]
        assert logs
        leaks = [str(p) for p in logs if SECRET in p.read_text(errors="replace")]
        assert leaks == []
        submits = [line for p in logs for line in p.read_text(errors="replace").splitlines()
                   if "Spark-Submit cmd" in line]  # fmt: skip
        assert submits, "no spark-submit command line in the task logs"
        # the connector jar came from [trident] spark_jars; no Kafka setting on a command line
        assert all("spark-sql-kafka" in line for line in submits), submits[0]
        assert not any(kafka_bootstrap in line for line in submits), submits[0]
    print("; ".join(f"{k}: {v:.0f} s" for k, v in timings.items()))
