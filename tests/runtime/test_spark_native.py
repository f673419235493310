"""Spark-native emit: a file log's batch read by Spark from exactly its files, against the
in-process runtime reading the same range."""

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

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.errors import MalformedRecordError
from airflow_trident.operation import Count, Function, Split
from airflow_trident.runtime.local import LocalBatchProcessor
from airflow_trident.runtime.spark import SparkBatchProcessor
from airflow_trident.spout.file_log import FileLogSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentCollector, TridentTuple


@pytest.fixture(autouse=True)
def read_by_spark_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """These batches are small: without this the driver would read them (test_spark_driver_read)."""
    monkeypatch.setattr("airflow_trident.runtime.spark.driver_read.READ_HERE_BYTES", 0)


class Lower(Function):
    """Python per word (not Spark SQL): the source's partitions must be exact for it."""

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((tuple_[0].lower(),))


def land(root: Path, partition: str, name: str, lines: list[str]) -> None:
    (root / partition).mkdir(parents=True, exist_ok=True)
    tmp = root / partition / f"_{name}"
    tmp.write_text("".join(line + "\n" for line in lines))
    tmp.rename(root / partition / name)


def word_count(spout: Any, name: str, *, python: bool = False) -> BatchSteps:
    t = TridentTopology(name)
    words = t.new_stream("lines", spout).each(["s"], Split(), ["w"])
    key = "w"
    if python:
        words, key = words.each(["w"], Lower(), ["lw"]), "lw"
    words.group_by([key]).persistent_aggregate(
        memory_state(name, "transactional"), Count(), ["n"], name="counts"
    )
    return BatchSteps(t, MemoryCoordinatorStore(t.name))


def both(spark: Any, steps: BatchSteps) -> tuple[Any, Any, Any, str]:
    """Batch 1 emitted, then processed in-process and on Spark: staged counts, emitted."""
    plan = steps.plan(int(steps.begin(None)["txid"]))
    sources = steps.emit(plan)
    local = LocalBatchProcessor(steps.topology).process(plan.txid, sources)
    with SparkBatchProcessor(steps.topology).process(spark, plan.txid, sources) as remote:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            remote.staged["counts"].frame.explain()
        rows = remote.collect("counts").partitions[0]
        files = sorted(f.split("/")[-2] + "/" + f.split("/")[-1]
                       for f in remote.staged["counts"].frame.inputFiles())  # fmt: skip
        out.write(f"\ninput files: {files}\n")
        return (
            Counter(r for p in local.staged["counts"].partitions for r in p),
            Counter(rows),
            (local.emitted, remote.emitted),
            out.getvalue(),
        )


@pytest.mark.parametrize("python", [False, True], ids=["spark_sql", "python_function"])
def test_spark_reads_exactly_the_batch_files_and_matches_in_process(
    spark: Any, tmp_path: Path, python: bool
) -> None:
    # Given two partitions of three files, of which a batch takes two per partition
    for p in ("a", "b"):
        for i in range(3):
            land(tmp_path, p, f"{i}.jsonl", [json.dumps({"s": f"The {p}{i} {p}"})] * (i + 1))
    steps = word_count(
        FileLogSpout(tmp_path, ["s"], max_files=2), f"native_{int(python)}", python=python
    )
    # When batch 1 runs on both runtimes
    local, remote, (emitted_local, emitted_remote), plan = both(spark, steps)
    # Then the counts and the records per source partition are the same
    assert remote == local
    assert local[("the" if python else "The", 6)] == 1  # 1 + 2 records in each partition
    assert emitted_remote == emitted_local == {"lines": {"a": 3, "b": 3}}
    # and Spark scans the batch's files, not rows sent from the driver
    assert "FileScan text" in plan  # the lines, parsed by the spout's own parser
    assert "LocalTableScan" not in plan
    assert "input files: ['a/0.jsonl', 'a/1.jsonl', 'b/0.jsonl', 'b/1.jsonl']" in plan


def test_a_malformed_record_fails_the_spark_job_naming_the_file(spark: Any, tmp_path: Path) -> None:
    # Given a file with a record that is not JSON, after the driver's sample of 100 records
    land(tmp_path, "a", "bad.jsonl", [json.dumps({"s": "fine"})] * 150 + ['{"s": "cut'])
    steps = word_count(FileLogSpout(tmp_path, ["s"]), "native_bad")
    plan = steps.plan(int(steps.begin(None)["txid"]))
    # When Spark processes the batch: the malformed-record error names the file
    processor = SparkBatchProcessor(steps.topology)
    with (
        processor.process(spark, plan.txid, steps.emit(plan)) as r,
        pytest.raises(MalformedRecordError, match=r"malformed record in file:.*bad\.jsonl"),
    ):
        r.collect("counts")


def test_dead_lettered_records_are_skipped_by_spark_too(spark: Any, tmp_path: Path) -> None:
    # Given malformed records and a dead-letter location
    land(tmp_path / "log", "a", "0.jsonl", [json.dumps({"s": "x y"}), "oops", '{"s": 1}'])
    spout = FileLogSpout(tmp_path / "log", ["s"], dead_letter=tmp_path / "dead")
    # When the batch runs on both runtimes: the same counts without the malformed record
    local, remote, (emitted_local, emitted_remote), _ = both(spark, word_count(spout, "native_dl"))
    # ({"s": 1} too: a number is not a string, on both runtimes)
    assert remote == local == Counter({("x", 1): 1, ("y", 1): 1})
    assert emitted_remote == emitted_local == {"lines": {"a": 1}}


def test_csv_and_parquet_on_spark_match_in_process(spark: Any, tmp_path: Path) -> None:
    # Given the same sentences as CSV and as Parquet
    land(tmp_path / "csv", "a", "0.csv", ["s,n", "a b,1", "b,2"])
    (tmp_path / "pq" / "a").mkdir(parents=True)
    table = pa.table({"s": ["a b", "b"], "n": pa.array([1, 2], pa.int32())})
    pq.write_table(table, tmp_path / "pq" / "a" / "0.parquet")
    for fmt, root in (("csv", tmp_path / "csv"), ("parquet", tmp_path / "pq")):
        spout = FileLogSpout(root, ["s", "n"], format=fmt, types={"n": "bigint"})
        # When the batch runs on both runtimes: the same counts
        local, remote, _, plan = both(spark, word_count(spout, f"native_{fmt}"))
        assert remote == local == Counter({("a", 1): 1, ("b", 2): 1})
        assert f"FileScan {'text' if fmt == 'csv' else fmt}" in plan


@pytest.mark.parametrize("python", [False, True], ids=["merged_read", "exact_partitions"])
def test_the_spark_job_counts_the_records_per_partition_in_its_own_pass(
    spark: Any, tmp_path: Path, python: bool
) -> None:
    # Given partitions whose names need percent-encoding in a URI, and blank lines
    land(tmp_path, "p 1%+x", "0.jsonl", [json.dumps({"s": "a b"}), "", json.dumps({"s": "c"})])
    land(tmp_path, "p2", "0.jsonl", [json.dumps({"s": "d"})] * 3)
    land(tmp_path, "p2#é", "1 %41.jsonl", [json.dumps({"s": "e"})])
    steps = word_count(FileLogSpout(tmp_path, ["s"]), f"native_count_{int(python)}",
                       python=python)  # fmt: skip
    plan = steps.plan(int(steps.begin(None)["txid"]))
    sources = steps.emit(plan)
    # Then the batch was planned without counting records (files and sizes only)
    parts = sources["lines"]
    assert [f[1] for rows in parts.values() for r in rows.ranges for f in r.files] == [None] * 3
    # When Spark processes it: the job itself counted each partition's records
    with SparkBatchProcessor(steps.topology).process(spark, plan.txid, sources) as remote:
        assert all(rows.observed is not None for rows in parts.values())
        assert next(iter(parts.values())).observed() is None  # (after a wait for the bus)
        remote.collect("counts")
        seen = {p: rows.observed() for p, rows in parts.items()}
        emitted = dict(remote.emitted["lines"])
    assert seen == emitted == {"p 1%+x": 2, "p2": 3, "p2#é": 1}
    # And the in-process runtime counts the same
    local = LocalBatchProcessor(steps.topology).process(plan.txid, sources)
    assert local.emitted == {"lines": emitted}


@pytest.mark.parametrize(
    ("given", "reported"),
    [
        ("/data/log/p 1%+x/0.jsonl", "file:/data/log/p%201%25+x/0.jsonl"),
        ("file:///data/log/a#b?é/f 1%2.jsonl", "file:/data/log/a%23b%3Fé/f%201%252.jsonl"),
        ("/data//log/./p0/0.jsonl", "file:/data/log/p0/0.jsonl"),
        ("s3a://bucket/log/p 0/0.jsonl", "s3a://bucket/log/p%200/0.jsonl"),
    ],
)
def test_a_file_given_to_spark_and_the_path_spark_reports_have_one_key(
    given: str, reported: str
) -> None:
    from airflow_trident.runtime.spark.readers.files import _file_key

    assert _file_key(given) == _file_key(reported, reported=True)
    other = given.replace("0.jsonl", "1.jsonl").replace("f 1", "f 2")
    assert _file_key(other) != _file_key(reported, reported=True)


def test_a_file_reported_with_the_default_filesystem_host_finds_its_partition() -> None:
    from airflow_trident.runtime.spark.readers.files import _file_key, _ParseLines

    files = ((_file_key("hdfs:///log/p0/0.jsonl"), 0), (_file_key("hdfs:///log/p1/0.jsonl"), 1))
    parse = _ParseLines((), (("s", "string"),), files, (3, 7), "pid")
    assert parse._slot(dict(files), {}, "hdfs://nn:8020/log/p1/0.jsonl") == 1
    with pytest.raises(RuntimeError, match="a file of no partition"):
        parse._slot(dict(files), {}, "hdfs://nn:8020/log/p2/0.jsonl")


@pytest.mark.parametrize("fmt", ["json", "csv", "parquet"])
def test_the_types_planning_assumes_are_the_types_spark_reads(
    spark: Any, tmp_path: Path, fmt: str
) -> None:
    from airflow_trident.runtime.spark.native import native_partitions, native_types

    # Given a file log of every field type
    fields = ["s", "n", "i", "d", "b"]
    types = {"s": "string", "n": "bigint", "i": "int", "d": "double", "b": "boolean"}
    row = {"s": "a", "n": 1, "i": 2, "d": 0.5, "b": True}
    for p in ("p0", "p1"):
        (tmp_path / p).mkdir()
        if fmt == "json":
            (tmp_path / p / "0.json").write_text(json.dumps(row) + "\n")
        elif fmt == "csv":
            (tmp_path / p / "0.csv").write_text("s,n,i,d,b\na,1,2,0.5,true\n")
        else:
            pq.write_table(pa.Table.from_pylist([row]), tmp_path / p / "0.parquet")
    spout = FileLogSpout(tmp_path, fields, format=fmt, types=types)
    steps = word_count(spout, f"native_types_{fmt}")
    sources = steps.emit(steps.plan(int(steps.begin(None)["txid"])))
    parts = list(sources["lines"].items())
    # When planning takes the types from the read specs: they are what Spark reads
    for pid in (None, "pid"):
        df = native_partitions(spark, parts, pid)
        assert native_types(parts) == {
            f.name: f.dataType for f in df.schema.fields if f.name in fields
        }
        assert df.count() == 2
