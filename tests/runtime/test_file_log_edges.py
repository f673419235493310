"""The file log's edges on both runtimes (in-process and Spark) and both state backends (SQLite,
PostgreSQL), on the real ZooKeeper (issue 19): mistyped records dead-lettered alike, strict
typed fields, a partition that vanishes for some batches and comes back, a missing root."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import SpoutUnavailableError
from airflow_trident.operation import Count, Function, Split
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.file_log import FileLogSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology

pytestmark = pytest.mark.integration
# Spark's tasks reading the file log into PostgreSQL state: the long tier's (the test command
# reads by Spark's tasks into SQLite, and by the driver into both backends)
LONG_PARAMS = [{"state_url": "postgresql", "process": "spark_tasks"}]


@pytest.fixture(params=["sqlite", "postgresql"])
def state_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        url: str = request.getfixturevalue("pg_url")
        return url
    return f"sqlite:///{tmp_path}/state.db"


@pytest.fixture
def table(state_url: str, unique_name: str) -> Iterator[str]:
    yield unique_name
    engine = sa.create_engine(state_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f'DROP TABLE IF EXISTS "{unique_name}"'))
    engine.dispose()


Process = Callable[[BatchSteps, int], Any]


@pytest.fixture(params=["local", "spark", "spark_tasks"])
def process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Process:
    """In process; on Spark, small batches read by the driver (the default); on Spark, read by
    Spark's tasks (the parallel read of large batches)."""
    if request.param == "local":
        return lambda steps, txid: steps.process_local(txid)
    if request.param == "spark_tasks":
        monkeypatch.setattr("airflow_trident.runtime.spark.driver_read.READ_HERE_BYTES", 0)
    spark = request.getfixturevalue("spark")
    from airflow_trident.batch.on_spark import process_on_spark

    return lambda steps, txid: process_on_spark(steps, spark, txid, 0.0)


class Describe(Function):
    """The tuple's values as one text (Python on both runtimes)."""

    def execute(self, tuple_: Any, collector: Any) -> None:
        collector.emit(("|".join(str(v) for v in tuple_.values),))


def land(root: Path, partition: str, name: str, lines: list[str]) -> None:
    (root / partition).mkdir(parents=True, exist_ok=True)
    tmp = root / partition / f"_{name}"
    tmp.write_text("".join(line + "\n" for line in lines))
    tmp.rename(root / partition / name)


def word_count(
    store: CoordinatorStore, spout: FileLogSpout, url: str, table: str, staging: Path
) -> BatchSteps:
    topology = TridentTopology(store.paths.topology)
    factory = sql_state(url, table, "transactional", key_fields=("w",), value_type="bigint")
    (
        topology.new_stream("lines", spout)
        .each(["s"], Split(), ["w"])
        .group_by(["w"])
        .persistent_aggregate(factory, Count(), ["n"], name="counts")
    )
    return BatchSteps(topology, store, StagingArea(str(staging), topology.name))


def batch(steps: BatchSteps, process: Process) -> dict[str, Any]:
    """One batch (or the retry of the pending one) begun, processed, committed, succeeded."""
    txid = int(steps.begin(None, steps.begins.pending_txid())["txid"])
    process(steps, txid)
    summary = steps.commit(txid)
    steps.success(txid)
    return summary


def stored(url: str, table: str) -> dict[str, int]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f'SELECT w, val FROM "{table}"')).all()
    engine.dispose()
    return {str(r[0]): int(r[1]) for r in rows}


MISTYPED = [
    json.dumps({"s": "one two", "n": 1}),
    json.dumps({"s": "two", "n": "five"}),  # n is not a bigint
    json.dumps({"s": 123}),  # not a string
    json.dumps({"s": True}),
    json.dumps({"s": ["x", "y"]}),
    json.dumps({"s": {"z": 1}}),
    json.dumps({"s": None, "n": 2}),  # null: None (no words)
    json.dumps({"n": 3}),  # missing: None
    json.dumps({"s": "three", "n": 4}),
]


def test_mistyped_records_are_dead_lettered_and_reach_no_state_on_either_runtime(
    zk_store: CoordinatorStore, tmp_path: Path, state_url: str, table: str, process: Process
) -> None:
    # Given a file whose records have values of other types than declared (n bigint, s string)
    land(tmp_path / "log", "a", "0.jsonl", MISTYPED)
    spout = FileLogSpout(
        tmp_path / "log", ["s", "n"], types={"n": "bigint"}, dead_letter=tmp_path / "dead"
    )
    steps = word_count(zk_store, spout, state_url, table, tmp_path / "staging")
    # When the batch runs (only s is used downstream)
    summary = batch(steps, process)
    # Then the five mistyped records are dead letters, counted nowhere
    assert summary["partitions"]["lines"]["a"]["dead_letters"] == 5
    assert summary["records_in"] == 4
    assert stored(state_url, table) == {"one": 1, "two": 1, "three": 1}
    letters = [json.loads(x) for f in (tmp_path / "dead").glob("a/*.jsonl") for x in f.open()]
    assert [x["line"] for x in letters] == [2, 3, 4, 5, 6]


def test_a_record_whose_unused_field_is_mistyped_is_dead_lettered_on_both_runtimes(
    zk_store: CoordinatorStore, tmp_path: Path, state_url: str, table: str, process: Process
) -> None:
    # Given a record whose n is not a bigint, n being used by no step downstream
    rows = [json.dumps({"s": "one", "n": 1}), json.dumps({"s": "two", "n": "five"})]
    land(tmp_path / "log", "a", "0.jsonl", rows)
    spout = FileLogSpout(
        tmp_path / "log", ["s", "n"], types={"n": "bigint"}, dead_letter=tmp_path / "dead"
    )
    steps = word_count(zk_store, spout, state_url, table, tmp_path / "staging")
    # When the batch runs: the record is a dead letter and reaches no state
    summary = batch(steps, process)
    assert (summary["records_in"], summary["partitions"]["lines"]["a"]["dead_letters"]) == (1, 1)
    assert stored(state_url, table) == {"one": 1}


RESCUE = [
    json.dumps({"s": "one two", "n": 1, "extra": [1]}),
    json.dumps({"s": 5, "n": "five"}),
    json.dumps({"s": "three"}),
    "not json",
]


def test_the_rescued_data_column_is_the_same_on_both_runtimes(
    zk_store: CoordinatorStore, tmp_path: Path, state_url: str, table: str, process: Process
) -> None:
    # Given rescue=True: values that do not fit and unknown fields go to _rescued_data
    land(tmp_path / "log", "a", "0.jsonl", RESCUE)
    spout = FileLogSpout(
        tmp_path / "log", ["s", "n"], types={"n": "bigint"}, rescue=True,
        dead_letter=tmp_path / "dead",
    )  # fmt: skip
    topology = TridentTopology(zk_store.paths.topology)
    factory = sql_state(state_url, table, "transactional", key_fields=("w",), value_type="bigint")
    (
        topology.new_stream("lines", spout)
        .each(["s", "n", "_rescued_data"], Describe(), ["w"])
        .group_by(["w"])
        .persistent_aggregate(factory, Count(), ["n2"], name="counts")
    )
    steps = BatchSteps(topology, zk_store, StagingArea(str(tmp_path / "st"), topology.name))
    # When the batch runs: only the line that is not JSON is a dead letter
    summary = batch(steps, process)
    assert (summary["records_in"], summary["partitions"]["lines"]["a"]["dead_letters"]) == (3, 1)
    assert stored(state_url, table) == {
        'one two|1|{"extra": [1]}': 1,
        'None|None|{"s": 5, "n": "five"}': 1,
        "three|None|None": 1,
    }


@pytest.mark.parametrize("away", ["renamed", "broken_link", "root_gone"])
def test_a_partition_away_for_some_batches_resumes_where_it_left(
    zk_store: CoordinatorStore,
    tmp_path: Path,
    state_url: str,
    table: str,
    process: Process,
    away: str,
) -> None:
    # Given partitions a and b, b behind a link (a mount), and txid 1 committed
    log, target = tmp_path / "log", tmp_path / "b_target"
    land(log, "a", "0.jsonl", [json.dumps({"s": "a0 x"})])
    land(tmp_path, "b_target", "0.jsonl", [json.dumps({"s": "b0 x"})])
    log.joinpath("b").symlink_to(target)
    steps = word_count(zk_store, FileLogSpout(log, ["s"]), state_url, table, tmp_path / "st")
    batch(steps, process)
    # When b is away (renamed, its link broken, or the whole root gone) during txids 2-4
    moved = tmp_path / "moved"
    if away == "renamed":
        target.rename(moved)
        (log / "b").unlink()
    elif away == "broken_link":
        target.rename(moved)
    else:
        log.rename(tmp_path / "log_away")
    for i in (2, 3, 4):
        if away == "root_gone":
            # nothing is committed, with a clear error; the txid is retried later
            with pytest.raises(SpoutUnavailableError, match=r"root .*does not exist"):
                batch(steps, process)
            assert steps.store.commits.committed_txid() == 1
        else:
            land(log, "a", f"{i}.jsonl", [json.dumps({"s": f"a{i} x"})])
            batch(steps, process)
    # and it comes back, with a new file
    if away == "renamed":
        moved.rename(target)
        log.joinpath("b").symlink_to(target)
    elif away == "broken_link":
        moved.rename(target)
    else:
        (tmp_path / "log_away").rename(log)
    land(target, "", "5.jsonl", [json.dumps({"s": "b5 x"})])
    assert steps.is_ready() is True
    summary = batch(steps, process)
    # Then b resumes right after its last committed file: every record counted once
    assert summary["partitions"]["lines"]["b"]["files"] == [{"name": "5.jsonl", "bytes": 14}]
    want = {"x": 2 + (3 if away != "root_gone" else 0) + 1, "a0": 1, "b0": 1, "b5": 1}
    if away != "root_gone":
        want |= {"a2": 1, "a3": 1, "a4": 1}
    assert stored(state_url, table) == want
    assert steps.is_ready() is False


def test_a_missing_root_is_a_clear_error_and_commits_nothing(
    zk_store: CoordinatorStore, tmp_path: Path, state_url: str, table: str, process: Process
) -> None:
    # Given a spout whose root does not exist (a typo, an unmounted share)
    root = tmp_path / "nowhere"
    steps = word_count(zk_store, FileLogSpout(root, ["s"]), state_url, table, tmp_path / "st")
    # Then readiness says why, and a batch fails clearly, committing nothing
    missing = re.escape(f"root {str(root)!r} does not exist")
    with pytest.raises(SpoutUnavailableError, match=missing):
        steps.is_ready()
    with pytest.raises(SpoutUnavailableError, match=r"does not exist.*Hint"):
        batch(steps, process)
    assert steps.store.commits.committed_txid() == 0
    # and once it exists, the pending txid takes its files
    land(root, "a", "0.jsonl", [json.dumps({"s": "late"})])
    assert steps.is_ready() is True
    assert batch(steps, process)["txid"] == 1
    assert stored(state_url, table) == {"late": 1}
    shutil.rmtree(root)
    assert not os.path.exists(root)


def test_an_inferred_schema_evolves_additively_and_a_replay_reads_with_its_old_schema(
    zk_store: CoordinatorStore, tmp_path: Path, state_url: str, table: str, process: Process
) -> None:
    # Given a JSON log whose schema is inferred (no types declared)
    log = tmp_path / "log"
    spout = FileLogSpout(log, ["s", "n", "m"], infer_schema=True, dead_letter=tmp_path / "dead")
    topology = TridentTopology(zk_store.paths.topology)
    factory = sql_state(state_url, table, "transactional", key_fields=("w",), value_type="bigint")
    (
        topology.new_stream("lines", spout)
        .each(["s", "n", "m"], Describe(), ["w"])
        .group_by(["w"])
        .persistent_aggregate(factory, Count(), ["c"], name="counts")
    )
    steps = BatchSteps(topology, zk_store, StagingArea(str(tmp_path / "st"), topology.name))
    # When txid 1 infers s and n, txid 2 adds m (and b joins), txid 3 has n of another type
    land(log, "a", "0.jsonl", [json.dumps({"s": "x", "n": 1})])
    first = batch(steps, process)["partitions"]["lines"]["a"]
    land(log, "a", "1.jsonl", [json.dumps({"s": "y", "n": 2, "m": True})])
    land(log, "b", "0.jsonl", [json.dumps({"s": "z", "n": 3, "m": False})])
    second = batch(steps, process)["partitions"]["lines"]
    land(log, "b", "1.jsonl", [json.dumps({"s": "w", "n": "four"}), json.dumps({"s": "v"})])
    third = batch(steps, process)["partitions"]["lines"]["b"]
    # Then each txid's metadata records the schema it read with, the additions named
    assert first["schema"] == {"s": "string", "n": "bigint"}
    assert first["schema_added"] == ["s", "n"]
    assert second["a"]["schema"] == {"s": "string", "n": "bigint", "m": "boolean"}
    assert second["a"]["schema_added"] == ["m"]
    assert second["b"]["schema"] == second["a"]["schema"]
    assert "schema_added" not in second["b"]  # b started from what a knew
    # and the incompatible value is a malformed record (dead-lettered here), naming the field
    assert third["dead_letters"] == 1
    letter = json.loads(next((tmp_path / "dead").glob("b/*.jsonl")).read_text())
    assert letter["error"] == "field 'n': \"four\" is not an integer"
    assert stored(state_url, table) == {
        "x|1|None": 1, "y|2|True": 1, "z|3|False": 1, "v|None|None": 1,
    }  # fmt: skip
    # When txid 1 is replayed after the evolution: it reads with the schema it had
    assert batch(steps, process)["txid"] == 4  # nothing new: an empty txid 4
    replay = steps.emit(steps.begins.new_attempt(1))["lines"]["a"]
    assert list(replay) == [("x", 1, None)]
    assert replay.ranges[0].read_spec().schema == (("s", "string"), ("n", "bigint"),
                                                   ("m", "null"))  # fmt: skip
    assert stored(state_url, table)["x|1|None"] == 1


def test_inference_and_rescue_options_that_cannot_work_are_refused_clearly(tmp_path: Path) -> None:
    from airflow_trident.errors import ConfigurationError
    from airflow_trident.spout.file_log import OpaqueFileLogSpout

    with pytest.raises(ConfigurationError, match="cannot infer_schema"):
        OpaqueFileLogSpout(tmp_path, ["s"], infer_schema=True)
    with pytest.raises(ConfigurationError, match="reads JSON lines"):
        FileLogSpout(tmp_path, ["s"], format="csv", infer_schema=True)
    with pytest.raises(ConfigurationError, match="rescue=True reads JSON or CSV"):
        FileLogSpout(tmp_path, ["s"], format="parquet", rescue=True)
