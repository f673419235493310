"""The source-chaos schedule, short (issue 19): the database table source under source faults
(rows inserted during batches, out-of-order ids, rows of a failed txid updated, deleted or
inserted below the mark before its retry, attempts failing after writing state), in both modes,
and the file log (files landing during batches, partitions vanishing and returning, the root
briefly missing, malformed and mistyped records),
on SQLite and PostgreSQL, in-process and on Spark; 0 keys may differ from the reference computed
from the rows each committed txid's metadata names. The long run: ``bash scripts/source-chaos.sh``.

The replay profile, short (issue 32): committed txids (older ones too) replayed through the
lifecycle and into each state, deployments with another ``parallelism_hint``, batches of 1 to
4,000 rows, the SQL states and the Iceberg and Delta sinks on PostgreSQL and ZooKeeper, in-process
and on Spark ``local[2]``. The long run: ``bash scripts/source-chaos.sh --profile replay``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_trident.coordination.store import CoordinatorStore
from tests.harness.source_chaos_schedule import SourceChaosConfig, run_source_chaos

pytestmark = pytest.mark.integration


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        pg: str = request.getfixturevalue("pg_url")
        return pg
    return f"sqlite:///{tmp_path}/chaos.db"


# the second seed of the in-process schedules is the long tier's (the first runs every mode and
# backend in the test command), and the opaque schedule on PostgreSQL (the command runs it on
# SQLite, and the transactional one on both)
LONG_PARAMS = [{"seed": 12}, {"url": "postgresql", "mode": "opaque", "seed": 11}]


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
    ("backend", "source", "mode"),
    [
        ("sqlite", "file_log", "transactional"),
        # the long tier's (TRIDENT_LONG=1): Spark with PostgreSQL state (the test command runs
        # it in tests/runtime/test_commit_shape.py and the replay profile below), the table
        # source on Spark (in process above; opaque batches on Spark in test_schedule.py and the
        # Kafka opaque spout's Spark test)
        pytest.param("postgresql", "file_log", "transactional", marks=pytest.mark.long),
        *(pytest.param(b, "table", m, marks=pytest.mark.long)
          for b in ("sqlite", "postgresql") for m in ("transactional", "opaque")),
    ],
)  # fmt: skip
def test_source_chaos_on_spark_is_exact(
    backend: str, source: str, mode: str, tmp_path: Path, spark: Any, request: pytest.FixtureRequest
) -> None:
    from airflow_trident.batch.on_spark import process_on_spark

    url = (
        str(request.getfixturevalue("pg_url"))
        if backend == "postgresql"
        else f"sqlite:///{tmp_path}/chaos.db"
    )
    # the session-wide Spark has the JDBC driver on its spark.jars (tests/harness/jars.py)
    config = SourceChaosConfig(seed=5, mode=mode, source=source, batches=8)
    report = run_source_chaos(
        config,
        state_url=url,
        staging=str(tmp_path / "staging"),
        process=lambda steps, txid: process_on_spark(steps, spark, txid, 0.0),
    )
    assert report.ok, report.summary()


def _replayed_across_hints(report: Any) -> int:
    return sum(n for what, n in report.replays.items() if "(other hint)" in what)


@pytest.mark.parametrize(("mode", "seed"), [("transactional", 21), ("opaque", 24)])
def test_replay_profile_in_process_is_exact(
    pg_url: str, zk_store: CoordinatorStore, mode: str, seed: int, tmp_path: Path
) -> None:
    # replays and new deployments made likely, so a short run has each kind (seeds that do)
    config = SourceChaosConfig.replay_profile(
        seed=seed, mode=mode, batches=10, replays=0.6, redeploys=0.3
    )
    report = run_source_chaos(
        config, state_url=pg_url, staging=str(tmp_path / "staging"), store=zk_store
    )
    assert report.ok, report.summary()
    assert report.faults["replay_older_txid"] > 0, report.summary()
    assert report.faults["redeploy"] + report.faults["redeploy_before_retry"] > 0
    assert set(report.sizes) >= {"1", "1000+"}, report.summary()
    if mode == "transactional":  # older txids into each state, after the hint changed
        assert _replayed_across_hints(report) > 0, report.summary()


def test_replay_profile_on_spark_is_exact(
    pg_url: str, zk_store: CoordinatorStore, tmp_path: Path, spark: Any
) -> None:
    from airflow_trident.batch.on_spark import process_on_spark

    # (the session-wide Spark has the JDBC driver on its spark.jars: tests/harness/jars.py)
    # a replay after every commit (half of them into the states); ~1 min on 2 cores
    config = SourceChaosConfig.replay_profile(seed=22, batches=4, replays=1.0, redeploys=0.3)
    report = run_source_chaos(
        config,
        state_url=pg_url,
        staging=str(tmp_path / "staging"),
        store=zk_store,
        process=lambda steps, txid: process_on_spark(steps, spark, txid, 0.0),
    )
    assert report.ok, report.summary()
    assert report.faults["replay_into_states"] > 0, report.summary()
