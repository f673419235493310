"""Benchmark: the processing phase of word count on Spark, ours against hand-written PySpark.

Usage::

    flock /tmp/heavy.lock .venv/bin/python bench/processing.py [--sentences 500000] [--runs 6]

Input: ``--sentences`` sentences of 10 words (5,000,000 words by default) from a fixed
vocabulary of 1,000 mixed-case words, emitted as row tuples in 4 source partitions (what a spout
hands the process step). Both sides start from these rows, build the DataFrame through Arrow,
and write the result as Parquet to a temporary directory, in the same SparkSession (ours
uncompressed, as the process step stages it; hand-written with Spark's default, snappy).

* *builtin*: ours is ``SparkBatchProcessor.process`` of ``Split -> group_by(word) ->
  persistent_aggregate(Count)`` and a Parquet write of the staged DataFrame; hand-written is
  ``createDataFrame(arrow table) -> explode(split) -> groupBy(word).count() -> parquet``.
* *python_function*: a user ``Function`` lower-cases each word before the count (its
  ``execute`` per tuple: ``collector.emit((tuple_[0].lower(),))``, which the Spark runtime
  inlines into one comprehension, ``operation/inline.py``); hand-written, a pandas UDF applies
  the same per-word Python (``[w.lower() for w in s]``).
* *column_function*: the same as a :class:`~airflow_trident.operation.ColumnFunction` (its
  ``execute_columns`` runs ``[w.lower() for w in words]`` on each Arrow batch), against the
  same pandas UDF. A vectorised ``s.str.lower()`` UDF is timed too, for information only (no
  per-word Python at all).

Every case is warmed up once, then ours and hand-written alternate for ``--runs`` rounds (each
goes first in every other round, and in as many rounds as the other: an odd ``--runs`` is made
even, so that an order effect cannot decide the median; a full garbage collection before each
round, and the input
rows frozen out of the collector's scans). Printed: seconds and words/s per side with their
median, min, max and spread ((max - min) / median), the per-round ratios, then
``ratio_builtin=``, ``ratio_python_function=``, ``ratio_column_function=`` (the median of the
per-round throughput ratios, ours / hand-written) and, last, ``ratio=`` (the lowest of the
three that ran).
"""

from __future__ import annotations

import argparse
import gc
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.functions import pandas_udf

from airflow_trident.operation import ColumnFunction, Count, Function, Split
from airflow_trident.runtime.spark import SparkBatchProcessor, local_session
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentCollector, TridentTuple

Row = tuple[Any, ...]
WORDS_PER_SENTENCE = 10
PARTITIONS = 4


class Lower(Function):
    """The user's per-word Python."""

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((tuple_[0].lower(),))


class LowerColumns(ColumnFunction):
    """The same per-word Python, a column at a time."""

    def execute_columns(self, columns: Any) -> Any:
        (words,) = columns
        return ([w.lower() for w in words],)


def make_sources(sentences: int, seed: int = 11) -> dict[str, dict[str, list[Row]]]:
    rng = random.Random(seed)
    vocab = [f"{rng.choice(['w', 'W'])}ord{i:04d}" for i in range(1000)]
    rows = [(" ".join(rng.choices(vocab, k=WORDS_PER_SENTENCE)),) for _ in range(sentences)]
    size = -(-len(rows) // PARTITIONS)
    parts = {f"part-{p}": rows[p * size : (p + 1) * size] for p in range(PARTITIONS)}
    return {"sentences": parts}


def topology(python_function: Function | None) -> TridentTopology:
    t = TridentTopology("bench_word_count")
    spout = MemoryTransactionalSpout({"p0": []}, ["sentence"], 1)  # the bench gives the rows
    words = t.new_stream("sentences", spout).each(["sentence"], Split(), ["word"])
    key = "word"
    if python_function is not None:
        words, key = words.each(["word"], python_function, ["lower"]), "lower"
    words.group_by([key]).persistent_aggregate(
        memory_state("bench_counts"), Count(), ["count"], name="counts"
    )
    return t


def ours(spark: SparkSession, sources: Any, python_function: Function | None, out: str) -> None:
    """The process step's work: the plan on Spark, written as ``stage_frames`` writes it."""
    processor = SparkBatchProcessor(topology(python_function))
    with processor.process(spark, 1, sources) as result:
        frame = result.staged["counts"].frame
        writer = frame.write.mode("overwrite").option("compression", "none")
        result.run(lambda: writer.parquet(out))


def _lower_rows(s: pd.Series) -> pd.Series:
    return pd.Series([w.lower() for w in s])


def _lower_vectorised(s: pd.Series) -> pd.Series:
    return s.str.lower()


def handwritten(udf: Callable[[pd.Series], pd.Series] | None) -> Callable[..., None]:
    lower = pandas_udf(udf, "string") if udf is not None else None  # type: ignore[call-overload]

    def run(spark: SparkSession, sources: Any, python_function: Any, out: str) -> None:
        rows = [r[0] for _, part in sorted(sources["sentences"].items()) for r in part]
        df: DataFrame = spark.createDataFrame(pa.table({"sentence": pa.array(rows)}))
        words = df.select(F.explode(F.split("sentence", r"\s+")).alias("word"))
        words = words.where(F.col("word") != "")
        if lower is not None:
            words = words.select(lower("word").alias("word"))
        words.groupBy("word").count().write.mode("overwrite").parquet(out)

    return run


def timed(fn: Callable[..., None], *args: Any) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def spread(values: list[float]) -> str:
    """``median [min, max], spread (max - min) / median`` of ``values``."""
    mid = statistics.median(values)
    width = (max(values) - min(values)) / mid
    return f"median {mid:.3f} [{min(values):.3f}, {max(values):.3f}], spread {width:.0%}"


def compare(
    spark: SparkSession,
    sources: Any,
    name: str,
    python_function: Function | None,
    base: Callable[..., None],
    runs: int,
    words: int,
    tmp: str,
) -> float:
    """Alternating rounds (each side goes first in every other round) after a warm-up of
    each; returns the median of the per-round throughput ratios (ours / hand-written)."""
    out_ours, out_base = f"{tmp}/{name}_ours", f"{tmp}/{name}_base"
    timed(ours, spark, sources, python_function, out_ours)  # warm-up
    timed(base, spark, sources, python_function, out_base)
    a, b = [], []
    for r in range(runs):
        gc.collect()  # the previous round's garbage is not collected inside this one
        if r % 2 == 0:
            a.append(timed(ours, spark, sources, python_function, out_ours))
            b.append(timed(base, spark, sources, python_function, out_base))
        else:
            b.append(timed(base, spark, sources, python_function, out_base))
            a.append(timed(ours, spark, sources, python_function, out_ours))
    totals = [spark.read.parquet(p).agg(F.sum("count")).first()[0] for p in (out_ours, out_base)]
    groups = [spark.read.parquet(p).count() for p in (out_ours, out_base)]
    if totals != [words, words] or groups[0] != groups[1]:
        raise SystemExit(f"results differ: totals {totals}, distinct words {groups}")
    ratios = [y / x for x, y in zip(a, b, strict=True)]
    ma, mb = statistics.median(a), statistics.median(b)
    print(
        f"{name}: ours median {ma:.2f}s ({words / ma / 1e6:.2f}M words/s) runs "
        f"{[round(x, 2) for x in a]}; hand-written median {mb:.2f}s "
        f"({words / mb / 1e6:.2f}M words/s) runs {[round(x, 2) for x in b]}; {groups[0]} words"
    )
    print(f"{name}: ours s {spread(a)}; hand-written s {spread(b)}")
    print(f"{name}: ratio per round (hand-written s / ours s) {spread(ratios)} of "
          f"{[round(x, 3) for x in ratios]}")  # fmt: skip
    return statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=500_000)
    parser.add_argument(
        "--runs", type=int, default=6, help="alternating rounds (>= 5; an odd count is made even)"
    )
    parser.add_argument(
        "--cases",
        default="builtin,python_function,column_function",
        help="comma-separated: builtin, python_function, column_function",
    )
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g", help="the local JVM's heap")
    args = parser.parse_args()
    args.runs += args.runs % 2  # each side goes first in as many rounds as the other
    words = args.sentences * WORDS_PER_SENTENCE
    start = time.perf_counter()
    sources = make_sources(args.sentences)
    gc.collect()
    gc.freeze()  # the input's 500k tuples: never scanned again by the collector in any round
    print(f"input: {args.sentences} sentences, {words} words ({time.perf_counter() - start:.1f}s)")
    spark = local_session(
        args.master,
        shuffle_partitions=8,
        app_name="bench-processing",
        conf={"spark.driver.memory": args.driver_memory},
    )
    spark.sparkContext.setLogLevel("ERROR")
    tmp = tempfile.mkdtemp(prefix="trident_bench_")
    cases = {
        "builtin": (None, handwritten(None), args.runs),
        "python_function": (Lower(), handwritten(_lower_rows), args.runs),
        "column_function": (LowerColumns(), handwritten(_lower_rows), args.runs),
        "column_function_vs_vectorised_udf": (LowerColumns(), handwritten(_lower_vectorised), 1),
    }
    ratios: dict[str, float] = {}
    wanted = set(args.cases.split(","))
    try:
        for name, (function, base, runs) in cases.items():
            if name.split("_vs_")[0] in wanted:
                ratios[name] = compare(spark, sources, name, function, base, runs, words, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        spark.stop()
    for name, ratio in ratios.items():
        rounds = cases[name][2]
        print(f"ratio_{name.replace('column_function_vs_', '')}={ratio:.3f} (median of {rounds} "
              f"alternating rounds{'; information only' if rounds == 1 else ''})")  # fmt: skip
    targets = [ratios[n] for n in ("builtin", "python_function", "column_function") if n in ratios]
    if targets:
        print(f"ratio={min(targets):.3f}")


if __name__ == "__main__":
    main()
