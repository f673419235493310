"""File log discovery with ``trust_mtime``: an unchanged directory of the mark is not listed
again, and no landing is ever missed (a changed directory, a restored mtime, a directory too
fresh to trust). In-process: the listing runs where a batch is planned, on either runtime."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.errors import ConfigurationError
from airflow_trident.spout.file_log import FileLogSpout, OpaqueFileLogSpout
from tests.spout.test_file_log import counts, land, sentences, word_count


@pytest.fixture
def listed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The directories ``os.scandir`` reads (the real call, recorded)."""
    seen: list[str] = []
    real = os.scandir

    def scandir(path: Any) -> Any:
        seen.append(os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    return seen


@pytest.fixture
def later(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plan as a worker does 20 s after the files landed (the stamp's settling time, 10 s, is
    over): the worker's clock moved on, the files' times are as the filesystem wrote them."""
    real = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real() + 20 * 10**9)


def after_a_tick(directory: Path, clock: Path) -> None:
    """Wait until the filesystem's clock is past ``directory``'s times, so that a landing now
    changes them (a landing in the same clock tick would not: what the settling time is for)."""
    st = directory.stat()
    newest = max(st.st_mtime_ns, st.st_ctime_ns)
    clock.mkdir(exist_ok=True)
    for _ in range(100_000):
        probe = clock / "probe"
        probe.write_bytes(b"x")
        if probe.stat().st_ctime_ns > newest:
            return
    raise AssertionError("the filesystem clock did not move")


def plan(spout: FileLogSpout, txid: int, last: Any) -> dict[str, Any]:
    return spout.plan(TransactionAttempt(txid, 1), "a", last)


def test_an_unchanged_mark_bucket_is_not_listed_and_a_changed_one_is(
    tmp_path: Path, later: None, listed: list[str]
) -> None:
    # Given nested buckets, trust_mtime, and a batch that took every file of bucket b1
    root = tmp_path / "log"
    land(root, "a/b1", "1.jsonl", sentences("x"))
    land(root, "a/b1", "2.jsonl", sentences("x"))
    spout = FileLogSpout(root, ["s"], nested=True, trust_mtime=True)
    first = plan(spout, 1, None)
    assert [f["name"] for f in first["files"]] == ["b1/1.jsonl", "b1/2.jsonl"]
    st = (root / "a" / "b1").stat()
    assert first["listed"] == {"dir": "b1", "stamp": [st.st_ino, st.st_mtime_ns, st.st_ctime_ns]}
    # When files land in a new bucket: the next batch takes them without listing b1
    land(root, "a/b2", "1.jsonl", sentences("y"))
    listed.clear()
    second = plan(spout, 2, first)
    assert [f["name"] for f in second["files"]] == ["b2/1.jsonl"]
    assert str(root / "a" / "b1") not in listed
    assert str(root / "a" / "b2") in listed
    # When a file lands in b1 after the stamp: b1 changed, so it is listed and the file read
    after_a_tick(root / "a" / "b1", tmp_path / "clock")
    land(root, "a/b1", "3.jsonl", sentences("z"))
    again = plan(spout, 2, first)
    assert [f["name"] for f in again["files"]] == ["b1/3.jsonl", "b2/1.jsonl"]
    # When a landing's mtime is set back (rsync -t, cp -p): the change time still tells
    after_a_tick(root / "a" / "b1", tmp_path / "clock")
    old = (root / "a" / "b1").stat()
    land(root, "a/b1", "4.jsonl", sentences("z"))
    os.utime(root / "a" / "b1", ns=(old.st_atime_ns, old.st_mtime_ns))
    assert (root / "a" / "b1").stat().st_mtime_ns == old.st_mtime_ns
    names = [f["name"] for f in plan(spout, 2, first)["files"]]
    assert names == ["b1/3.jsonl", "b1/4.jsonl", "b2/1.jsonl"]


def test_a_directory_changed_within_the_settling_time_gets_no_stamp(tmp_path: Path) -> None:
    # Given trust_mtime and files that landed just now (the worker's real clock)
    root = tmp_path / "log"
    land(root, "a", "1.jsonl", sentences("x"))
    spout = FileLogSpout(root, ["s"], trust_mtime=True)
    # When a batch takes them: no stamp (a landing in the same clock tick could share it)
    first = plan(spout, 1, None)
    assert "listed" not in first
    # Then a file landing right after is read by the next batch
    land(root, "a", "2.jsonl", sentences("y"))
    assert [f["name"] for f in plan(spout, 2, first)["files"]] == ["2.jsonl"]


def test_a_stamp_of_another_directory_or_a_replaced_one_is_not_trusted(
    tmp_path: Path, later: None
) -> None:
    # Given a stamp of bucket b1
    root = tmp_path / "log"
    land(root, "a/b1", "1.jsonl", sentences("x"))
    spout = FileLogSpout(root, ["s"], nested=True, trust_mtime=True)
    first = plan(spout, 1, None)
    # When b1 is replaced by a directory with more files (another inode): its files are read
    (root / "a" / "b1").rename(root / "a" / ".old")
    land(root, "a/b1", "1.jsonl", sentences("x"))
    land(root, "a/b1", "2.jsonl", sentences("y"))
    assert [f["name"] for f in plan(spout, 2, first)["files"]] == ["b1/2.jsonl"]
    # When the stamp names another directory than the mark's: it is ignored
    moved = {**first, "listed": {**first["listed"], "dir": "b0"}}
    assert [f["name"] for f in plan(spout, 2, moved)["files"]] == ["b1/2.jsonl"]


@pytest.mark.parametrize("kind", ["transactional", "opaque"])
def test_an_idle_flat_partition_is_not_listed_by_is_ready_or_a_batch(
    tmp_path: Path, later: None, listed: list[str], kind: str
) -> None:
    # Given a flat partition, trust_mtime, and a batch that took every file
    root = tmp_path / "log"
    for i in range(3):
        land(root, "a", f"{i}.jsonl", sentences("x"))
    cls = FileLogSpout if kind == "transactional" else OpaqueFileLogSpout
    steps = word_count(cls(root, ["s"], trust_mtime=True), f"fd_idle_{kind}", kind)
    assert steps.run_batch().records_in == 3
    # When nothing lands: is_ready and an empty batch do not list the partition
    listed.clear()
    assert steps.is_ready() is False
    assert steps.run_batch().records_in == 0
    assert str(root / "a") not in listed
    assert steps.is_ready() is False
    # When a file lands: it is seen and read exactly once
    after_a_tick(root / "a", tmp_path / "clock")
    land(root, "a", "3.jsonl", sentences("x y"))
    assert steps.is_ready() is True
    assert steps.run_batch().records_in == 1
    assert steps.is_ready() is False
    assert counts(steps, ["x", "y"]) == {"x": 4, "y": 1}


def test_hierarchical_buckets_are_pruned_level_by_level_and_exactly(
    tmp_path: Path, listed: list[str]
) -> None:
    # Given day/hour buckets (trust_mtime off, the default) and a mark in day=2/hour=05
    root = tmp_path / "log"
    for day, hour in (("day=1", "hour=23"), ("day=2", "hour=04"), ("day=2", "hour=05")):
        land(root, f"a/{day}/{hour}", "1.jsonl", sentences("old"))
    spout = FileLogSpout(root, ["s"], nested=True)
    mark = "day=2/hour=05/1.jsonl"
    # When files land after it: in the mark's hour, a later hour, a later day
    land(root, "a/day=2/hour=05", "2.jsonl", sentences("x"))
    land(root, "a/day=2/hour=06", "1.jsonl", sentences("x"))
    land(root, "a/day=3/hour=00", "1.jsonl", sentences("x"))
    listed.clear()
    names = [f["name"] for f in plan(spout, 2, {"after": mark, "files": []})["files"]]
    # Then each is taken once, in path order, and no directory behind the mark's is listed
    assert names == ["day=2/hour=05/2.jsonl", "day=2/hour=06/1.jsonl", "day=3/hour=00/1.jsonl"]
    assert {os.path.relpath(d, root / "a") for d in listed} == {
        ".",
        "day=2",
        "day=2/hour=05",
        "day=2/hour=06",
        "day=3",
        "day=3/hour=00",
    }
    # And a file named behind the mark (a late landing in an older hour) is never read
    land(root, "a/day=2/hour=04", "2.jsonl", sentences("late"))
    again = [f["name"] for f in plan(spout, 2, {"after": mark, "files": []})["files"]]
    assert again == names


def test_the_stamp_skips_only_its_own_directory_not_a_deeper_bucket(
    tmp_path: Path, later: None, listed: list[str]
) -> None:
    # Given day/hour buckets, trust_mtime, a stamp of day=1/hour=05 (every file of it taken)
    # and an empty later hour that already exists
    root = tmp_path / "log"
    land(root, "a/day=1/hour=05", "1.jsonl", sentences("x"))
    (root / "a" / "day=1" / "hour=06").mkdir()
    spout = FileLogSpout(root, ["s"], nested=True, trust_mtime=True)
    first = plan(spout, 1, None)
    assert first["listed"]["dir"] == "day=1/hour=05"
    # When a file lands in hour=06: no ancestor's times change (day=1 keeps its entries)
    day = (root / "a" / "day=1").stat()
    after_a_tick(root / "a" / "day=1", tmp_path / "clock")
    land(root, "a/day=1/hour=06", "1.jsonl", sentences("y"))
    assert (root / "a" / "day=1").stat().st_mtime_ns == day.st_mtime_ns
    # Then the next batch takes it; only the stamped hour=05 goes unlisted
    listed.clear()
    second = plan(spout, 2, first)
    assert [f["name"] for f in second["files"]] == ["day=1/hour=06/1.jsonl"]
    assert str(root / "a" / "day=1" / "hour=05") not in listed
    assert str(root / "a" / "day=1" / "hour=06") in listed


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_trusting_times_takes_every_file_exactly_once_as_listing_does(
    tmp_path: Path, later: None, listed: list[str], seed: int
) -> None:
    # Given random landings in arrival order (buckets rolling over, bursts, idle spells) and
    # two spouts over the same log, one trusting the directories' times
    rng = random.Random(seed)
    root = tmp_path / "log"
    plain = FileLogSpout(root, ["s"], nested=True, max_files=3)
    trusting = FileLogSpout(root, ["s"], nested=True, max_files=3, trust_mtime=True)
    metas: dict[str, Any] = {"plain": None, "trusting": None}
    taken: dict[str, list[str]] = {"plain": [], "trusting": []}
    landed: list[str] = []
    bucket, n, skipped = 0, 0, 0
    for txid in range(1, 80):
        # When 0-4 files land (the filesystem clock moved on, as after the settling time)
        for _ in range(rng.choice([0, 0, 1, 2, 4])):
            if rng.random() < 0.2:
                bucket += 1
            directory = root / "a" / f"b{bucket:03d}"
            if directory.exists():
                after_a_tick(directory, tmp_path / "clock")
            n += 1
            land(root, f"a/b{bucket:03d}", f"{n:05d}.jsonl", sentences("x"))
            landed.append(f"b{bucket:03d}/{n:05d}.jsonl")
        (root / "a").mkdir(parents=True, exist_ok=True)
        # Then a batch of each takes the same files, and each landed file exactly once
        for name, spout in (("plain", plain), ("trusting", trusting)):
            listed.clear()
            previous = metas[name]
            meta = plan(spout, txid, previous)
            metas[name] = meta
            taken[name] += [f["name"] for f in meta["files"]]
            if name == "trusting" and (previous or {}).get("listed"):
                skipped += f"{root}/a/{previous['listed']['dir']}" not in listed
        assert taken["trusting"] == taken["plain"]
    for name, spout in (("plain", plain), ("trusting", trusting)):
        while (meta := plan(spout, 99, metas[name]))["files"]:
            metas[name] = meta
            taken[name] += [f["name"] for f in meta["files"]]
    assert taken["plain"] == taken["trusting"] == landed
    assert skipped > 0  # the trusting spout did skip unchanged directories


def test_trust_mtime_is_refused_for_a_remote_root() -> None:
    with pytest.raises(ConfigurationError, match="trust_mtime=True trusts a local directory"):
        FileLogSpout("s3://bucket/log", ["s"], trust_mtime=True)
    assert FileLogSpout("file:///tmp/log", ["s"], trust_mtime=True).trust_mtime
