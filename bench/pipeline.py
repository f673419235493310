"""Batches per minute through a real Airflow scheduler: 4 pipelined runs against 1 at a time.

``--process-mode connect`` (the default) processes batches on a Spark Connect server started
once before Airflow; ``submit`` runs a ``spark-submit`` per batch.

One Airflow (scheduler, DAG processor, triggerer, API server; LocalExecutor with
``--parallelism`` worker slots) on a fresh PostgreSQL metadata database serves two DAGs of the
same small word-count topology (``tests.harness.topologies:e2e_word_count``), each
with its own topology name and state table: ``max_active_batches=1`` (serial) and
``max_active_batches=4`` (pipelined). Each phase triggers ``--batches`` runs at once and waits
for them; its rate is batches / (last run's end - first run's queue time). The phases run one
after the other (serial first), so they never compete for the machine. Tasks retry once after
1 s: under load, Airflow 3.3 can fail a commit resumed from deferral (a late executor event of
the deferring try), and the retry commits nothing twice. Each phase checks its counts against
the expected ones and prints where the time went (mean task durations, scheduling gaps, how
many ``process`` tasks ran at once, the machine's CPU use).

Airflow's CPU per batch (issue 21's target: <= 1.5 CPU-s per pipelined batch, express) is
counted from ``/proc``, per component, over each phase: user + system seconds of every live
process under a component plus what its reaped children used (``cutime``/``cstime``), so a task
process that ended during the phase is counted once, in its supervisor. ``tasks`` are the
scheduler's children (LocalExecutor workers: the task supervisors) and theirs (the task
processes, which parse the DAG file and run the step); ``airflow`` adds the scheduler's own loop,
the DAG processor, the triggerer and the API server (which serves the tasks' Execution API
calls). The Spark Connect server and ZooKeeper are not Airflow: the machine-wide figure includes
them. Printed as ``cpu_s_per_batch_<phase>_<part>=`` lines.

Last line: ``ratio=<pipelined batches per minute / serial batches per minute>`` (target >= 2.5;
issue 21: >= 3.2 with the compact or express layout).

    eval "$(bash scripts/services.sh env)"   # needs ZooKeeper and PostgreSQL
    SPARK_LOCAL_IP=127.0.0.1 PATH=.venv/bin:$PATH python bench/pipeline.py --batches 8
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests/
from tests.harness import export_project_path
from tests.harness.connect import running_connect_server
from tests.harness.scheduler import AirflowCluster, RunInfo, running_airflow
from tests.harness.topologies import e2e_expected_counts as expected

export_project_path()  # Airflow tasks and Spark's Python workers load tests.harness's topologies

# The topology name comes from TRIDENT_TEST_TOPOLOGY; the DAG file sets it, so that the task
# processes (which parse this file first) and their spark-submit children see this DAG's name.
DAG = """
import os
from datetime import timedelta
os.environ["TRIDENT_TEST_TOPOLOGY"] = "{topology}"
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.topologies:e2e_word_count",
    dag_id="{dag_id}",
    schedule=None,
    max_active_batches={batches},
    spark_conn_id="spark_local",
    process_mode="{process_mode}",
    layout="{layout}",
    spark_connect_conn_id="bench_connect",
    retries=1,
    retry_delay=timedelta(seconds=1),
)
"""
TASKS = ("wait_ready", "begin", "process", "commit", "success", "run")


@dataclass(frozen=True)
class Phase:
    name: str
    dag_id: str
    topology: str
    max_active: int


@dataclass(frozen=True)
class Result:
    phase: Phase
    batches: int
    seconds: float
    correct: bool
    breakdown: str

    @property
    def per_minute(self) -> float:
        return 60.0 * self.batches / self.seconds


def breakdown(af: AirflowCluster, phase: Phase, runs: list[RunInfo], span: float) -> str:
    """Mean task durations, the gaps between a run's tasks, and process concurrency."""
    durations: dict[str, list[float]] = defaultdict(list)
    gaps, run_seconds = [], []
    per_run = defaultdict(list)
    tis = af.task_instances(phase.dag_id)
    retried = sorted(f"{t.task_id.removeprefix('batch.')}" for t in tis if t.try_number > 1)
    for ti in tis:
        if ti.start_date and ti.end_date:
            name = ti.task_id.removeprefix("batch.")
            durations[name].append((ti.end_date - ti.start_date).total_seconds())
            per_run[ti.run_id].append(ti)
    for run in runs:
        if not (run.start_date and run.end_date):
            continue
        total = (run.end_date - run.start_date).total_seconds()
        run_seconds.append(total)
        busy = sum((t.end_date - t.start_date).total_seconds() for t in per_run[run.run_id]
                   if t.start_date and t.end_date)  # fmt: skip
        gaps.append(total - busy)
    mean = {k: statistics.mean(v) for k, v in durations.items()}
    tasks = " ".join(f"{k}={mean[k]:.1f}s" for k in TASKS if k in mean)
    processing = durations["process"] or durations["run"]  # express: the batch's one task
    concurrency = sum(processing) / span if span else 0.0
    queued = [
        (r.start_date - r.queued_at).total_seconds() for r in runs if r.start_date and r.queued_at
    ]
    return (
        f"  mean task time: {tasks}\n"
        f"  mean run time {statistics.mean(run_seconds):.1f}s, of which between tasks "
        f"(scheduling, deferral hand-offs) {statistics.mean(gaps):.1f}s; mean wait before a run "
        f"starts {statistics.mean(queued):.1f}s\n"
        f"  process tasks running at once, on average: {concurrency:.2f}; "
        f"tasks retried: {retried or 'none'}"
    )


def cpu_busy_seconds() -> float:
    """Machine-wide CPU seconds spent busy (all processes, all cores) since boot."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _proc_stats() -> dict[int, tuple[int, float, float]]:
    """pid -> (ppid, own user+system seconds, reaped children's user+system seconds)."""
    tick = os.sysconf("SC_CLK_TCK")
    stats = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        ppid, utime, stime, cutime, cstime = (int(fields[i]) for i in (1, 11, 12, 13, 14))
        stats[int(entry)] = (ppid, (utime + stime) / tick, (cutime + cstime) / tick)
    return stats


def airflow_cpu_seconds(af: AirflowCluster) -> dict[str, float]:
    """CPU seconds used so far by each Airflow component's process tree (see the module doc):
    ``tasks`` (the scheduler's descendants and what they reaped), ``scheduler`` (its own loop),
    ``dag-processor``, ``triggerer``, ``api-server`` (each with its descendants)."""
    stats = _proc_stats()
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _, _) in stats.items():
        children[ppid].append(pid)

    def tree(pid: int) -> float:
        _, own, reaped = stats.get(pid, (0, 0.0, 0.0))
        return own + reaped + sum(tree(c) for c in children[pid])

    cpu = {}
    for name, process in af.processes.items():
        if name == "scheduler":
            _, own, reaped = stats.get(process.pid, (0, 0.0, 0.0))
            cpu["scheduler"] = own
            cpu["tasks"] = reaped + sum(tree(c) for c in children[process.pid])
        else:
            cpu[name] = tree(process.pid)
    return cpu


def run_phase(af: AirflowCluster, phase: Phase, batches: int, state_db: Path) -> Result:
    load_before = os.getloadavg()[0]
    busy_before = cpu_busy_seconds()
    airflow_before = airflow_cpu_seconds(af)
    started = time.monotonic()
    run_ids = [af.trigger(phase.dag_id) for _ in range(batches)]
    runs = af.wait_for_runs(phase.dag_id, run_ids, timeout_s=120 + 90 * batches)
    wall = time.monotonic() - started
    busy = cpu_busy_seconds() - busy_before
    airflow_after = airflow_cpu_seconds(af)
    per_batch = {k: (airflow_after[k] - airflow_before.get(k, 0.0)) / batches
                 for k in airflow_after}  # fmt: skip
    per_batch["airflow"] = sum(per_batch.values())
    failed = [r.run_id for r in runs if r.state != "success"]
    if failed:
        print(af.describe(phase.dag_id))
        msg = f"{phase.name}: runs failed: {failed}"
        raise RuntimeError(msg)
    first = min(r.queued_at for r in runs if r.queued_at)
    last = max(r.end_date for r in runs if r.end_date)
    seconds = (last - first).total_seconds()
    with sqlite3.connect(state_db) as db:
        counts = dict(db.execute(f'SELECT word, val FROM "{phase.topology}"').fetchall())
    correct = counts == expected(batches)
    print(
        f"{phase.name} (max_active_batches={phase.max_active}): {batches} batches in "
        f"{seconds:.1f}s (wall {wall:.1f}s) = {60 * batches / seconds:.2f} batches/min; "
        f"counts exact: {correct}; load avg {load_before:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    cores = os.cpu_count() or 1
    detail = breakdown(af, phase, runs, seconds) + (
        f"\n  machine CPU busy {100 * busy / (wall * cores):.0f}% of {cores} cores "
        f"({busy / batches:.1f} CPU-s per batch, all processes)\n"
        f"  Airflow CPU-s per batch: {per_batch['airflow']:.2f} ("
        + ", ".join(f"{k} {v:.2f}" for k, v in per_batch.items() if k != "airflow")
        + ")"
    )
    print(detail, flush=True)
    for part in ("airflow", "tasks"):
        print(f"cpu_s_per_batch_{phase.name}_{part}={per_batch[part]:.2f}")
    print(f"cpu_s_per_batch_{phase.name}_machine={busy / batches:.2f}", flush=True)
    return Result(phase, batches, seconds, correct, detail)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=8, help="runs per phase (<= 10: data)")
    parser.add_argument("--parallelism", type=int, default=4, help="[core] parallelism")
    parser.add_argument(
        "--process-mode",
        choices=("submit", "connect"),
        default="connect",
        help="spark-submit per batch, or a Spark Connect server started once (default)",
    )
    parser.add_argument(
        "--layout",
        choices=("standard", "compact", "express"),
        default="compact",
        help="the DAG layout: 5 tasks per batch, 3 (default) or 1 (see trident_dag)",
    )
    args = parser.parse_args()
    pg_url = os.environ.get("TRIDENT_PG_URL")
    zk_hosts = os.environ.get("TRIDENT_ZK_HOSTS", "127.0.0.1:2181")
    if not pg_url:
        print('TRIDENT_PG_URL unset: eval "$(bash scripts/services.sh env)"', file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="trident-pipeline-"))
    dags = work / "dags"
    dags.mkdir()
    tag = uuid.uuid4().hex[:8]
    phases = [
        Phase("serial", "bench_pipeline_serial", f"bench_serial_{tag}", 1),
        Phase("pipelined", "bench_pipeline_pipelined", f"bench_pipelined_{tag}", 4),
    ]
    for p in phases:
        (dags / f"{p.dag_id}.py").write_text(
            DAG.format(
                topology=p.topology,
                dag_id=p.dag_id,
                batches=p.max_active,
                process_mode=args.process_mode,
                layout=args.layout,
            )
        )
    host, _, port = zk_hosts.partition(":")
    state_db = work / "state.db"
    env = {
        "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT": json.dumps(
            {"conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
             "extra": {"root": "/trident_bench_pipeline"}}),
        "TRIDENT_STATE_URL": f"sqlite:///{state_db}",
        "TRIDENT_STAGING_ROOT": str(work / "staging"),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }  # fmt: skip
    print(f"work dir {work}; {os.cpu_count()} cores; parallelism {args.parallelism}; "
          f"process mode {args.process_mode}; layout {args.layout}", flush=True)  # fmt: skip
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if args.process_mode == "connect":
            server = running_connect_server(work / "connect-server", quick_jit=False)
            url = stack.enter_context(server)
            server_host, _, server_port = url.rpartition(":")
            env["AIRFLOW_CONN_BENCH_CONNECT"] = json.dumps(
                {"conn_type": "spark_connect", "host": server_host, "port": int(server_port)}
            )
        af = stack.enter_context(running_airflow(
            work, pg_url=pg_url, dags_folder=dags, env=env, parallelism=args.parallelism,
            expect_dags=[p.dag_id for p in phases],
        ))  # fmt: skip
        print(f"airflow ready in {time.monotonic() - started:.1f}s", flush=True)
        for p in phases:
            af.unpause(p.dag_id)
        results = [run_phase(af, p, args.batches, state_db) for p in phases]
    serial, pipelined = results
    print(f"serial:    {serial.per_minute:.2f} batches/min")
    print(f"pipelined: {pipelined.per_minute:.2f} batches/min")
    if not all(r.correct for r in results):
        print("WARNING: counts differ from the expected ones (see 'counts exact' above)")
    print(f"ratio={pipelined.per_minute / serial.per_minute:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
