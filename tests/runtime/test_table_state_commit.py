"""Table-shaped state through the commit phase: the worker commit (SQLite, PostgreSQL) and the
Spark commit (PostgreSQL), each with the opaque revert of hole 1 (a replay that reads less than
its failed first attempt). An analyst's ``SELECT word, count`` gives the source's word counts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.client import ZkConfig
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.operation import Count, Split
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.memory import MemoryOpaqueSpout
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology
from tests.runtime import table_topologies as tt
from tests.runtime.test_opaque_replay import DATA, REFERENCE, TAKE, N, replay_reading_less
from tests.runtime.zk_steps import zk_batch_steps

pytestmark = pytest.mark.integration

REFERENCE_TOPOLOGY = "tests.runtime.table_topologies:words"


@pytest.fixture(params=["sqlite", "postgresql"])
def state_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        url: str = request.getfixturevalue("pg_url")
        return url
    return f"sqlite:///{tmp_path}/state.db"


def word_counts(url: str, table: str) -> dict[str, int]:
    """What an analyst reads: ``SELECT word, count FROM <table>``."""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f'SELECT word, count FROM "{table}"')).all()
    engine.dispose()
    return {str(w): int(c) for w, c in rows}


def test_worker_commit_of_a_replay_reading_less_counts_each_word_once(
    zk_store: CoordinatorStore, tmp_path: Path, state_url: str, unique_name: str
) -> None:
    # Given word counts into a table-shaped opaque state, committed by the worker
    spout = MemoryOpaqueSpout(DATA, ["sentence"], take_per_batch=TAKE)
    topology = TridentTopology(zk_store.paths.topology)
    factory = sql_state(
        None, unique_name, "opaque", key_fields=("word",), value_fields=("count",),
        value_type="bigint",
    )  # fmt: skip
    (
        topology.new_stream("sentences", spout)
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(factory, Count(), ["count"], name="counts")
    )
    steps = BatchSteps(
        topology,
        zk_store,
        StagingArea(str(tmp_path / "staging"), topology.name),
        states=StateBinding(state_url),
    )
    try:
        # When txid N's first attempt writes state and dies, and its replay reads less
        replay_reading_less(
            steps,
            spout,
            lambda s, txid: s.process_local(txid),
            lambda: word_counts(state_url, unique_name),
        )
        # Then the analyst's query gives the source's word counts, key by key
        assert word_counts(state_url, unique_name) == dict(REFERENCE)
    finally:
        engine = sa.create_engine(state_url)
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP TABLE IF EXISTS "{unique_name}"'))
        engine.dispose()


@pytest.fixture
def spark_steps(pg_url: str, zk_config: ZkConfig, tmp_path: Path) -> Iterator[BatchSteps]:
    with zk_batch_steps(REFERENCE_TOPOLOGY, tt.TABLE, pg_url=pg_url, zk_config=zk_config,
                        tmp_path=tmp_path) as steps:  # fmt: skip
        yield steps
    os.environ.pop("TRIDENT_UNREADABLE_PARTITIONS", None)


def test_spark_commit_of_a_replay_reading_less_counts_each_word_once(
    spark_steps: BatchSteps, spark: Any, pg_url: str
) -> None:
    from airflow_trident.batch.on_spark import commit_on_spark, process_on_spark

    steps = spark_steps
    # Given txid 1 committed on Spark
    assert int(steps.begin("r1")["txid"]) == 1
    process_on_spark(steps, spark, 1, 0.0)
    assert commit_on_spark(steps, spark, REFERENCE_TOPOLOGY, 1, 0.0)["applied"] is True
    # And txid N's first attempt applied its staged rows and died before the compare-and-set
    assert int(steps.begin("r2")["txid"]) == N
    manifest = process_on_spark(steps, spark, N, 0.0)
    steps.apply_staged(steps.plan(N), manifest)
    assert {"plum", "kiwi"} <= set(word_counts(pg_url, tt.TABLE))
    # When its replay reads less (p03 unreadable) and is committed by a Spark job
    os.environ["TRIDENT_UNREADABLE_PARTITIONS"] = "p03"
    process_on_spark(steps, spark, N, 0.0)
    assert commit_on_spark(steps, spark, REFERENCE_TOPOLOGY, N, 0.0)["applied"] is True
    del os.environ["TRIDENT_UNREADABLE_PARTITIONS"]
    # And later batches run to the end of the data
    for i in range(3, 10):
        txid = int(steps.begin(f"r{i}")["txid"])
        process_on_spark(steps, spark, txid, 0.0)
        if commit_on_spark(steps, spark, REFERENCE_TOPOLOGY, txid, 0.0)["records_in"] == 0:
            break
    # Then the analyst's query gives the source's word counts, key by key
    assert word_counts(pg_url, tt.TABLE) == dict(REFERENCE)
