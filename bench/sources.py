"""Benchmark: the file log source on Spark, ours against ``spark.read.json`` by hand.

Usage::

    flock /tmp/heavy.lock .venv/bin/python bench/sources.py [--gb 1.0] [--runs 3]
        [--data .work/bench/sources] [--master local[2]]

Input: ``--gb`` of JSON lines (``{"sentence": "<10 words>"}``, a 1,000-word vocabulary) in 4
partition directories of 32 files each, generated once under ``--data`` (kept for later runs).

* *ours*: a :class:`~airflow_trident.spout.file_log.FileLogSpout` batch over every file — the
  begin, the emit (listing the new files: a fresh coordinator store each run, so nothing is
  remembered; the records per partition are counted by the Spark job in its own pass and
  checked against ``--gb``'s words) and ``SparkBatchProcessor.process`` of
  ``Split -> group_by(word) -> persistent_aggregate(Count)``, then a Parquet write of the staged
  DataFrame;
* *hand-written*: ``spark.read.schema("sentence STRING").json(files) -> explode(split) ->
  groupBy(word).count() -> parquet`` (the same explicit schema: no inference pass).

Both run in the same SparkSession, warmed up once, then alternate ``--runs`` times; the medians
are compared and both results checked equal. Then ours at 1x, 4x and 16x batch size (8, 32 and
128 files: 1/16, 1/4 and all of the data; 16x is the comparison's runs): seconds, seconds per
1x, and the growth against
linear (``growth_16x=`` time / (16 x the 1x time)). Printed last: ``ratio=`` (hand-written
seconds / ours).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.operation import Count, Split
from airflow_trident.runtime.spark import SparkBatchProcessor, local_session
from airflow_trident.spout.file_log import FileLogSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology

PARTITIONS = 4
FILES_PER_PARTITION = 32
WORDS = 10


def generate(data: Path, gb: float, seed: int = 11) -> Path:
    """The log under ``data/log`` (written once; a marker names its size)."""
    root, marker = data / "log", data / f"log-{gb}gb.done"
    if marker.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    rng = random.Random(seed)
    vocab = [f"{rng.choice(['w', 'W'])}ord{i:04d}" for i in range(1000)]
    lines = [
        json.dumps({"sentence": " ".join(rng.choices(vocab, k=WORDS))}) + "\n"
        for _ in range(20_000)
    ]
    block = "".join(lines).encode()
    per_file = int(gb * 2**30 / (PARTITIONS * FILES_PER_PARTITION))
    for p in range(PARTITIONS):
        (root / f"p{p}").mkdir(parents=True)
        for f in range(FILES_PER_PARTITION):
            target = root / f"p{p}" / f"{f:05d}.jsonl"
            with open(target, "wb") as out:
                left = per_file
                while left > 0:
                    cut = len(block) if left >= len(block) else block.rfind(b"\n", 0, left) + 1
                    if cut <= 0:
                        break
                    out.write(block[:cut])
                    left -= cut
    marker.write_text("ok\n")
    return root


def scaled(data: Path, root: Path, files: int) -> Path:
    """A log of the first ``files`` files of ``root`` (links), spread over the partitions."""
    target = data / f"scale-{files}"
    shutil.rmtree(target, ignore_errors=True)
    per = max(1, files // PARTITIONS)
    for p in range(PARTITIONS):
        (target / f"p{p}").mkdir(parents=True)
        for f in range(per):
            name = f"{f:05d}.jsonl"
            os.symlink(root / f"p{p}" / name, target / f"p{p}" / name)
    return target


def topology(root: Path) -> TridentTopology:
    t = TridentTopology("bench_sources")
    spout = FileLogSpout(root, ["sentence"])
    t.new_stream("sentences", spout).each(["sentence"], Split(), ["word"]).group_by(
        ["word"]
    ).persistent_aggregate(memory_state("bench_sources"), Count(), ["count"], name="counts")
    return t


def ours(spark: SparkSession, root: Path, out: str) -> int:
    """One batch over every file of ``root``; its records."""
    t = topology(root)
    steps = BatchSteps(t, MemoryCoordinatorStore(t.name))
    plan = steps.plan(int(steps.begin(None)["txid"]))
    sources = steps.emit(plan)
    processor = SparkBatchProcessor(t)
    with processor.process(spark, plan.txid, sources) as result:
        frame = result.staged["counts"].frame
        result.run(lambda: frame.write.mode("overwrite").parquet(out))
        return sum(sum(p.values()) for p in result.emitted.values())


def handwritten(spark: SparkSession, root: Path, out: str) -> int:
    files = sorted(str(p) for p in root.glob("*/*.jsonl"))
    df = spark.read.schema("sentence STRING").json(files)
    words = df.select(F.explode(F.split("sentence", r"\s+")).alias("word"))
    words = words.where(F.col("word") != "")
    words.groupBy("word").count().write.mode("overwrite").parquet(out)
    return -1


def timed(fn: Callable[..., Any], *args: Any) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--data", default=".work/bench/sources")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="2g")
    args = parser.parse_args()
    data = Path(args.data).resolve()
    start = time.perf_counter()
    root = generate(data, args.gb)
    size = sum(p.stat().st_size for p in root.glob("*/*.jsonl"))
    print(f"input: {size / 2**30:.2f} GiB of JSON lines in {root} "
          f"({time.perf_counter() - start:.1f}s to generate or find)")  # fmt: skip
    spark = local_session(
        args.master,
        shuffle_partitions=8,
        app_name="bench-sources",
        conf={"spark.driver.memory": args.driver_memory},
    )
    spark.sparkContext.setLogLevel("ERROR")
    tmp = tempfile.mkdtemp(prefix="trident_bench_sources_")
    try:
        out_a, out_b = f"{tmp}/ours", f"{tmp}/base"
        records = ours(spark, root, out_a)  # warm-up
        timed(handwritten, spark, root, out_b)
        a, b = [], []
        for _ in range(args.runs):
            a.append(timed(ours, spark, root, out_a))
            b.append(timed(handwritten, spark, root, out_b))
        totals = [spark.read.parquet(p).agg(F.sum("count")).first()[0] for p in (out_a, out_b)]
        if totals[0] != totals[1] or totals[0] != records * WORDS:
            raise SystemExit(f"results differ: words {totals}, records {records}")
        ma, mb = statistics.median(a), statistics.median(b)
        mib = size / 2**20
        print(f"records: {records}, words: {totals[0]}")
        print(f"ours: median {ma:.2f}s ({mib / ma:.1f} MiB/s) runs {[round(x, 2) for x in a]}")
        print(f"hand-written: median {mb:.2f}s ({mib / mb:.1f} MiB/s) runs "
              f"{[round(x, 2) for x in b]}")  # fmt: skip
        base_files = PARTITIONS * FILES_PER_PARTITION // 16
        scale: dict[int, float] = {}
        for factor in (1, 4, 16):
            if factor == 16:  # every file: the comparison's own runs
                scale[factor] = ma
            else:
                log = scaled(data, root, base_files * factor)
                ours(spark, log, f"{tmp}/warm{factor}")
                runs = [timed(ours, spark, log, f"{tmp}/s{factor}") for _ in range(args.runs)]
                scale[factor] = statistics.median(runs)
            print(f"batch {factor}x ({base_files * factor} files): median {scale[factor]:.2f}s, "
                  f"{scale[factor] / factor:.2f}s per 1x")  # fmt: skip
        for factor in (4, 16):
            growth = scale[factor] / scale[1] / factor
            print(f"growth_{factor}x={growth:.3f} (time / (1x time * {factor}); 1.0 is linear)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        spark.stop()
    print(f"ratio={mb / ma:.3f}")


if __name__ == "__main__":
    main()
