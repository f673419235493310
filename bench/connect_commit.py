"""Benchmark: one Spark commit (``commit_mode="spark"``) through a Spark Connect server vs by
``spark-submit``.

Each round begins a batch of the e2e word count (real ZooKeeper, state and ledger in PostgreSQL),
processes and stages it in this process, then commits it with its partitions applied by Spark
tasks, alternately as the commit task does it in each mode:

* Connect (``process_mode="connect"``): open a session on the running server
  (:func:`~airflow_trident.runtime.spark.session.remote_session`), run the commit
  (:func:`~airflow_trident.batch.on_spark.commit_on_spark`), close the session;
* spark-submit (``process_mode="submit"``): ``spark-submit --master local[2] spark_job.py
  --commit`` (a JVM and a SparkSession per commit), as ``CommitBatchOperator`` starts it.

The first round of each mode is a warm-up (not timed). Both modes run on ``local[2]``; the state
afterwards must equal the reference counts. Last line: ``ratio=<connect s / spark-submit s>``
(medians; lower is better).

    source scripts/env.sh
    flock /tmp/heavy.lock .venv/bin/python bench/connect_commit.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests/
from tests.harness import export_project_path

export_project_path()  # Airflow tasks and Spark's Python workers load tests.harness's topologies

REFERENCE = "tests.harness.topologies:e2e_word_count"
ZK_ROOT = "/trident_bench_connect_commit"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed commits per mode")
    args = parser.parse_args()
    url, hosts = os.environ.get("TRIDENT_PG_URL"), os.environ.get("TRIDENT_ZK_HOSTS")
    if not url or not hosts:
        print("TRIDENT_PG_URL / TRIDENT_ZK_HOSTS unset: source scripts/env.sh", file=sys.stderr)
        return 2
    topology_name = f"bench_cc_{uuid.uuid4().hex[:8]}"
    os.environ["TRIDENT_TEST_TOPOLOGY"] = topology_name  # before the server starts
    os.environ["TRIDENT_STATE_URL"] = url
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from airflow_trident.batch.lifecycle import zookeeper_batch_steps
    from airflow_trident.batch.on_spark import commit_on_spark
    from airflow_trident.coordination.client import ZkConfig, connect
    from airflow_trident.hooks.spark import SPARK_JOB, job_arguments, job_conf
    from airflow_trident.runtime.reference import load_topology
    from airflow_trident.runtime.spark.session import remote_session
    from tests.harness.connect import running_connect_server
    from tests.harness.topologies import E2E_DATA

    work = Path(tempfile.mkdtemp(prefix="trident-connect-commit-"))
    staging_root = str(work / "staging")
    config = ZkConfig(hosts=hosts, root=ZK_ROOT)
    client = connect(config)
    steps = zookeeper_batch_steps(
        load_topology(REFERENCE), client, root=ZK_ROOT, staging_root=staging_root, state_url=url
    )
    submit = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]"]
    for key, value in {**job_conf(None), "spark.ui.enabled": "false"}.items():
        submit += ["--conf", f"{key}={value}"]
    times: dict[str, list[float]] = {"connect": [], "spark-submit": []}
    rounds = 2 * (args.rounds + 1)
    try:
        with running_connect_server(work / "connect", quick_jit=False) as sc_url:
            for i in range(rounds):
                txid = int(steps.begin(f"bench-{i}")["txid"])
                steps.process_local(txid)
                mode = "connect" if i % 2 == 0 else "spark-submit"
                started = time.perf_counter()
                if mode == "connect":
                    with remote_session(sc_url) as spark:
                        commit_on_spark(steps, spark, REFERENCE, txid, 0.0)
                else:
                    job = job_arguments(REFERENCE, txid, staging_root, config, emit_wait_s=0.0)
                    subprocess.run(
                        [*submit, SPARK_JOB, *job, "--commit"], check=True, capture_output=True
                    )
                elapsed = time.perf_counter() - started
                if steps.store.commits.committed_txid() != txid:
                    print(f"txid {txid} was not committed by {mode}", file=sys.stderr)
                    return 1
                print(f"txid {txid} {mode:>12}: {elapsed:.2f} s{' (warm-up)' if i < 2 else ''}")
                if i >= 2:
                    times[mode].append(elapsed)
        expected: Counter[str] = Counter()
        for rows in E2E_DATA.values():
            for (sentence,) in rows[: 2 * rounds]:
                expected.update(sentence.split())
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            rows = conn.execute(sa.text(f'SELECT word, val FROM "{topology_name}"')).all()
            conn.execute(sa.text(f'DROP TABLE "{topology_name}"'))
        engine.dispose()
        exact = {r[0]: int(r[1]) for r in rows} == dict(expected)
        print(f"state equals the reference after {rounds} commits: {exact}")
        steps.store.delete_all()
    finally:
        client.stop()
        client.close()
    connect_s = statistics.median(times["connect"])
    submit_s = statistics.median(times["spark-submit"])
    print(f"per commit (median of {args.rounds}): Connect {connect_s:.2f} s, "
          f"spark-submit {submit_s:.2f} s")  # fmt: skip
    print(f"ratio={connect_s / submit_s:.3f}")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
