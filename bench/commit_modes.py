"""Benchmark: the commit of one large staged batch, in the Airflow worker vs on Spark.

A batch of ``--keys`` distinct words with partial counts is staged once (``--partitions``
Parquet files, as the process step leaves them). Each round empties the opaque PostgreSQL state
and applies the batch (txid 1) either with the worker-side applier (``commit_mode="worker"``:
this process reads every file and commits partition after partition) or with
``SparkBatchApplier`` (``commit_mode="spark"``: one Spark task per file, ``local[2]``, the
session warmed up beforehand), alternating, best of ``--runs``. The ZooKeeper compare-and-set
around both is the same and is left out. Last line: ``ratio=<spark rows/s / worker rows/s>``.

    eval "$(bash scripts/services.sh env)"
    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/commit_modes.py --keys 1000000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests/
from tests.harness import export_project_path

export_project_path()  # Airflow tasks and Spark's Python workers load tests.harness's topologies

REFERENCE = "tests.harness.topologies:bench_counts"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    url = os.environ.get("TRIDENT_PG_URL")
    if not url:
        print('TRIDENT_PG_URL unset: eval "$(bash scripts/services.sh env)"', file=sys.stderr)
        return 2
    os.environ["TRIDENT_STATE_URL"] = url  # before the JVM starts: its workers inherit it

    from airflow_trident.attempt import TransactionAttempt
    from airflow_trident.batch.steps import BatchSteps
    from airflow_trident.coordination.coordinator import BatchPlan
    from airflow_trident.coordination.memory import MemoryCoordinatorStore
    from airflow_trident.runtime.reference import cached_topology
    from airflow_trident.runtime.result import ProcessResult, StagedState
    from airflow_trident.runtime.spark.commit import SparkBatchApplier
    from airflow_trident.runtime.spark.session import local_session
    from airflow_trident.runtime.staging import StagingArea
    from tests.harness.topologies import BENCH_TABLE

    topology = cached_topology(REFERENCE)
    staging = StagingArea(tempfile.mkdtemp(prefix="trident-commit-modes-"), topology.name)
    n, parts = args.keys, args.partitions
    partitions = [[(f"word{i:08d}", 1 + i % 5) for i in range(p, n, parts)] for p in range(parts)]
    plan = BatchPlan(TransactionAttempt(1, 1), {"words": None})
    staged = StagedState("counts", "combine", ("word", "count"), partitions)
    result = ProcessResult(1, staged={"counts": staged})
    manifest = staging.write(plan.attempt, result, plan.metas)
    del partitions, result, staged
    steps = BatchSteps(topology, MemoryCoordinatorStore(topology.name), staging)
    spark = local_session("local[2]", app_name="bench-commit-modes")
    spark.sparkContext.setLogLevel("ERROR")
    spark_applier = SparkBatchApplier(spark, REFERENCE, staging, lambda txid: {})
    spark.range(0, 2, 1, 2).selectExpr("sum(id)").collect()  # warm the JVM and workers
    engine = sa.create_engine(url)

    def empty() -> None:
        with engine.begin() as conn:
            if sa.inspect(conn).has_table(BENCH_TABLE):
                conn.execute(sa.text(f'TRUNCATE "{BENCH_TABLE}"'))

    def stored() -> int:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(f'SELECT sum(val) FROM "{BENCH_TABLE}"')).scalar())

    expected = sum(1 + i % 5 for i in range(n))
    best = {"worker": float("inf"), "spark": float("inf")}
    for round_ in range(args.runs):
        for mode, applier in (("worker", steps), ("spark", spark_applier)):
            empty()
            started = time.monotonic()
            applier.apply_staged(plan, manifest)
            seconds = time.monotonic() - started
            if stored() != expected:
                print(f"{mode}: wrong state after the commit", file=sys.stderr)
                return 1
            best[mode] = min(best[mode], seconds)
            print(f"round {round_ + 1} {mode}: {seconds:.2f}s ({n / seconds:,.0f} rows/s)",
                  flush=True)  # fmt: skip
    spark.stop()
    worker, on_spark = n / best["worker"], n / best["spark"]
    print(f"best: worker {worker:,.0f} rows/s, spark {on_spark:,.0f} rows/s "
          f"({n:,} keys in {parts} staged partitions, local[2], 2 cores)")  # fmt: skip
    print(f"ratio={on_spark / worker:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
