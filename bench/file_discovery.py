"""Benchmark: planning a file log batch behind a long history vs with none.

Usage::

    flock /tmp/heavy.lock .venv/bin/python bench/file_discovery.py [--consumed 100000]
        [--new 10] [--rounds 7] [--data .work/bench/file_discovery]

Two layouts of two partitions each, generated once under ``--data``: ``history`` holds
``--consumed`` files already consumed (behind the mark, the name of the last file a batch took)
and ``--new`` files after it; ``fresh`` holds only the ``--new`` files.

* flat: every file in the partition directory;
* nested (``nested=True``): files in bucket directories of ``--bucket`` files (``b00042/``),
  the new files in a bucket after the mark's.

Timed: ``FileLogSpout.plan`` of a batch of the ``--new`` files (listing, then the new files'
sizes) in each partition, the two alternating for ``--rounds`` rounds (after one warm-up each).
Printed: the median and spread (min-max) of each, and ``ratio=`` history / fresh per layout
(the goal: <= 1.2). For comparison, the flat listing before this change (pyarrow's
``FileSelector``: a ``stat`` of every file, consumed or not): ``before_ratio=``.
"""

from __future__ import annotations

import argparse
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


def generate(data: Path, consumed: int, new: int, bucket: int | None) -> tuple[Path, str]:
    """The log under ``data`` (written once) and the mark; ``bucket``: files per bucket
    directory (the new files in a bucket of their own), ``None``: flat."""
    layout = "flat" if bucket is None else f"nested{bucket}"
    root = data / f"log-{layout}-{consumed}-{new}"

    def name(i: int) -> str:
        if bucket is None:
            return f"{i:09d}.jsonl"
        b = i // bucket if i < consumed else (consumed - 1) // bucket + 1
        return f"b{b:06d}/{i:09d}.jsonl"

    done = root / "_done"
    if not done.exists():
        for partition, first in (("history", 0), ("fresh", consumed)):
            for i in range(first, consumed + new):
                path = root / partition / name(i)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(RECORD)
        done.write_text("ok")
    return root, name(consumed - 1)


def before(spout: FileLogSpout, partition: str, after: str) -> list[Any]:
    """The listing before this change: every file of the partition with a ``stat``."""
    filesystem, base, _ = spout.filesystem()
    infos = filesystem.get_file_info(pafs.FileSelector(f"{base}/{partition}"))
    files = [i for i in infos if i.type == pafs.FileType.File and i.base_name[0] not in "_."]
    return sorted((i for i in files if i.base_name > after), key=lambda i: i.base_name)


def timed(fn: Callable[[], Any], want: int) -> float:
    start = time.perf_counter()
    got = fn()
    elapsed = time.perf_counter() - start
    assert len(got) == want, (len(got), want)
    return elapsed


def rounds(
    label: str, history: Callable[[], Any], fresh: Callable[[], Any], want: int, n: int
) -> float:
    timed(history, want), timed(fresh, want)  # warm-up (directory caches)
    h, f = [], []
    for i in range(n):  # alternating, the order swapped every round
        pair = [(h, history), (f, fresh)] if i % 2 == 0 else [(f, fresh), (h, history)]
        for out, fn in pair:
            out.append(timed(fn, want))
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
    parser.add_argument("--bucket", type=int, default=1000)
    parser.add_argument("--data", default=".work/bench/file_discovery")
    args = parser.parse_args()
    if args.rounds < 5:
        parser.error("--rounds must be >= 5")
    attempt = TransactionAttempt(1, 1)
    print(f"{args.consumed} consumed files behind the mark vs none; a batch of {args.new} new "
          f"files; {args.rounds} alternating rounds; {os.cpu_count()} cores")  # fmt: skip
    ratios = {}
    for bucket in (None, args.bucket):
        root, mark = generate(Path(args.data), args.consumed, args.new, bucket)
        spout = FileLogSpout(root, ["s"], nested=bucket is not None)
        last = {"after": mark, "files": []}

        def plan(spout: FileLogSpout, partition: str, last: Any) -> Callable[[], Any]:
            return lambda: spout.plan(attempt, partition, last)["files"]

        label = "flat" if bucket is None else f"nested ({bucket} files a bucket)"
        if bucket is None:
            ratios["before"] = rounds(
                "flat, before (FileSelector)",
                lambda s=spout, m=mark: before(s, "history", m),
                lambda s=spout, m=mark: before(s, "fresh", m),
                args.new,
                args.rounds,
            )
        ratios[label] = rounds(
            label, plan(spout, "history", last), plan(spout, "fresh", last), args.new, args.rounds
        )
    print(f"before_ratio={ratios.pop('before'):.2f} (flat, FileSelector)")
    for label, ratio in ratios.items():
        print(f"ratio={ratio:.2f} {label} (goal <= 1.2)")


if __name__ == "__main__":
    main()
