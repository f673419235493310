"""The staging area (``runtime/staging.py``): what the process step leaves for the commit."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.runtime.result import ProcessResult, StagedState
from airflow_trident.runtime.staging import StagingArea


def test_staged_files_are_uncompressed_and_read_back_as_written(tmp_path: Path) -> None:
    # Given a processed batch with two partitions of one state
    result = ProcessResult(3)
    rows = [[("a", 2), ("b", 1)], [("c", 5)]]
    result.staged = {"counts": StagedState("counts", "combine", ("word", "count"), rows)}
    result.emitted = {"lines": {"p0": 4}}
    staging = StagingArea(str(tmp_path), "topo")
    attempt = TransactionAttempt(3, 1)
    # When it is staged
    manifest = staging.write(attempt, result, {"lines": {"x": 1}})
    # Then each file is uncompressed Parquet (read once, from a local disk: compression costs
    # CPU on both sides and saves nothing) and reads back as written
    for entry in manifest["states"]["counts"]["files"]:
        meta = pq.ParquetFile(entry["path"]).metadata
        assert meta.row_group(0).column(0).compression == "UNCOMPRESSED"
    _, staged = staging.read(attempt, {"lines": {"x": 1}})
    assert staged["counts"].partitions == rows
