"""A small batch of a file log read by the Spark runtime's driver (``read_here_bytes``) against
the in-process runtime and against Spark's tasks reading the same range: the same tuples, counts
and errors."""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_trident.errors import MalformedRecordError
from airflow_trident.runtime.local import LocalBatchProcessor
from airflow_trident.runtime.spark import SparkBatchProcessor
from airflow_trident.spout.file_log import FileLogSpout
from tests.runtime.test_spark_native import land, word_count

pytestmark = pytest.mark.integration


def run(spark: Any, steps: Any, read_here_bytes: int) -> tuple[Counter[Any], Any, str, Any]:
    """Batch 1 on Spark: the staged counts, the emitted counts, the plan, the sources."""
    plan = steps.plan(int(steps.begin(None)["txid"]))
    sources = steps.emit(plan)
    processor = SparkBatchProcessor(steps.topology, read_here_bytes=read_here_bytes)
    with processor.process(spark, plan.txid, sources) as remote:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            remote.staged["counts"].frame.explain()
        rows = Counter(r for p in remote.collect("counts").partitions for r in p)
        emitted = {s: dict(parts) for s, parts in remote.emitted.items()}
    return rows, emitted, out.getvalue(), (plan, sources)


def local_counts(steps: Any, plan: Any, sources: Any) -> tuple[Counter[Any], Any]:
    local = LocalBatchProcessor(steps.topology).process(plan.txid, sources)
    counts = Counter(r for p in local.staged["counts"].partitions for r in p)
    return counts, {s: dict(parts) for s, parts in local.emitted.items()}


def edges(root: Path) -> None:
    """Two partitions (one needing percent-encoding), blank lines, unicode, escapes."""
    land(root, "p 1%", "0.jsonl", [json.dumps({"s": "a b"}), "", json.dumps({"s": "é é"})])
    land(root, "p2", "0.jsonl", [json.dumps({"s": "The the"}), '{"s":"x\\ty", "other": [1]}'])
    land(root, "p2", "1.jsonl", ['  {"s": null}  ', '{"s": "é"}'])


@pytest.mark.parametrize("python", [False, True], ids=["spark_sql", "python_function"])
def test_a_small_batch_is_read_by_the_driver_with_the_in_process_tuples(
    spark: Any, tmp_path: Path, python: bool
) -> None:
    # Given a small batch, planned without counting its records
    edges(tmp_path)
    steps = word_count(FileLogSpout(tmp_path, ["s"]), f"here_{int(python)}", python=python)
    # When Spark processes it with the default limit
    remote, emitted, plan, (txplan, sources) = run(spark, steps, 1 << 20)
    # Then the driver read it (no file scan) and the counts are the in-process runtime's
    assert "LocalTableScan" in plan
    assert "FileScan" not in plan
    local, emitted_local = local_counts(steps, txplan, sources)
    assert remote == local
    assert emitted == emitted_local == {"lines": {"p 1%": 2, "p2": 4}}
    assert local[("é", 3)] == 1  # escaped twice, once as UTF-8


def test_the_driver_and_spark_tasks_read_the_same_batch_alike(spark: Any, tmp_path: Path) -> None:
    # Given the same small batch in two logs
    for side in ("here", "tasks"):
        edges(tmp_path / side)
    here = word_count(FileLogSpout(tmp_path / "here", ["s"]), "alike_here", python=True)
    tasks = word_count(FileLogSpout(tmp_path / "tasks", ["s"]), "alike_tasks", python=True)
    # When one is read by the driver and one by Spark's tasks
    by_driver, emitted_driver, plan_driver, _ = run(spark, here, 1 << 20)
    by_tasks, emitted_tasks, plan_tasks, _ = run(spark, tasks, 0)
    # Then both give the same counts and emitted records
    assert "FileScan text" in plan_tasks
    assert "FileScan" not in plan_driver
    assert by_driver == by_tasks
    assert emitted_driver == emitted_tasks


def test_a_batch_over_the_limit_is_read_by_spark_tasks(spark: Any, tmp_path: Path) -> None:
    # Given a batch of more bytes than the limit
    edges(tmp_path)
    size = sum(f.stat().st_size for f in tmp_path.glob("*/*.jsonl"))
    steps = word_count(FileLogSpout(tmp_path, ["s"]), "over_limit")
    # When the limit is one byte less: Spark's tasks read it; at the size: the driver
    _, _, plan, _ = run(spark, steps, size - 1)
    assert "FileScan text" in plan
    again = word_count(FileLogSpout(tmp_path, ["s"]), "at_limit")
    _, _, plan, _ = run(spark, again, size)
    assert "LocalTableScan" in plan


def test_a_malformed_record_read_by_the_driver_is_the_in_process_error(
    spark: Any, tmp_path: Path
) -> None:
    # Given a small file with a record that is not JSON
    land(tmp_path, "a", "bad.jsonl", [json.dumps({"s": "fine"})] * 3 + ['{"s": "cut'])
    steps = word_count(FileLogSpout(tmp_path, ["s"]), "here_bad")
    plan = steps.plan(int(steps.begin(None)["txid"]))
    sources = steps.emit(plan)
    # When either runtime processes the batch: the same error, naming the file and the line
    with pytest.raises(MalformedRecordError) as in_process:
        LocalBatchProcessor(steps.topology).process(plan.txid, sources)
    processor = SparkBatchProcessor(steps.topology)
    with pytest.raises(MalformedRecordError) as on_spark:
        processor.process(spark, plan.txid, sources)  # the driver reads as it plans
    assert str(on_spark.value) == str(in_process.value)
    assert "bad.jsonl line 4" in str(on_spark.value)


def test_dead_lettered_mistyped_csv_and_parquet_batches_read_by_the_driver(
    spark: Any, tmp_path: Path
) -> None:
    # Given a JSON log with malformed and mistyped records and a dead-letter location, a CSV
    # log and a Parquet log (int32 in the file, bigint in the schema)
    land(tmp_path / "log", "a", "0.jsonl", [json.dumps({"s": "x y"}), "oops", '{"s": 1}'])
    land(tmp_path / "csv", "a", "0.csv", ["s,n", "a b,1", "b,2"])
    (tmp_path / "pq" / "a").mkdir(parents=True)
    table = pa.table({"s": ["a b", "b"], "n": pa.array([1, 2], pa.int32())})
    pq.write_table(table, tmp_path / "pq" / "a" / "0.parquet")
    spouts = {
        "json": FileLogSpout(tmp_path / "log", ["s"], dead_letter=tmp_path / "dead"),
        "csv": FileLogSpout(tmp_path / "csv", ["s", "n"], format="csv", types={"n": "bigint"}),
        "parquet": FileLogSpout(
            tmp_path / "pq", ["s", "n"], format="parquet", types={"n": "bigint"}
        ),
    }
    for name, spout in spouts.items():
        steps = word_count(spout, f"here_{name}")
        # When Spark processes the batch, read by the driver
        remote, emitted, plan, (txplan, sources) = run(spark, steps, 1 << 20)
        # Then the counts and emitted records are the in-process runtime's
        assert "LocalTableScan" in plan, name
        assert (remote, emitted) == local_counts(steps, txplan, sources), name
    assert remote == Counter({("a", 1): 1, ("b", 2): 1})


def test_only_batches_of_ranges_that_know_their_size_are_read_here() -> None:
    from airflow_trident.runtime.spark.driver_read import reads_here
    from airflow_trident.spout.file_records import FileRange
    from airflow_trident.spout.ranges import PartitionRows

    def part(size: int | None, *emitted: tuple[Any, ...]) -> PartitionRows:
        rows = PartitionRows()
        rows.add_range(FileRange("json", "", (("/x", None, ()),), (("s", "string"),), "w",
                                 size_bytes=size))  # fmt: skip
        for row in emitted:
            rows.append(row)
        return rows

    sized = part(10)
    # A batch within the limit, and not over it or with the limit at 0
    assert reads_here([("p0", sized)], 10)
    assert not reads_here([("p0", sized)], 9)
    assert not reads_here([("p0", sized)], 0)
    # Nor with a range of unknown size, tuples emitted one by one, or a partition of plain rows
    assert not reads_here([("p0", sized), ("p1", part(None))], 1 << 20)
    assert not reads_here([("p0", part(10, ("a",)))], 1 << 20)
    assert not reads_here([("p0", sized), ("p1", [("a",)])], 1 << 20)
