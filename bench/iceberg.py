"""Iceberg sink vs pyiceberg's own write of the same Arrow table (1M rows).

Append: ``iceberg_state(...)`` committing one partition (txid check, schema check, the txid in
the snapshot summary and table properties, one commit) against ``table.append(data)``.
Merge: the sink with ``merge_keys`` (upsert of every key of a 1M-row table) against
``table.upsert(data, join_cols=[...])``. Both write the same rows, the baseline's table carrying
the txid column precomputed. SQL catalog on SQLite, warehouse on the local disk; each round
writes fresh tables; rounds alternate which goes first. Prints each case's median and spread
(min-max) of ours/baseline throughput ratio, then ``ratio=`` (the lower median).

    flock /tmp/heavy.lock .venv/bin/python bench/iceberg.py [--rows 1000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import pyarrow as pa

from airflow_trident.state.iceberg import iceberg_state


def make_data(n: int, txid: int) -> pa.Table:
    return pa.table(
        {
            "key": pa.array([f"k{i:08d}" for i in range(n)]),
            "user": pa.array([i % 1000 for i in range(n)], pa.int64()),
            "n": pa.array([i * txid for i in range(n)], pa.int64()),
        }
    )


def with_txid(data: pa.Table, txid: int) -> pa.Table:
    return data.append_column("trident_txid", pa.array([txid] * data.num_rows, pa.int64()))


def write_ours(sink: Any, data: pa.Table) -> None:
    """The sink's commit of txid 2."""
    sink.begin_commit(2)
    sink.write(data)
    sink.commit(2)


def write_baseline(catalog: Any, name: str, data: pa.Table, merge: bool) -> None:
    """pyiceberg's own append (or upsert) of the same rows with their txid column."""
    table = catalog.load_table(name)
    if merge:
        table.upsert(with_txid(data, 2), join_cols=["key"])
    else:
        table.append(with_txid(data, 2))


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cases", default="append,merge")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-iceberg-")
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp}/c.db", "warehouse": f"file://{tmp}/wh"}
    first, second = make_data(args.rows, 1), make_data(args.rows, 2)
    print(f"{args.rows:,} rows, {args.rounds} alternating rounds, SQLite catalog in {tmp}")
    ratios: dict[str, list[float]] = {}
    for case in args.cases.split(","):
        merge = case == "merge"
        for r in range(args.rounds):
            name = f"bench.t{uuid.uuid4().hex[:8]}"
            keys = ("key",) if merge else ()
            factory = iceberg_state(f"{name}_ours", "bench.ours", catalog=catalog, merge_keys=keys)
            sink = factory.make_state()
            cat = factory.load_catalog()
            cat.create_namespace_if_not_exists("bench")
            base = cat.create_table(f"{name}_base", schema=with_txid(first, 1).schema)
            if merge:  # both start from the same 1M-row table at txid 1
                sink.begin_commit(1)
                sink.write(first)
                sink.commit(1)
                base.append(with_txid(first, 1))
            data = second if merge else first

            ours = partial(write_ours, sink, data)
            baseline = partial(write_baseline, cat, f"{name}_base", data, merge)
            if r % 2 == 0:
                t_ours, t_base = timed(ours), timed(baseline)
            else:
                t_base, t_ours = timed(baseline), timed(ours)
            ratios.setdefault(case, []).append(t_base / t_ours)
            print(
                f"  {case:6} round {r + 1}: ours {t_ours:6.2f} s  pyiceberg {t_base:6.2f} s  "
                f"ratio {t_base / t_ours:.3f}",
                flush=True,
            )
            rows = factory.load_table().scan().to_arrow().num_rows
            assert rows == args.rows, (case, rows)
    for case, values in ratios.items():
        print(
            f"{case:6}: median ratio {statistics.median(values):.3f} "
            f"(spread {min(values):.3f}-{max(values):.3f})"
        )
    print(f"ratio={min(statistics.median(v) for v in ratios.values()):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
