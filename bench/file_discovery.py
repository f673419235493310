"""Benchmark: planning a file log batch behind a long history vs with none.

Usage::

    flock /tmp/heavy.lock .venv/bin/python bench/file_discovery.py [--consumed 100000]
        [--new 10] [--bucket 1000] [--rounds 7] [--repeat 20] [--data .work/bench/file_discovery]

Three layouts of partitions, generated once under ``--data``: ``history`` holds ``--consumed``
files already consumed (behind the mark, the name of the last file a batch took) and ``--new``
files after it; ``fresh`` holds only the ``--new`` files; ``empty`` (flat only) none.

* flat: every file in the partition directory;
* nested (``nested=True``): files in bucket directories of ``--bucket`` files (``b000042/``);
* hierarchical (``nested=True``): ``--bucket`` files an hour, ``day=0001/hour=17/``;

with the new files in the bucket after the mark's (the mark ends its bucket: the batch right
after a bucket rolled over). Each nested layout is timed plain and with ``trust_mtime=True``,
whose previous batch (planned here, taking the mark's file) left a stamp of the mark's bucket.
``flat idle``: with ``trust_mtime``, planning a partition with nothing new (``history``, mark
at its last file, after a batch that stamped it) vs an empty one.

Timed: ``FileLogSpout.plan`` of a batch of the ``--new`` files (listing, then the new files'
sizes), each sample the mean of ``--repeat`` calls, history and fresh alternating for
``--rounds`` rounds (order swapped every round, after one warm-up each). Printed: the median
and spread (min-max) of each, and ``ratio=`` history / fresh per layout (the goal: <= 1.2).
For comparison, the flat listing of two changes ago (pyarrow's ``FileSelector``: a ``stat`` of
every file, consumed or not): ``before_ratio=``.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyarrow import fs as pafs

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.spout.file_log import FileLogSpout

RECORD = b'{"s": "a b c"}\n'
SETTLED_S = 11  # the file log's stamp needs a directory unchanged for 10 s


def generate(data: Path, consumed: int, new: int, layout: str, bucket: int) -> tuple[Path, Any]:
    """The log under ``data`` (written once) and its file naming ``name(i)``."""
    root = data / f"log-{layout}{bucket if layout != 'flat' else ''}-{consumed}-{new}"

    def name(i: int) -> str:
        if layout == "flat":
            return f"{i:09d}.jsonl"
        b = i // bucket if i < consumed else (consumed - 1) // bucket + 1
        if layout == "nested":
            return f"b{b:06d}/{i:09d}.jsonl"
        return f"day={b // 24:04d}/hour={b % 24:02d}/{i:09d}.jsonl"

    done = root / "_done"
    if not done.exists():
        for partition, first in (("history", 0), ("fresh", consumed)):
            for i in range(first, consumed + new):
                path = root / partition / name(i)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(RECORD)
        done.write_text("ok")
    (root / "empty").mkdir(exist_ok=True)
    return root, name


def stamped(root: Path, nested: bool, previous: str, mark: str) -> dict[str, Any]:
    """The metadata of the ``history`` batch that took ``mark`` (after ``previous``), with the
    stamp of its directory (``trust_mtime``)."""
    spout = FileLogSpout(root, ["s"], nested=nested, trust_mtime=True, max_files=1)
    for _ in range(2):
        meta = spout.plan(TransactionAttempt(1, 1), "history", {"after": previous, "files": []})
        assert meta["after"] == mark, (meta["after"], mark)
        if "listed" in meta:
            return meta
        time.sleep(SETTLED_S)  # freshly generated: not settled yet
    raise AssertionError(f"no stamp for history at {mark}")


def before(spout: FileLogSpout, partition: str, after: str) -> list[Any]:
    """The listing before this change: every file of the partition with a ``stat``."""
    filesystem, base, _ = spout.filesystem()
    infos = filesystem.get_file_info(pafs.FileSelector(f"{base}/{partition}"))
    files = [i for i in infos if i.type == pafs.FileType.File and i.base_name[0] not in "_."]
    return sorted((i for i in files if i.base_name > after), key=lambda i: i.base_name)


def timed(fn: Callable[[], Any], want: int, repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        got = fn()
    elapsed = (time.perf_counter() - start) / repeat
    assert len(got) == want, (len(got), want)
    return elapsed


def rounds(
    label: str,
    history: Callable[[], Any],
    fresh: Callable[[], Any],
    want: int,
    n: int,
    repeat: int,
) -> float:
    timed(history, want, repeat), timed(fresh, want, repeat)  # warm-up (directory caches)
    h: list[float] = []
    f: list[float] = []
    for i in range(n):  # alternating, the order swapped every round
        pair = [(h, history), (f, fresh)] if i % 2 == 0 else [(f, fresh), (h, history)]
        for out, fn in pair:
            out.append(timed(fn, want, repeat))
    mh, mf = statistics.median(h), statistics.median(f)
    print(f"{label} history: median {mh * 1e3:.3f} ms, spread {min(h) * 1e3:.3f}-"
          f"{max(h) * 1e3:.3f} ms")  # fmt: skip
    print(f"{label} fresh:   median {mf * 1e3:.3f} ms, spread {min(f) * 1e3:.3f}-"
          f"{max(f) * 1e3:.3f} ms")  # fmt: skip
    return mh / mf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--consumed", type=int, default=100_000)
    parser.add_argument("--new", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--bucket", type=int, default=1000)
    parser.add_argument("--data", default=".work/bench/file_discovery")
    args = parser.parse_args()
    if args.rounds < 5:
        parser.error("--rounds must be >= 5")
    attempt = TransactionAttempt(1, 1)
    print(f"{args.consumed} consumed files behind the mark vs none; a batch of {args.new} new "
          f"files; {args.rounds} alternating rounds of {args.repeat} plans; {os.cpu_count()} "
          f"cores; load {os.getloadavg()[0]:.2f}")  # fmt: skip
    ratios: dict[str, float] = {}
    n, want = args.rounds, args.new

    def plan(spout: FileLogSpout, partition: str, last: Any) -> Callable[[], Any]:
        return lambda: spout.plan(attempt, partition, last)["files"]

    for layout in ("flat", "nested", "hierarchical"):
        root, name = generate(Path(args.data), args.consumed, args.new, layout, args.bucket)
        mark = name(args.consumed - 1)
        last = {"after": mark, "files": []}
        if layout == "flat":
            spout = FileLogSpout(root, ["s"])
            ratios["before"] = rounds(
                "flat, before (FileSelector)",
                functools.partial(before, spout, "history", mark),
                functools.partial(before, spout, "fresh", mark),
                want, n, args.repeat,
            )  # fmt: skip
            ratios["flat"] = rounds(
                "flat", plan(spout, "history", last), plan(spout, "fresh", last),
                want, n, args.repeat,
            )  # fmt: skip
            trusting = FileLogSpout(root, ["s"], trust_mtime=True)
            end = name(args.consumed + args.new - 1)
            idle = stamped(root, False, name(args.consumed + args.new - 2), end)
            ratios["flat idle, trust_mtime (nothing new)"] = rounds(
                "flat idle, trust_mtime (nothing new)",
                plan(trusting, "history", idle),
                plan(trusting, "empty", {"after": end, "files": []}),
                0, n, args.repeat,
            )  # fmt: skip
            continue
        label = f"{layout} ({args.bucket} files a bucket)"
        spout = FileLogSpout(root, ["s"], nested=True)
        ratios[label] = rounds(
            label, plan(spout, "history", last), plan(spout, "fresh", last),
            want, n, args.repeat,
        )  # fmt: skip
        trusting = FileLogSpout(root, ["s"], nested=True, trust_mtime=True)
        previous = stamped(root, True, name(args.consumed - 2), mark)
        label = f"{layout}, trust_mtime"
        ratios[label] = rounds(
            label, plan(trusting, "history", previous), plan(trusting, "fresh", last),
            want, n, args.repeat,
        )  # fmt: skip
    print(f"before_ratio={ratios.pop('before'):.2f} (flat, FileSelector)")
    for label, ratio in ratios.items():
        print(f"ratio={ratio:.2f} {label} (goal <= 1.2)")


if __name__ == "__main__":
    main()
