"""Per-batch latency of a small batch through the DAG, against a bare spark-submit.

Measured in the same run, alternating, median of ``--runs`` each:

* (a) one DAG run of a small word-count batch, ``process_mode="submit"`` (a ``spark-submit``
  per batch), through ``airflow dags test``;
* (b) the same with ``process_mode="connect"`` (the processing phase on a Spark Connect server
  started once, before the measurements — a long-lived server, as in production);
* (c) ``spark-submit`` of a PySpark job that only starts a session and runs one trivial query.
* (d) the same small batch's lifecycle without Airflow between the steps, in this process
  (readiness, begin, processing on the Connect server with a new session, commit, success): the
  limit the DAG approaches (``phases no_airflow``).

A batch's wall time is sensor -> commit: from the readiness check's start (the ``wait_ready``
task, or the ``begin`` task of ``--layout compact``, the default) to the ``commit`` task's end
(the metadata database's timestamps), with the median seconds of each task and of the gaps
between them (``phases <mode>: ...``); the whole ``airflow dags test`` command (CLI start and
DAG parsing included) is printed too. ``latency_connect_s=`` is the Connect mode's median
(target <= 3 s). Last line:
``ratio=<connect-mode sensor->commit seconds / bare spark-submit seconds>`` (target <= 1.3); the
submit-mode ratio is printed before it.

    python bench/latency.py --runs 3        # needs ZooKeeper: bash scripts/services.sh start
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests/
from tests.harness import export_project_path
from tests.harness.airflow import AirflowHome, prepare_airflow_home, run_dag_test
from tests.harness.connect import running_connect_server

export_project_path()  # Airflow tasks and Spark's Python workers load tests.harness's topologies

DAG = """
from airflow_trident.dag import trident_dag
dag = trident_dag("tests.harness.topologies:e2e_word_count", dag_id="bench_latency",
                  spark_conn_id="spark_local", retries=0, layout="{submit_layout}")
connect = trident_dag("tests.harness.topologies:e2e_word_count",
                      dag_id="bench_latency_connect", process_mode="connect",
                      spark_connect_conn_id="bench_connect", retries=0, layout="{layout}")
"""
PHASES = ("wait_ready", "ready", "begin", "process", "commit", "success", "run")
NOOP = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("noop").getOrCreate()
spark.range(1).count()
spark.stop()
"""


def sensor_to_commit(
    home: AirflowHome, dag_id: str, run_id: str, phases: dict[str, list[float]]
) -> float:
    """Seconds from the first task's start (the readiness check: ``wait_ready``, or the compact
    layout's ``begin``) to the commit's end, from the metadata database; each task's seconds
    are added to ``phases`` (``gaps``: the time between tasks)."""
    with sqlite3.connect(home.metadata_db) as db:
        rows = db.execute(
            "SELECT task_id, start_date, end_date FROM task_instance "
            "WHERE dag_id = ? AND run_id = ?",
            (dag_id, run_id),
        ).fetchall()
    spans = {
        task.removeprefix("batch."): (datetime.fromisoformat(a), datetime.fromisoformat(b))
        for task, a, b in rows
        if a and b
    }
    if "run" in spans:  # the express layout: the batch is one task
        first, end = spans["run"]
    else:
        first = spans.get("wait_ready", spans["begin"])[0]
        end = spans["commit"][1]
    busy = 0.0
    for name, (a, b) in spans.items():
        phases[name].append((b - a).total_seconds())
        if name != "success":
            busy += (b - a).total_seconds()
    total = (end - first).total_seconds()
    phases["gaps"].append(total - busy)
    return total


def run_batch(
    home: AirflowHome, dag_id: str, env: dict[str, str], phases: dict[str, list[float]]
) -> tuple[float, float]:
    """One DAG run: (sensor -> commit seconds, whole command seconds)."""
    started = time.monotonic()
    result = run_dag_test(dag_id, home=home, extra_env=env, timeout_s=300)
    total = time.monotonic() - started
    if not result.ok or result.run_id is None:
        raise RuntimeError(result.describe())
    return sensor_to_commit(home, dag_id, result.run_id, phases), total


def no_airflow_batch(url: str, env: dict[str, str], phases: dict[str, list[float]]) -> float:
    """The same small batch's lifecycle without Airflow between the steps (what the express
    task does, in this process): readiness, begin, process on the Connect server (a new session,
    as a task opens), commit, success; seconds, and each step's into ``phases``."""
    from airflow_trident.batch.lifecycle import zookeeper_batch_steps
    from airflow_trident.batch.on_spark import process_on_spark
    from airflow_trident.coordination.client import ZkConfig, connect
    from airflow_trident.runtime.reference import load_topology
    from airflow_trident.runtime.spark.session import remote_session

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        topology = load_topology("tests.harness.topologies:e2e_word_count")
        started = time.monotonic()
        zk = json.loads(env["AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT"])
        client = connect(ZkConfig(hosts=f"{zk['host']}:{zk['port']}", root=zk["extra"]["root"]))
        try:
            steps = zookeeper_batch_steps(
                topology, client, root=zk["extra"]["root"],
                staging_root=env["TRIDENT_STAGING_ROOT"], state_url=env["TRIDENT_STATE_URL"],
            )  # fmt: skip
            marks = [("ready", lambda: steps.is_ready())]
            txid = 0

            def begin() -> None:
                nonlocal txid
                txid = int(steps.begin(f"no_airflow_{uuid.uuid4().hex[:8]}")["txid"])

            def process() -> None:
                with remote_session(url) as spark:
                    process_on_spark(steps, spark, txid, 0.0)

            marks += [("begin", begin), ("process", process),
                      ("commit", lambda: steps.commit(txid)),
                      ("success", lambda: steps.success(txid))]  # fmt: skip
            for name, step in marks:
                at = time.monotonic()
                step()
                phases[name].append(time.monotonic() - at)
        finally:
            client.stop()
            client.close()
        return time.monotonic() - started
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def show_phases(mode: str, phases: dict[str, list[float]]) -> str:
    """``phases <mode>: begin=0.4s process=2.1s ...`` (medians; parsed by bench/run_all.py)."""
    names = [n for n in (*PHASES, "gaps") if phases.get(n)]
    return f"phases {mode}: " + " ".join(f"{n}={statistics.median(phases[n]):.2f}s" for n in names)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--layout",
        choices=("standard", "compact", "express"),
        default="compact",
        help="the DAG layout: 5 tasks per batch, 3 (default) or 1 (see trident_dag; express "
        "is Connect-only: the submit-mode DAG is then compact)",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="trident-latency-"))
    (work / "dags").mkdir()
    submit_layout = "compact" if args.layout == "express" else args.layout
    (work / "dags" / "bench.py").write_text(
        DAG.format(layout=args.layout, submit_layout=submit_layout)
    )
    (work / "noop.py").write_text(NOOP)
    host, _, port = os.environ.get("TRIDENT_ZK_HOSTS", "127.0.0.1:2181").partition(":")
    zookeeper = {"conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
                 "extra": {"root": "/trident_bench"}}  # fmt: skip
    base = {
        "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT": json.dumps(zookeeper),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }

    def deployment(name: str) -> dict[str, str]:
        return {
            **base,
            "TRIDENT_STATE_URL": f"sqlite:///{work / name}.db",
            "TRIDENT_STAGING_ROOT": str(work / name / "staging"),
            "TRIDENT_TEST_TOPOLOGY": f"bench_{name}_{uuid.uuid4().hex[:8]}",
        }

    submit_env, connect_env = deployment("submit"), deployment("connect")
    home = prepare_airflow_home(work / "airflow", dags_folder=work / "dags")
    spark_submit = str(Path(sys.executable).parent / "spark-submit")
    bare_env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    names = ("submit", "submit_cmd", "connect", "connect_cmd", "bare", "no_airflow")
    times: dict[str, list[float]] = {k: [] for k in names}
    phases: dict[str, dict[str, list[float]]] = {
        mode: defaultdict(list) for mode in ("submit", "connect", "no_airflow")
    }
    bare_env_topology = deployment("no_airflow")
    with running_connect_server(work / "connect-server", quick_jit=False) as url:
        server_host, _, server_port = url.rpartition(":")
        connect_env["AIRFLOW_CONN_BENCH_CONNECT"] = json.dumps(
            {"conn_type": "spark_connect", "host": server_host, "port": int(server_port)}
        )
        for i in range(args.runs):
            span, total = run_batch(home, "bench_latency", submit_env, phases["submit"])
            times["submit"].append(span)
            times["submit_cmd"].append(total)
            span, total = run_batch(home, "bench_latency_connect", connect_env, phases["connect"])
            times["connect"].append(span)
            times["connect_cmd"].append(total)
            started = time.monotonic()
            subprocess.run([spark_submit, "--master", "local[2]", str(work / "noop.py")],
                           check=True, env=bare_env, capture_output=True)  # fmt: skip
            times["bare"].append(time.monotonic() - started)
            times["no_airflow"].append(no_airflow_batch(url, bare_env_topology,
                                                        phases["no_airflow"]))  # fmt: skip
            print(f"run {i + 1}: submit mode {times['submit'][-1]:.1f}s "
                  f"(command {times['submit_cmd'][-1]:.1f}s), connect mode "
                  f"{times['connect'][-1]:.1f}s (command {times['connect_cmd'][-1]:.1f}s), "
                  f"bare spark-submit {times['bare'][-1]:.1f}s, no Airflow "
                  f"{times['no_airflow'][-1]:.2f}s", flush=True)  # fmt: skip
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"median sensor->commit: submit mode {med['submit']:.1f}s, connect mode "
          f"{med['connect']:.1f}s; whole command: {med['submit_cmd']:.1f}s / "
          f"{med['connect_cmd']:.1f}s; bare spark-submit {med['bare']:.1f}s")  # fmt: skip
    print(show_phases("submit", phases["submit"]))
    print(show_phases("connect", phases["connect"]))
    print(show_phases("no_airflow", phases["no_airflow"]))
    spread = {k: (min(v), max(v)) for k, v in times.items()}
    print(f"connect mode ({args.layout}) {med['connect']:.2f}s "
          f"[{spread['connect'][0]:.2f}-{spread['connect'][1]:.2f}], the same lifecycle without "
          f"Airflow {med['no_airflow']:.2f}s "
          f"[{spread['no_airflow'][0]:.2f}-{spread['no_airflow'][1]:.2f}]: "
          f"x{med['connect'] / med['no_airflow']:.2f}")  # fmt: skip
    print(f"latency_connect_s={med['connect']:.2f}")
    print(f"ratio_submit={med['submit'] / med['bare']:.2f}")
    print(f"ratio={med['connect'] / med['bare']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
