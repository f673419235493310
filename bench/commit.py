"""Benchmark: commit 1M partial counts to opaque state in PostgreSQL, ours against raw psycopg.

Usage::

    eval "$(bash scripts/services.sh env)"
    .venv/bin/python bench/commit.py [--keys 1000000] [--runs 3]

*ours* is the public path: ``OpaqueMap(SqlBackingMap(..., value_type="bigint"))``, then
``begin_commit(t); multi_combine(keys, deltas, CombineOp.SUM); commit(t)``. *raw* is the fastest
plain upsert of the same (key, count) rows with psycopg: COPY into a temporary table, then one
``INSERT ... SELECT ... ORDER BY key ON CONFLICT (key) DO UPDATE SET val = t.val + EXCLUDED.val``
into a ``(key text PRIMARY KEY, val bigint)`` table (no txid, no prev: no exactly-once).

Two cases, each on a fresh table: *empty* (every key is new) and *existing* (the table already
holds every key, written by an untimed earlier batch). Runs alternate ours/raw; the best of
``--runs`` is kept. The last line printed is ``ratio=<ours/raw throughput>`` of the worse case.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable
from functools import partial

import psycopg
import sqlalchemy as sa

from airflow_trident.state.combine import CombineOp
from airflow_trident.state.map.opaque import OpaqueMap
from airflow_trident.state.sql import SqlBackingMap
from airflow_trident.state.sql.engine import describe_url, shared_engine

OURS, RAW = "ours_opaque_bench", "raw_upsert_bench"


def make_rows(n: int, seed: int = 7) -> tuple[list[str], list[int]]:
    rng = random.Random(seed)
    keys = [f"word{i:08d}" for i in range(n)]
    rng.shuffle(keys)
    return keys, [rng.randint(1, 100) for _ in range(n)]


def raw_upsert(conn: psycopg.Connection, keys: list[str], deltas: list[int]) -> None:
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("CREATE TEMP TABLE raw_tmp (key text, val bigint) ON COMMIT DROP")
        with cur.copy("COPY raw_tmp (key, val) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["text", "int8"])
            for row in zip(keys, deltas, strict=True):
                copy.write_row(row)
        cur.execute(
            f"INSERT INTO {RAW} AS t (key, val) SELECT key, val FROM raw_tmp ORDER BY key "
            f"ON CONFLICT (key) DO UPDATE SET val = t.val + EXCLUDED.val"
        )


def fresh_raw(conn: psycopg.Connection) -> None:
    conn.execute(f"DROP TABLE IF EXISTS {RAW}")
    conn.execute(f"CREATE TABLE {RAW} (key text PRIMARY KEY, val bigint)")
    conn.commit()


def fresh_ours(engine: sa.Engine) -> OpaqueMap:
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS {OURS}"))
    return OpaqueMap(SqlBackingMap(engine, OURS, state_type="opaque", value_type="bigint"))


def ours_commit(state: OpaqueMap, txid: int, keys: list[tuple[str]], deltas: list[int]) -> None:
    state.begin_commit(txid)
    state.multi_combine(keys, deltas, CombineOp.SUM)
    state.commit(txid)


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def checkpoint(conn: psycopg.Connection) -> None:
    """Flush dirty pages between runs when allowed, so a checkpoint does not land in a run."""
    try:
        conn.execute("CHECKPOINT")
        conn.commit()
    except psycopg.Error:
        conn.rollback()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    url = os.environ.get("TRIDENT_PG_URL")
    if not url:
        print('TRIDENT_PG_URL unset: eval "$(bash scripts/services.sh env)"', file=sys.stderr)
        return 2
    engine = shared_engine(url)
    libpq_url = sa.make_url(url).set(drivername="postgresql").render_as_string(False)
    n = args.keys
    keys, deltas = make_rows(n)
    tuple_keys = [(k,) for k in keys]
    print(f"{n} keys, best of {args.runs}, {describe_url(engine)}")
    best: dict[tuple[str, str], float] = {}

    def keep(who: str, case: str, seconds: float) -> None:
        best[who, case] = min(best.get((who, case), float("inf")), seconds)
        print(f"  run {who:4} {case:8} {seconds:6.2f} s  {n / seconds:9,.0f} rows/s", flush=True)

    with psycopg.connect(libpq_url) as raw:
        for _ in range(args.runs):
            for case in ("empty", "existing"):
                state = fresh_ours(engine)
                if case == "existing":
                    ours_commit(state, 1, tuple_keys, deltas)
                checkpoint(raw)
                keep("ours", case, timed(partial(ours_commit, state, 2, tuple_keys, deltas)))
                fresh_raw(raw)
                if case == "existing":
                    raw_upsert(raw, keys, deltas)
                checkpoint(raw)
                keep("raw", case, timed(partial(raw_upsert, raw, keys, deltas)))
        raw.execute(f"DROP TABLE IF EXISTS {RAW}")
        raw.execute(f"DROP TABLE IF EXISTS {OURS}")
        raw.commit()
    ratios = []
    for case in ("empty", "existing"):
        ours, base = n / best["ours", case], n / best["raw", case]
        ratios.append(ours / base)
        print(
            f"{case:8}: ours {ours:9,.0f} rows/s  raw {base:9,.0f} rows/s  ratio {ours / base:.2f}"
        )
    print(f"ratio={min(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
