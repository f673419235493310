"""Staging on Spark (``batch/on_spark.stage_frames``): Spark writes each partition's
uncompressed Parquet file; the manifest lists the files with their rows, and the commit
verifies and applies them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_trident.batch.on_spark import process_on_spark
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.operation import Count, Split
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology

pytestmark = pytest.mark.integration

DATA = {f"p{i}": [(" ".join(f"w{(i * 7 + j) % 23}" for j in range(9)),) for _ in range(5)]
        for i in range(3)}  # fmt: skip


def word_count(name: str, data: dict[str, list[tuple[str]]]) -> TridentTopology:
    t = TridentTopology(name)
    (
        t.new_stream("lines", MemoryTransactionalSpout(data, ["line"], 5))
        .each(["line"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(memory_state(name, "transactional"), Count(), ["count"],
                              name="counts")
    )  # fmt: skip
    return t


def stored(steps: BatchSteps, words: list[str]) -> dict[str, int]:
    state = steps.query_state("counts")
    values = state.multi_get([(w,) for w in words])
    return {w: v for w, v in zip(words, values, strict=True) if v is not None}


def test_staged_files_are_uncompressed_and_listed_with_their_rows(
    spark: Any, tmp_path: Path, unique_name: str
) -> None:
    # Given a word count on Spark
    t = word_count(unique_name, DATA)
    steps = BatchSteps(t, MemoryCoordinatorStore(t.name), StagingArea(str(tmp_path), t.name))
    txid = int(steps.begin("r1")["txid"])
    # When the process step stages the batch on Spark
    manifest = process_on_spark(steps, spark, txid, 0.0)
    # Then every listed file is uncompressed Parquet holding the listed rows
    files = manifest["states"]["counts"]["files"]
    assert files
    for entry in files:
        meta = pq.ParquetFile(entry["path"]).metadata
        assert meta.num_rows == entry["rows"]
        assert meta.row_group(0).column(0).compression == "UNCOMPRESSED"
    # And the commit verifies and applies them: every word counted once
    expected = Counter(w for rows in DATA.values() for (s,) in rows for w in s.split())
    assert sum(f["rows"] for f in files) == len(expected)
    assert steps.commit(txid)["applied"] is True
    assert stored(steps, sorted(expected)) == dict(expected)


def test_an_empty_batch_stages_no_rows_and_commits(
    spark: Any, tmp_path: Path, unique_name: str
) -> None:
    # Given a batch whose spout emits nothing
    t = word_count(unique_name, {"p0": []})
    steps = BatchSteps(t, MemoryCoordinatorStore(t.name), StagingArea(str(tmp_path), t.name))
    txid = int(steps.begin("r1")["txid"])
    # When it is staged on Spark and committed
    manifest = process_on_spark(steps, spark, txid, 0.0)
    # Then no row is listed, and the commit still advances the txid
    assert sum(f["rows"] for f in manifest["states"]["counts"]["files"]) == 0
    assert steps.commit(txid)["applied"] is True
    assert steps.store.commits.committed_txid() == txid


def _staged(manifest: dict[str, Any], state: str = "counts") -> list[str]:
    return [Path(f["path"]).name for f in manifest["states"][state]["files"] if f["path"]]


def _steps(t: TridentTopology, tmp_path: Path) -> BatchSteps:
    return BatchSteps(t, MemoryCoordinatorStore(t.name), StagingArea(str(tmp_path), t.name))


def test_a_small_batchs_aggregate_is_staged_by_the_driver_and_commits_as_spark_staged_it(
    spark: Any, tmp_path: Path, unique_name: str
) -> None:
    # Given the same word count twice: one batch's input read by the driver, the other's
    # file ranges read by Spark's tasks (read_here_bytes=0)
    from airflow_trident.spout.file_log import FileLogSpout
    from tests.runtime.test_spark_native import land
    from tests.runtime.test_spark_native import word_count as file_word_count

    sentences = [json.dumps({"s": f"w{i % 7} w{i % 3} é"}) for i in range(40)]
    for side in ("here", "tasks"):
        land(tmp_path / side, "p0", "0.jsonl", sentences[:25])
        land(tmp_path / side, "p1", "0.jsonl", sentences[25:])
    staged, stored_counts = {}, {}
    for side, limit in (("here", 1 << 20), ("tasks", 0)):
        steps = file_word_count(FileLogSpout(tmp_path / side, ["s"]), f"{unique_name}_{side}")
        area = StagingArea(str(tmp_path / f"st_{side}"), steps.topology.name)
        steps = BatchSteps(steps.topology, steps.store, area)
        txid = int(steps.begin("r1")["txid"])
        # When each is processed and staged on Spark
        manifest = process_on_spark(steps, spark, txid, 0.0, read_here_bytes=limit)
        staged[side] = _staged(manifest)
        assert steps.commit(txid)["applied"] is True
        words = sorted({w for line in sentences for w in json.loads(line)["s"].split()})
        state = steps.query_state("counts")
        stored_counts[side] = dict(zip(words, state.multi_get([(w,) for w in words]), strict=True))
    # Then the driver staged the first, a file per Spark partition as Spark's writer stages
    # the second
    assert staged["here"]
    assert all(n.endswith("-here.parquet") for n in staged["here"])
    assert staged["tasks"]
    assert all(not n.endswith("-here.parquet") for n in staged["tasks"])
    # And both committed the same counts, every word once per sentence
    expected = Counter(w for line in sentences for w in json.loads(line)["s"].split())
    assert stored_counts["here"] == stored_counts["tasks"] == dict(expected)


def test_an_aggregate_of_timestamps_is_staged_by_spark_and_commits_the_same_instants(
    spark: Any, tmp_path: Path, unique_name: str
) -> None:
    import datetime as dt

    from airflow_trident.operation import Max

    # Given an aggregate whose value is a timestamp (Spark's Parquet timestamps read back
    # otherwise than Arrow's), on a small batch
    day = dt.datetime(2026, 12, 7, 10, 30, tzinfo=dt.UTC)
    data = {"p0": [("a", day), ("b", day + dt.timedelta(hours=1)), ("a", day)]}
    t = TridentTopology(unique_name)
    t.new_stream("events", MemoryTransactionalSpout(data, ["k", "at"], 5)).group_by(
        ["k"]
    ).persistent_aggregate(memory_state(unique_name, "transactional"), ["at"], Max(), ["last"],
                           name="counts")  # fmt: skip
    steps = _steps(t, tmp_path)
    txid = int(steps.begin("r1")["txid"])
    # When it is staged on Spark
    manifest = process_on_spark(steps, spark, txid, 0.0)
    # Then Spark's writer staged it (INT96 timestamps), and the commit stores the in-process
    # runtime's values: the same instants, with their time zone
    assert _staged(manifest)
    assert not any(n.endswith("-here.parquet") for n in _staged(manifest))
    assert steps.commit(txid)["applied"] is True
    stored_values = steps.query_state("counts").multi_get([("a",), ("b",)])
    assert stored_values == [day, day + dt.timedelta(hours=1)]
    assert all(type(v) is dt.datetime and v.utcoffset() == dt.timedelta(0) for v in stored_values)


def test_a_retry_stages_the_driver_file_again_alone(
    spark: Any, tmp_path: Path, unique_name: str
) -> None:
    from airflow_trident.batch.on_spark import stage_frames
    from airflow_trident.runtime.spark import SparkBatchProcessor

    # Given a small batch staged by the driver
    t = word_count(unique_name, DATA)
    steps = _steps(t, tmp_path)
    plan = steps.plan(int(steps.begin("r1")["txid"]))
    sources = steps.emit(plan)
    with SparkBatchProcessor(t).process(spark, plan.txid, sources) as result:
        first = stage_frames(steps.staging, plan, result)
        directory = Path(first["states"]["counts"]["files"][0]["path"]).parent
        (directory / "part-00001-stale.parquet").write_bytes(b"left by a killed try")
        # When the same attempt is staged again (a retried try)
        again = stage_frames(steps.staging, plan, result)
    # Then its directory holds the one file the manifest lists, and the batch commits
    listed = [Path(f["path"]).name for f in first["states"]["counts"]["files"]]
    assert sorted(p.name for p in directory.iterdir()) == listed
    assert again["states"]["counts"]["files"] == first["states"]["counts"]["files"]
    assert steps.commit(plan.txid)["applied"] is True
