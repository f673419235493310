"""The file log spouts in-process: files fixed per txid, limits, landing, malformed records, an
unreadable partition (a partition behind a broken link), CSV and Parquet."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.errors import MalformedRecordError, SpoutEmitError
from airflow_trident.operation import Count, Split
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.file_log import FileLogSpout, OpaqueFileLogSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology


def land(root: Path, partition: str, name: str, lines: list[str]) -> Path:
    """Land a file the documented way: written under a temp name, then renamed."""
    directory = root / partition
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f"_{name}"
    tmp.write_text("".join(line + "\n" for line in lines))
    return tmp.rename(directory / name)


def sentences(*texts: str) -> list[str]:
    return [json.dumps({"s": t}) for t in texts]


def word_count(
    spout: Any, name: str, kind: str = "transactional", staging: Path | None = None
) -> BatchSteps:
    t = TridentTopology(name)
    t.new_stream("lines", spout).each(["s"], Split(), ["w"]).group_by(["w"]).persistent_aggregate(
        memory_state(name, kind), Count(), ["n"], name="counts"
    )
    area = StagingArea(str(staging), t.name) if staging is not None else None
    return BatchSteps(t, MemoryCoordinatorStore(t.name), area)


def counts(steps: BatchSteps, words: list[str]) -> dict[str, Any]:
    values = steps.query_state("counts").multi_get([(w,) for w in words])
    return {w: v for w, v in zip(words, values, strict=True) if v is not None}


def emitted(steps: BatchSteps, txid: int) -> dict[str, list[tuple[Any, ...]]]:
    return {p: list(rows) for p, rows in steps.emit(steps.plan(txid))["lines"].items()}


def test_batches_take_files_in_name_order_within_the_limits_and_replay_exactly(
    tmp_path: Path,
) -> None:
    # Given two partitions of three files each, a temp file and a dot file
    for p in ("a", "b"):
        for i in range(3):
            land(tmp_path, p, f"{i:03d}.jsonl", sentences(f"{p}{i} x", f"{p}{i}"))
    (tmp_path / "a" / "_landing.jsonl").write_text("half a rec")
    (tmp_path / "a" / ".hidden.jsonl").write_text("not json\n")
    steps = word_count(FileLogSpout(tmp_path, ["s"], max_files=2), "fl_limits")
    # When two batches run
    first, second = steps.run_batch(), steps.run_batch()
    # Then each takes at most two files per partition, in name order, and nothing is left
    assert (first.records_in, second.records_in) == (8, 4)
    assert counts(steps, ["x", "a0", "a2", "b1"]) == {"x": 6, "a0": 2, "a2": 2, "b1": 2}
    assert steps.is_ready() is False
    # When txid 1 is emitted again after more files landed: the very same tuples
    land(tmp_path, "a", "003.jsonl", sentences("late"))
    assert steps.is_ready() is True
    assert emitted(steps, 1) == {
        "a": [("a0 x",), ("a0",), ("a1 x",), ("a1",)],
        "b": [("b0 x",), ("b0",), ("b1 x",), ("b1",)],
    }
    # and a replay of the committed txid changes nothing
    assert steps.replay(1).committed is False
    assert counts(steps, ["x"]) == {"x": 6}


def test_records_and_bytes_limits_and_a_partition_that_appears_later(tmp_path: Path) -> None:
    # Given files of 3 records each and a limit of 4 records per partition per batch
    for i in range(3):
        land(tmp_path, "a", f"{i}.jsonl", sentences("r", "r", "r"))
    steps = word_count(FileLogSpout(tmp_path, ["s"], max_records=4), "fl_records")
    # Then a batch takes files until the limit is reached (at least one file)
    assert steps.run_batch().records_in == 6
    # When a new partition appears, the next batch picks it up
    land(tmp_path, "new", "0.jsonl", sentences("n"))
    report = steps.run_batch()
    assert report.records_in == 4
    assert counts(steps, ["r", "n"]) == {"r": 9, "n": 1}
    # And a byte limit below one file's size still takes one file per batch
    bytes_steps = word_count(FileLogSpout(tmp_path, ["s"], max_bytes=1), "fl_bytes")
    assert bytes_steps.run_batch().records_in == 4  # a: 1 file of 3, new: 1 file of 1


def test_a_malformed_record_fails_the_batch_naming_file_and_line(tmp_path: Path) -> None:
    # Given a file whose second record is not JSON
    path = land(tmp_path, "a", "0.jsonl", [*sentences("ok"), '{"s": "broken', *sentences("b")])
    steps = word_count(FileLogSpout(tmp_path, ["s"]), "fl_malformed")
    # When the batch runs: it fails naming the file and the line, and nothing is committed
    with pytest.raises(MalformedRecordError, match=f"{path} line 2: .*dead_letter"):
        steps.run_batch()
    assert steps.store.commits.committed_txid() == 0
    assert counts(steps, ["ok", "b"]) == {}


def test_malformed_records_go_to_the_dead_letter_location_and_are_counted(
    tmp_path: Path,
) -> None:
    # Given a dead-letter location and a file with two malformed records
    log, dead = tmp_path / "log", tmp_path / "dead"
    land(log, "a", "0.jsonl", [*sentences("ok"), "nope", '["a list"]', *sentences("ok")])
    steps = word_count(
        FileLogSpout(log, ["s"], dead_letter=dead), "fl_dead", staging=tmp_path / "st"
    )
    # When the batch runs: the good records count, the bad ones are in the dead letters
    txid = int(steps.begin(None)["txid"])
    steps.process_local(txid)
    summary = steps.commit(txid)
    assert counts(steps, ["ok"]) == {"ok": 2}
    assert summary["records_in"] == 2
    assert summary["partitions"]["lines"]["a"]["dead_letters"] == 2
    letters = [json.loads(x) for f in sorted(dead.glob("a/*.jsonl")) for x in f.open()]
    assert [(x["line"], x["record"]) for x in letters] == [(2, "nope"), (3, '["a list"]')]


def test_a_replay_refuses_a_file_changed_since_its_txid_was_fixed(tmp_path: Path) -> None:
    # Given txid 1 emitted (its files fixed) and then one of its files rewritten
    path = land(tmp_path / "log", "a", "0.jsonl", sentences("one"))
    steps = word_count(FileLogSpout(tmp_path / "log", ["s"]), "fl_changed", staging=tmp_path)
    txid = int(steps.begin(None)["txid"])
    steps.process_local(txid)
    path.write_text("\n".join(sentences("one", "two")) + "\n")
    # Then emitting txid 1 again fails, naming the file
    with pytest.raises(SpoutEmitError, match=r"0\.jsonl was 13 bytes when .* is 26 bytes now"):
        steps.process_local(txid)


def test_opaque_skips_an_unreadable_partition_and_catches_it_up(tmp_path: Path) -> None:
    # Given partition b behind a link whose target is gone (an unmounted share)
    log, target = tmp_path / "log", tmp_path / "b_target"
    land(log, "a", "0.jsonl", sentences("x a"))
    land(tmp_path, "b_target", "0.jsonl", sentences("x b"))
    os.symlink(tmp_path / "gone", log / "b")
    steps = word_count(OpaqueFileLogSpout(log, ["s"]), "fl_opaque", "opaque")
    # When a batch runs: b is skipped
    assert steps.run_batch().records_in == 1
    assert counts(steps, ["x", "b"]) == {"x": 1}
    # When b is back and more files landed: the next batch catches it up, totals exact
    (log / "b").unlink()
    os.symlink(target, log / "b")
    land(log, "a", "1.jsonl", sentences("x"))
    assert steps.is_ready() is True
    assert steps.run_batch().records_in == 2
    assert counts(steps, ["x", "a", "b"]) == {"x": 3, "a": 1, "b": 1}
    assert steps.is_ready() is False


def test_csv_and_parquet_files_give_the_same_tuples_as_json(tmp_path: Path) -> None:
    # Given the same records as CSV (a header line) and as Parquet, with a typed field
    land(tmp_path / "csv", "a", "0.csv", ["s,n", "a b,1", "c,2"])
    (tmp_path / "pq" / "a").mkdir(parents=True)
    table = pa.table({"s": ["a b", "c"], "n": pa.array([1, 2], pa.int32())})
    pq.write_table(table, tmp_path / "pq" / "a" / "0.parquet")
    types = {"n": "bigint"}
    rows = {}
    for fmt, root in (("csv", tmp_path / "csv"), ("parquet", tmp_path / "pq")):
        spout = FileLogSpout(root, ["s", "n"], format=fmt, types=types)
        steps = word_count(spout, f"fl_{fmt}")
        rows[fmt] = emitted(steps, int(steps.begin(None)["txid"]))
    # Then both emit the typed tuples
    assert rows["csv"] == rows["parquet"] == {"a": [("a b", 1), ("c", 2)]}
    assert Counter(type(v) for r in rows["csv"]["a"] for v in r) == Counter({str: 2, int: 2})


def test_nested_buckets_are_read_in_path_order_and_consumed_buckets_are_not_listed(
    tmp_path: Path,
) -> None:
    # Given nested=True and files in bucket directories of a partition
    land(tmp_path, "a/2026-01-01", "1.jsonl", sentences("x one"))
    land(tmp_path, "a/2026-01-01", "2.jsonl", sentences("x two"))
    land(tmp_path, "a/2026-01-02", "1.jsonl", sentences("x three"))
    spout = FileLogSpout(tmp_path, ["s"], nested=True, max_files=2)
    steps = word_count(spout, "fl_nested")
    # When batches run: files in path order, a bucket at a time within the limits
    assert steps.run_batch().records_in == 2
    assert steps.run_batch().records_in == 1
    assert counts(steps, ["x"]) == {"x": 3}
    # Then a bucket behind the mark's is not listed (a broken link there does not matter)
    (tmp_path / "a" / "2026-01-01").rename(tmp_path / ".away")
    (tmp_path / "a" / "2026-01-01").symlink_to(tmp_path / "gone")
    assert spout.new_files("a", "2026-01-02/1.jsonl") == []
    land(tmp_path, "a/2026-01-03", "1.jsonl", sentences("x four"))
    assert spout.new_files("a", "2026-01-02/1.jsonl") == [("2026-01-03/1.jsonl", 16)]
    assert steps.run_batch().records_in == 1
    assert counts(steps, ["x", "four"]) == {"x": 4, "four": 1}


def test_typed_fields_are_strict_and_null_gives_no_words(tmp_path: Path) -> None:
    # Given string values of other JSON types, a null and a missing field
    rows = [json.dumps({"s": v}) for v in (123, True, ["a"], {"b": 1})]
    land(tmp_path / "log", "a", "0.jsonl", [*rows, '{"s": null}', "{}", *sentences("ok")])
    spout = FileLogSpout(tmp_path / "log", ["s"], dead_letter=tmp_path / "dead")
    steps = word_count(spout, "fl_strict")
    # When the batch runs: the four are dead letters; null and missing are None (no words)
    assert steps.run_batch().records_in == 3
    assert counts(steps, ["ok", "None", "123", "True", "true"]) == {"ok": 1}
    letters = [json.loads(x) for f in (tmp_path / "dead").glob("a/*") for x in f.open()]
    assert [x["error"] for x in letters] == [
        "field 's': 123 is not a string",
        "field 's': true is not a string",
        "field 's': [\"a\"] is not a string",
        "field 's': {\"b\": 1} is not a string",
    ]
