"""Staging on Spark (``batch/on_spark.stage_frames``): Spark writes each partition's
uncompressed Parquet file; the manifest lists the files with their rows, and the commit
verifies and applies them."""

from __future__ import annotations

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
    assert steps.store.committed_txid() == txid
