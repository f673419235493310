"""The source-chaos schedule, short (issue 19): the database table source under source faults
(rows inserted during batches, out-of-order ids, rows of a failed txid updated, deleted or
inserted below the mark before its retry, attempts failing after writing state), in both modes,
and the file log (files landing during batches, partitions vanishing and returning, the root
briefly missing, malformed and mistyped records),
on SQLite and PostgreSQL, in-process and on Spark; 0 keys may differ from the reference computed
from the rows each committed txid's metadata names. The long run: ``bash scripts/source-chaos.sh``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from airflow_trident.spout.database_table import JDBC_JAR
from tests.harness.source_chaos_schedule import SourceChaosConfig, run_source_chaos

pytestmark = pytest.mark.integration


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        pg: str = request.getfixturevalue("pg_url")
        return pg
    return f"sqlite:///{tmp_path}/chaos.db"


@pytest.mark.parametrize("mode", ["transactional", "opaque"])
@pytest.mark.parametrize("seed", [11, 12])
def test_source_chaos_in_process_is_exact(url: str, mode: str, seed: int, tmp_path: Path) -> None:
    config = SourceChaosConfig(seed=seed, mode=mode, batches=30)
    report = run_source_chaos(config, state_url=url, staging=str(tmp_path / "staging"))
    assert report.ok, report.summary()
    assert report.batches >= 30
    changed = sum(report.faults[k] for k in ("update_before_retry", "delete_before_retry"))
    assert changed > 0, report.summary()  # the schedule did change rows before retries


@pytest.mark.parametrize("seed", [11, 12])
def test_file_log_chaos_in_process_is_exact(url: str, seed: int, tmp_path: Path) -> None:
    config = SourceChaosConfig(seed=seed, source="file_log", batches=30)
    report = run_source_chaos(config, state_url=url, staging=str(tmp_path / "staging"))
    assert report.ok, report.summary()
    assert report.faults["partition_vanishes"] > 0, report.summary()


@pytest.mark.parametrize(
    ("source", "mode"),
    [
        # the transactional table source stays in the test command in process (above) and
        # through the file log on Spark: its Spark runs are their own tier (TRIDENT_LONG=1)
        pytest.param("table", "transactional", marks=pytest.mark.long),
        ("table", "opaque"),
        ("file_log", "transactional"),
    ],
)
def test_source_chaos_on_spark_is_exact(
    url: str, source: str, mode: str, tmp_path: Path, spark: Any
) -> None:
    from airflow_trident.batch.spark_job import process_on_spark

    if os.path.exists(JDBC_JAR):
        spark.sql(f"ADD JAR {JDBC_JAR}")
    config = SourceChaosConfig(seed=5, mode=mode, source=source, batches=8)
    report = run_source_chaos(
        config,
        state_url=url,
        staging=str(tmp_path / "staging"),
        process=lambda steps, txid: process_on_spark(steps, spark, txid, 0.0),
    )
    assert report.ok, report.summary()
