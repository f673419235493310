"""Benchmark: one txid's staged rows committed into a Delta table, Python writer vs Spark's.

A batch of ``N`` rows ``(key, user, n)`` is staged once per size (``--partitions`` Parquet
files, as the process step leaves them) for the ``delta_state`` append sink of
``tests.harness.topologies:bench_delta_events``. Each round commits it (txid 1) into a new
Delta table twice, timing only the commit:

* ``python``: the worker-side commit (``commit_mode="worker"``, the default): this process
  reads every staged file and appends partition after partition with delta-rs
  (``BatchSteps.apply_staged``);
* ``spark``: ``SparkBatchApplier`` on a ``local[2]`` session running Delta's connector
  (delta-spark 4.4.0): the product's lakehouse path, each partition appended by Spark's Delta
  writer with its ``txnAppId``/``txnVersion`` record, then the app-level record by delta-rs.

The sides alternate which goes first; round 1 of each size is a warm-up (not counted). After
each commit the table must hold exactly ``N`` rows (Parquet footers of its files), the txid
must be recorded as the sink records it (``<app>.p<i>of<n>`` = 1 for every partition,
``<app>`` = 1 * 4096 + n), and the data commits must come from the expected engine. The ZooKeeper
compare-and-set around both is the same and left out. Per size: each side's median and
spread (min-max) and a last line ``ratio=<spark s / python s>`` (below 1: Spark's writer is
faster); at the end the crossover, the smallest size at which Spark's writer wins.

    flock /tmp/heavy.lock timeout 900 .venv/bin/python bench/lakehouse_commit.py \\
        --sizes 100000,1000000,10000000

Needs Delta's jars (``bash scripts/jars.sh delta``). Iceberg has no Spark commit path (no
Iceberg Spark runtime runs on Spark 4.2: docs/sinks/iceberg.md), so it is not benched here.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests/
from tests.harness import export_project_path

export_project_path()  # Spark's Python workers load tests.harness's topologies

REFERENCE = "tests.harness.topologies:bench_delta_events"
APP_ID = "bench_lakehouse_commit.events"
COUNT_BASE = 4096  # the app-level version's encoding (airflow_trident/state/delta.py)
SIDES = ("python", "spark")


def stage(staging: Any, rows: int, parts: int) -> dict[str, Any]:
    """Stage txid 1 attempt 1: ``rows`` rows in ``parts`` uncompressed Parquet files (what
    ``StagingArea.write`` leaves, built column-wise: 10M rows as Python tuples take minutes)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from airflow_trident.attempt import TransactionAttempt

    attempt = TransactionAttempt(1, 1)
    directory = Path(staging.path(attempt)) / "events"
    directory.mkdir(parents=True, exist_ok=True)
    files = []
    bounds = [rows * p // parts for p in range(parts + 1)]
    for p in range(parts):
        ids = np.arange(bounds[p], bounds[p + 1], dtype=np.int64)
        digits = pc.utf8_lpad(pc.cast(pa.array(ids), pa.string()), width=8, padding="0")
        table = pa.table(
            {
                "key": pc.binary_join_element_wise("k", digits, ""),
                "user": pa.array(ids % 1000),
                "n": pa.array(ids * 7),
            }
        )
        path = str(directory / f"part-{p:05d}.parquet")
        pq.write_table(table, path, compression="none")
        files.append({"path": path, "rows": table.num_rows})
    states = {
        "events": {
            "kind": "update",
            "fields": ["key", "user", "n"],
            "files": files,
            "partitions": parts,
        }
    }
    manifest: dict[str, Any] = staging.write_manifest(
        attempt, {"rows": {"p0": rows}}, states, {"rows": None}, "local"
    )
    return manifest


def check(path: str, rows: int, parts: int, side: str) -> str | None:
    """What is wrong with the table after one commit of txid 1 (``None``: nothing)."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    table = DeltaTable(path)
    held = sum(pq.ParquetFile(uri).metadata.num_rows for uri in table.file_uris())
    if held != rows:
        return f"{side}: the table holds {held:,} rows, expected {rows:,}"
    app = table.transaction_version(APP_ID)
    if app != COUNT_BASE + parts:
        return f"{side}: app-level version {app}, expected {COUNT_BASE + parts} (txid 1)"
    versions = [table.transaction_version(f"{APP_ID}.p{i}of{parts}") for i in range(parts)]
    if versions != [1] * parts:
        return f"{side}: partition versions {versions}, expected txid 1 for each"
    by_spark = sum(str(h.get("engineInfo", "")).startswith("Apache-Spark") for h in table.history())
    if by_spark != (parts if side == "spark" else 0):
        return f"{side}: {by_spark} commits by Spark's Delta writer in the history"
    return None


def appliers(spark: Any, staging: Any) -> dict[str, Callable[[Any, Mapping[str, Any]], Any]]:
    """Each side's commit of a staged batch (topology loaded again: its table path is new)."""
    from airflow_trident.batch.steps import BatchSteps
    from airflow_trident.coordination.memory import MemoryCoordinatorStore
    from airflow_trident.runtime.reference import cached_topology
    from airflow_trident.runtime.spark.commit import SparkBatchApplier

    cached_topology.cache_clear()
    topology = cached_topology(REFERENCE)
    worker = BatchSteps(topology, MemoryCoordinatorStore(topology.name), staging)
    on_spark = SparkBatchApplier(spark, REFERENCE, staging, lambda txid: {})
    return {"python": worker.apply_staged, "spark": on_spark.apply_staged}


def bench_size(
    spark: Any, work: Path, rows: int, parts: int, rounds: int
) -> dict[str, list[float]]:
    """The timed (post-warm-up) seconds of each side at ``rows`` rows."""
    from airflow_trident.attempt import TransactionAttempt
    from airflow_trident.coordination.coordinator import BatchPlan
    from airflow_trident.runtime.staging import StagingArea
    from tests.harness.topologies import BENCH_DELTA_ENV

    staging = StagingArea(str(work / f"staging-{rows}"), "bench_lakehouse_commit")
    manifest = stage(staging, rows, parts)
    plan = BatchPlan(TransactionAttempt(1, 1), {"rows": None})
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for round_ in range(rounds):
        for side in SIDES if round_ % 2 == 0 else SIDES[::-1]:
            path = str(work / f"table-{rows}-{round_}-{side}")
            os.environ[BENCH_DELTA_ENV] = path
            apply = appliers(spark, staging)[side]
            started = time.perf_counter()
            apply(plan, manifest)
            seconds = time.perf_counter() - started
            wrong = check(path, rows, parts, side)
            if wrong:
                raise SystemExit(f"round {round_ + 1}: {wrong}")
            shutil.rmtree(path)
            label = "warm-up" if round_ == 0 else "timed"
            print(f"  {rows:>11,} rows round {round_ + 1} ({label}) {side:6}: {seconds:7.2f} s "
                  f"({rows / seconds:>10,.0f} rows/s)", flush=True)  # fmt: skip
            if round_:
                times[side].append(seconds)
    shutil.rmtree(staging.root)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000,10000000")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4, help="per size, the first a warm-up")
    parser.add_argument("--work", default=None, help="directory for staging and tables")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds: at least 2 (the first is a warm-up)")
    sizes = sorted(int(s) for s in args.sizes.split(","))
    work = Path(tempfile.mkdtemp(prefix="bench-lakehouse-commit-", dir=args.work))

    from tests.harness.delta_spark import lakehouse_session

    spark = lakehouse_session()
    print(f"sizes {sizes}, {args.partitions} commit partitions, {args.rounds} alternating "
          f"rounds (first a warm-up), local[2], work dir {work}", flush=True)  # fmt: skip
    ratios: dict[int, float] = {}
    try:
        for rows in sizes:
            started = time.monotonic()
            times = bench_size(spark, work, rows, args.partitions, args.rounds)
            medians = {side: statistics.median(times[side]) for side in SIDES}
            for side in SIDES:
                print(f"{rows:,} rows {side:6}: median {medians[side]:.2f} s (spread "
                      f"{min(times[side]):.2f}-{max(times[side]):.2f} s, "
                      f"{len(times[side])} rounds)")  # fmt: skip
            print(f"({rows:,} rows: {time.monotonic() - started:.0f} s with staging)")
            ratios[rows] = medians["spark"] / medians["python"]
            print(f"ratio={ratios[rows]:.2f} ({rows:,} rows)", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    wins = [rows for rows, ratio in ratios.items() if ratio < 1]
    if wins:
        print(f"crossover: Spark's writer wins from {min(wins):,} rows")
    else:
        print(f"crossover: none up to {max(ratios):,} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
