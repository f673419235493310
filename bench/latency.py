"""Per-batch latency of a small batch through the DAG, against a bare spark-submit.

Measured in the same run, alternating: (a) one DAG run of a small word-count batch
(``airflow dags test``: sensor, begin, spark-submit, commit, success); (b) ``spark-submit`` of a
PySpark job that only starts a session and runs one trivial query. Median of ``--runs`` each.
Last line: ``ratio=<dag run seconds / bare spark-submit seconds>`` (target <= 1.3).

    python bench/latency.py --runs 3        # needs ZooKeeper: bash scripts/services.sh start
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from airflow_trident.testing.airflow import prepare_airflow_home, run_dag_test

DAG = """
from airflow_trident.dag import trident_dag
dag = trident_dag("airflow_trident.testing.topologies:e2e_word_count", dag_id="bench_latency",
                  spark_conn_id="spark_local", retries=0)
"""
NOOP = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("noop").getOrCreate()
spark.range(1).count()
spark.stop()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="trident-latency-"))
    (work / "dags").mkdir()
    (work / "dags" / "bench.py").write_text(DAG)
    (work / "noop.py").write_text(NOOP)
    host, _, port = os.environ.get("TRIDENT_ZK_HOSTS", "127.0.0.1:2181").partition(":")
    env = {
        "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT": json.dumps(
            {"conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
             "extra": {"root": "/trident_bench"}}),
        "TRIDENT_STATE_URL": f"sqlite:///{work / 'state.db'}",
        "TRIDENT_STAGING_ROOT": str(work / "staging"),
        "TRIDENT_TEST_TOPOLOGY": f"bench_{uuid.uuid4().hex[:8]}",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }  # fmt: skip
    home = prepare_airflow_home(work / "airflow", dags_folder=work / "dags")
    spark_submit = str(Path(sys.executable).parent / "spark-submit")
    bare_env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    dag_times, bare_times = [], []
    for i in range(args.runs):
        start = time.monotonic()
        result = run_dag_test("bench_latency", home=home, extra_env=env, timeout_s=300)
        dag_times.append(time.monotonic() - start)
        if not result.ok:
            print(result.describe())
            return 1
        start = time.monotonic()
        subprocess.run([spark_submit, "--master", "local[2]", str(work / "noop.py")],
                       check=True, env=bare_env, capture_output=True)  # fmt: skip
        bare_times.append(time.monotonic() - start)
        print(f"run {i + 1}: dag run {dag_times[-1]:.1f}s, bare spark-submit {bare_times[-1]:.1f}s")
    dag, bare = statistics.median(dag_times), statistics.median(bare_times)
    print(f"median: dag run {dag:.1f}s per batch, bare spark-submit {bare:.1f}s")
    print(f"ratio={dag / bare:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
