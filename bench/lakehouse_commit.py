"""Benchmark: one txid's staged rows committed into a Delta or Iceberg table, Python writer vs
Spark's.

A batch of ``N`` rows ``(key, user, n)`` is staged once per size (``--partitions`` Parquet
files, as the process step leaves them) for the append sink of
``tests.harness.topologies:bench_delta_events`` (``--format delta``, the default) or
``bench_iceberg_events`` (``--format iceberg``: a SQL catalog in SQLite). Each round commits it
(txid 1) into a new table twice, timing only the commit:

* ``python``: the worker-side commit (``commit_mode="worker"``, the default): this process
  reads every staged file and appends partition after partition with delta-rs or pyiceberg
  (``BatchSteps.apply_staged``);
* ``spark``: ``SparkBatchApplier`` on a ``local[2]`` session running the format's connector
  (delta-spark 4.3.1, iceberg-spark-runtime-4.1 1.12.0): the product's lakehouse path. Delta:
  each partition appended by Spark's Delta writer with its ``txnAppId``/``txnVersion`` record,
  then the app-level record by delta-rs. Iceberg: each partition staged by Spark's Iceberg
  writer and published with its txid properties by one pyiceberg commit.

The sides alternate which goes first; round 1 of each size is a warm-up (not counted). After
each commit the table must hold exactly ``N`` rows (Delta: Parquet footers of its files;
Iceberg: its snapshot's ``total-records``), the txid must be recorded as the sink records it
(Delta: ``<app>.p<i>of<n>`` = 1 for every partition, ``<app>`` = 1 * 4096 + n; Iceberg: the
``trident.txid.<app>...`` properties), and the data commits must come from the expected
engine. The ZooKeeper compare-and-set around both is the same and left out. Per size: each
side's median and spread (min-max) and a last line ``ratio=<spark s / python s>`` (below 1:
Spark's writer is faster); at the end the crossover, the smallest size at which Spark's writer
wins.

    flock /tmp/heavy.lock timeout 900 .venv/bin/python bench/lakehouse_commit.py \\
        --sizes 100000,1000000,10000000

Needs the format's jars (``bash scripts/jars.sh delta`` or ``iceberg``; resolved if missing).
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

REFERENCES = {
    "delta": "tests.harness.topologies:bench_delta_events",
    "iceberg": "tests.harness.topologies:bench_iceberg_events",
}
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
    """What is wrong with the Delta table after one commit of txid 1 (``None``: nothing)."""
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


def check_iceberg(table_name: str, rows: int, parts: int, side: str) -> str | None:
    """What is wrong with the Iceberg table after one commit of txid 1 (``None``: nothing)."""
    from airflow_trident.runtime.reference import cached_topology

    topology = cached_topology(REFERENCES["iceberg"])
    table = topology.nodes[topology.states["events"]].factory.load_table()
    held = int(table.current_snapshot().summary["total-records"])
    if held != rows:
        return f"{side}: the table holds {held:,} rows, expected {rows:,}"
    props = table.properties
    want = {f"trident.txid.{APP_ID}.p{i}of{parts}": "1" for i in range(parts)}
    want[f"trident.txid.{APP_ID}"] = f"1/{parts}"
    got = {k: props.get(k) for k in want}
    if got != want:
        return f"{side}: txid properties {got}, expected {want}"
    by_spark = sum("spark.app.id" in s.summary.additional_properties for s in table.snapshots())
    if by_spark != (parts if side == "spark" else 0):
        return f"{side}: {by_spark} snapshots by Spark's Iceberg writer"
    return None


def appliers(
    spark: Any, staging: Any, reference: str
) -> dict[str, Callable[[Any, Mapping[str, Any]], Any]]:
    """Each side's commit of a staged batch (topology loaded again: its table path is new)."""
    from airflow_trident.batch.steps import BatchSteps
    from airflow_trident.coordination.memory import MemoryCoordinatorStore
    from airflow_trident.runtime.reference import cached_topology
    from airflow_trident.runtime.spark.commit import SparkBatchApplier

    cached_topology.cache_clear()
    topology = cached_topology(reference)
    worker = BatchSteps(topology, MemoryCoordinatorStore(topology.name), staging)
    on_spark = SparkBatchApplier(spark, reference, staging, lambda txid: {})
    return {"python": worker.apply_staged, "spark": on_spark.apply_staged}


def bench_size(
    spark: Any, work: Path, rows: int, parts: int, rounds: int, lake: str
) -> dict[str, list[float]]:
    """The timed (post-warm-up) seconds of each side at ``rows`` rows."""
    from airflow_trident.attempt import TransactionAttempt
    from airflow_trident.coordination.coordinator import BatchPlan
    from airflow_trident.runtime.staging import StagingArea
    from tests.harness.topologies import BENCH_DELTA_ENV, BENCH_ICEBERG_ENV

    staging = StagingArea(str(work / f"staging-{rows}"), "bench_lakehouse_commit")
    manifest = stage(staging, rows, parts)
    plan = BatchPlan(TransactionAttempt(1, 1), {"rows": None})
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for round_ in range(rounds):
        for side in SIDES if round_ % 2 == 0 else SIDES[::-1]:
            path = str(work / f"table-{rows}-{round_}-{side}")
            name = f"bench.t{rows}_{round_}_{side}"
            os.environ[BENCH_DELTA_ENV] = path
            os.environ[BENCH_ICEBERG_ENV] = name
            apply = appliers(spark, staging, REFERENCES[lake])[side]
            started = time.perf_counter()
            apply(plan, manifest)
            seconds = time.perf_counter() - started
            if lake == "delta":
                wrong = check(path, rows, parts, side)
                shutil.rmtree(path)
            else:
                wrong = check_iceberg(name, rows, parts, side)
            if wrong:
                raise SystemExit(f"round {round_ + 1}: {wrong}")
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
    parser.add_argument("--format", choices=("delta", "iceberg"), default="delta")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds: at least 2 (the first is a warm-up)")
    sizes = sorted(int(s) for s in args.sizes.split(","))
    work = Path(tempfile.mkdtemp(prefix="bench-lakehouse-commit-", dir=args.work))

    if args.format == "delta":
        from tests.harness.delta_spark import lakehouse_session as session
    else:  # the catalog: a SQLite file in the work dir, the warehouse beside it
        from tests.harness.iceberg_spark import iceberg_session as session

        os.environ["TRIDENT_STATE_URL"] = f"sqlite:///{work}/catalog.db"
    spark = session()
    print(f"{args.format}: sizes {sizes}, {args.partitions} commit partitions, {args.rounds} "
          f"alternating rounds (first a warm-up), local[2], work {work}", flush=True)  # fmt: skip
    ratios: dict[int, float] = {}
    try:
        for rows in sizes:
            started = time.monotonic()
            times = bench_size(spark, work, rows, args.partitions, args.rounds, args.format)
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
