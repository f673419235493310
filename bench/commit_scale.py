"""Benchmark: commit time of the same small batch with 10,000,000 vs 10,000 keys already in
PostgreSQL state (target <= 1.3x).

Usage::

    eval "$(bash scripts/services.sh env)"
    flock /tmp/heavy.lock .venv/bin/python bench/commit_scale.py [--small 10000]
        [--large 10000000] [--batch 10000] [--runs 7] [--state-type opaque] [--txid-index]
        [--reuse] [--explain] [--fillfactor 85] [--prefix commit_scale_bench]

Two state tables in the state's own layout (``sql_state(..., value_type="bigint")``: ``key text
PRIMARY KEY, txid, val, prev``; ``--txid-index`` adds the opaque table's txid index) are
bulk-loaded with COPY, keys ``w<2i>`` in key order, then ``ANALYZE``-d. The batch is ``--batch``
keys, half of them stored (spread over the whole table) and half new (odd numbers, so they land
between stored keys all over the primary key); the timed part is the public commit path,
``begin_commit(t); multi_combine(keys, deltas, SUM); commit(t)`` (COPY into a temporary table,
one ``INSERT ... SELECT ... ON CONFLICT DO UPDATE``, the commit's fsync). After each run the new
keys are deleted (untimed) so every run commits the same batch against the same table. Runs
alternate small/large; the median of ``--runs`` is kept. ``--reuse`` keeps tables loaded by an
earlier run (same sizes); ``--explain`` prints ``EXPLAIN (ANALYZE, BUFFERS)`` of the upsert on
each table (rolled back); ``--fillfactor`` sets the heap's fillfactor before the load (room
for HOT updates; an experiment, not the product's layout). The last line is
``ratio=<large/small>``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Iterator

import psycopg
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

from airflow_trident.state.base import StateType
from airflow_trident.state.combine import CombineOp
from airflow_trident.state.sql import sql_state
from airflow_trident.state.sql.bulk import PgBulk
from airflow_trident.state.sql.engine import describe_url, shared_engine
from airflow_trident.state.sql.factory import SqlMapStateFactory
from airflow_trident.state.sql.table import NULL_KEYS

PREFIX = "commit_scale_bench"  # tables <prefix>_<keys>; --prefix sets another


def stored_key(i: int) -> str:
    return f"w{2 * i:010d}"


def new_key(i: int) -> str:
    return f"w{2 * i + 1:010d}"


def factory(url: str, n: int, args: argparse.Namespace) -> SqlMapStateFactory:
    return sql_state(url, f"{args.prefix}_{n}", args.state_type, value_type="bigint",
                     txid_index=args.txid_index)  # fmt: skip


def rows(n: int) -> Iterator[tuple[str, int, int, None]]:
    for i in range(n):
        yield stored_key(i), 1, i % 100 + 1, None


def load(raw: psycopg.Connection, url: str, n: int, args: argparse.Namespace) -> float:
    """Create the table (the state's layout) and COPY ``n`` rows into it; the seconds taken."""
    table = f"{args.prefix}_{n}"
    if args.reuse:
        found = raw.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
        if found and found[0]:
            count = raw.execute(f"SELECT count(*) FROM {table}").fetchone()
            if count and count[0] == n:
                return 0.0
    raw.execute(f"DROP TABLE IF EXISTS {table}")
    raw.commit()
    factory(url, n, args).make_state()  # creates the table and its indexes
    if args.fillfactor:
        raw.execute(f"ALTER TABLE {table} SET (fillfactor = {int(args.fillfactor)})")
    started = time.perf_counter()
    with raw.cursor() as cur:
        with cur.copy(f"COPY {table} (key, txid, val, prev) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["text", "int8", "int8", "int8"])
            for row in rows(n):
                copy.write_row(row)
        cur.execute(f"ANALYZE {table}")
    raw.commit()
    return time.perf_counter() - started


def batch(n: int, size: int, seed: int = 11) -> tuple[list[tuple[str]], list[int]]:
    """``size`` keys: half stored (spread over the ``n`` stored keys), half new, shuffled."""
    rng = random.Random(seed)
    half = size // 2
    picks = rng.sample(range(n), half) + rng.sample(range(n), size - half)
    keys = [(stored_key(i),) for i in picks[:half]] + [(new_key(i),) for i in picks[half:]]
    rng.shuffle(keys)
    return keys, [rng.randint(1, 9) for _ in keys]


def commit_once(
    state: object, txid: int, keys: list[tuple[str]], deltas: list[int]
) -> tuple[float, float, float]:
    """Seconds of ``begin_commit``, ``multi_combine`` (COPY + upsert) and ``commit`` (fsync)."""
    t0 = time.perf_counter()
    state.begin_commit(txid)  # type: ignore[attr-defined]
    t1 = time.perf_counter()
    state.multi_combine(keys, deltas, CombineOp.SUM)  # type: ignore[attr-defined]
    t2 = time.perf_counter()
    state.commit(txid)  # type: ignore[attr-defined]
    return t1 - t0, t2 - t1, time.perf_counter() - t2


def last_txid(raw: psycopg.Connection, tables: list[str]) -> int:
    """The highest txid stored in ``tables`` (a table kept by an earlier run holds its txids:
    this run's commits must come after them, or opaque state would see them as replays)."""
    found = [raw.execute(f"SELECT coalesce(max(txid), 1) FROM {t}").fetchone() for t in tables]
    raw.commit()
    return max(int(row[0]) if row else 1 for row in found)


def undo_new(raw: psycopg.Connection, table: str, keys: list[tuple[str]]) -> None:
    news = [k for (k,) in keys if int(k[1:]) % 2 == 1]
    raw.execute(f"DELETE FROM {table} WHERE key = ANY(%s)", (news,))
    raw.commit()


def explain(raw: psycopg.Connection, url: str, n: int, args: argparse.Namespace,
            keys: list[tuple[str]], deltas: list[int], txid: int) -> None:  # fmt: skip
    """Print the plan of the batch's upsert on table ``n`` (rolled back)."""
    layout = factory(url, n, args).layout
    bulk = PgBulk(layout)
    stmt = bulk.combine_statement(CombineOp.SUM, StateType.parse(args.state_type), grouped=False)
    sql = str(stmt.compile(dialect=pg.dialect(), compile_kwargs={"render_postcompile": True}))
    sql = sql.replace("%(txid)s", str(txid))
    with raw.cursor() as cur:
        # the state's own bulk table: its key columns, trident_null_keys and the value
        cur.execute(f"CREATE TEMP TABLE _trident_bulk (key text, {NULL_KEYS} bigint, val bigint)")
        with cur.copy(f"COPY _trident_bulk (key, {NULL_KEYS}, val) FROM STDIN") as copy:
            for (k,), d in zip(keys, deltas, strict=True):
                copy.write_row((k, 0, d))
        plan = cur.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}").fetchall()
    raw.rollback()
    print(f"-- EXPLAIN of the upsert, {n:,} stored keys:")
    for (line,) in plan:
        print(f"   {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=10_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--state-type", default="opaque", choices=["opaque", "transactional"])
    parser.add_argument("--txid-index", action="store_true")
    parser.add_argument("--reuse", action="store_true", help="keep tables loaded before")
    parser.add_argument("--keep", action="store_true", help="do not drop the tables at the end")
    parser.add_argument("--explain", action="store_true")
    parser.add_argument("--prefix", default=PREFIX, help="table name prefix")
    parser.add_argument("--fillfactor", type=int, default=0, help="heap fillfactor (percent)")
    args = parser.parse_args()
    url = os.environ.get("TRIDENT_PG_URL")
    if not url:
        print('TRIDENT_PG_URL unset: eval "$(bash scripts/services.sh env)"', file=sys.stderr)
        return 2
    engine = shared_engine(url)
    libpq_url = sa.make_url(url).set(drivername="postgresql").render_as_string(False)
    sizes = (args.small, args.large)
    print(f"{args.state_type} state, txid_index={args.txid_index}, batch {args.batch:,} keys "
          f"(half new), median of {args.runs}, {describe_url(engine)}")  # fmt: skip
    times: dict[int, list[float]] = {n: [] for n in sizes}
    combines: dict[int, list[float]] = {n: [] for n in sizes}  # COPY + upsert
    with psycopg.connect(libpq_url) as raw:
        try:
            for n in sizes:
                print(f"loaded {n:,} keys in {load(raw, url, n, args):.1f} s", flush=True)
            states = {n: factory(url, n, args).make_state() for n in sizes}
            batches = {n: batch(n, args.batch) for n in sizes}
            base = last_txid(raw, [f"{args.prefix}_{n}" for n in sizes])  # --reuse: go on
            for n in sizes:  # untimed warm-up: caches, the temporary table's catalog entries
                commit_once(states[n], base + 1, *batches[n])
                undo_new(raw, f"{args.prefix}_{n}", batches[n][0])
            for run in range(args.runs):
                for n in sizes if run % 2 == 0 else reversed(sizes):
                    steps = commit_once(states[n], base + 2 + run, *batches[n])
                    undo_new(raw, f"{args.prefix}_{n}", batches[n][0])
                    times[n].append(sum(steps))
                    combines[n].append(steps[1])
                    print(f"  run {run + 1} {n:>12,} keys stored: {sum(steps) * 1000:7.1f} ms "
                          f"(begin {steps[0] * 1000:.1f}, multi_combine {steps[1] * 1000:.1f}, "
                          f"commit {steps[2] * 1000:.1f})", flush=True)  # fmt: skip
            if args.explain:
                for n in sizes:
                    explain(raw, url, n, args, *batches[n], txid=base + 100 + args.runs)
        finally:
            if not args.keep:
                for n in sizes:
                    raw.execute(f"DROP TABLE IF EXISTS {args.prefix}_{n}")
                raw.commit()
    small, large = (statistics.median(times[n]) for n in sizes)

    def spread(xs: list[float]) -> str:
        return f"{statistics.median(xs) * 1000:.1f} ms [{min(xs) * 1000:.1f}-{max(xs) * 1000:.1f}]"

    print(f"commit of {args.batch:,} keys: {spread(times[args.small])} with {args.small:,} "
          f"stored, {spread(times[args.large])} with {args.large:,} stored "
          f"(median [min-max]); of which multi_combine (COPY + upsert) "
          f"{spread(combines[args.small])} vs {spread(combines[args.large])}")  # fmt: skip
    combine_small, combine_large = (statistics.median(combines[n]) for n in sizes)
    print(f"multi_combine_ratio={combine_large / combine_small:.2f}")
    print(f"ratio={large / small:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
