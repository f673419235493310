"""Seeded source-chaos schedules: the faults of real data, checked key by key.

The project's own reliability machinery (not shipped: it was ``airflow_trident.testing.
source_chaos`` until issue 34); its command line is :mod:`tests.harness.source_chaos`
(``bash scripts/source-chaos.sh``), its short profile ``tests/testing/test_source_chaos.py``.

Long on purpose: one schedule per source kind (table, file log) with its faults, its reference and
its key-by-key comparison; a fault and the reference that judges it belong together.

The fault schedules (:mod:`airflow_trident.testing.schedule`) break the batch lifecycle with
memory spouts. A source-chaos schedule breaks the *source*: a database table
(:class:`~airflow_trident.spout.database_table.DatabaseTableSpout`) that gets rows inserted
while batches are in flight, rows with out-of-order ids (below a partition's committed mark),
and — between a failed attempt of a txid and its retry — rows of that txid's ranges updated,
deleted, or inserted below the mark. Attempts fail at random: after processing (nothing
written), or after the states were written and before ZooKeeper's compare-and-set (the
interesting case: a transactional state then holds part of the txid), and a committed txid's
commit is run again.

Modes: ``transactional`` (the default table source into transactional states: a retry that
sees changed rows must fail with ``SpoutEmitError``; the schedule then restores them, as an
operator would, and the retry must commit) and ``opaque`` (``spout.as_opaque()`` into opaque
states: the retry takes the rows as they are).

The reference is computed from exactly the data each committed txid's metadata names: after
every commit the schedule records each partition's range ``(low, high]`` of that txid from the
coordinator, and the expected counts are those of the rows the table holds in the recorded
ranges (rows the schedule inserted below a committed mark are excluded: the documented limit,
they are never read). A range's rows must still have the digest recorded with it (a check of the
harness itself: it never changes rows of a committed range). The states are compared with the
reference key by key after every commit; the first difference is reported with the seed.

The runtime is the caller's: ``process(steps, txid)`` (default ``steps.process_local``). The
project's command line runs it on Spark as well (``bash scripts/source-chaos.sh``).

Example (SQLite, in-process, memory coordinator; ~1 s)::

    report = run_source_chaos(SourceChaosConfig(seed=3, batches=10), state_url=url)
    assert report.ok, report.summary()
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import sqlalchemy as sa

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.errors import ConfigurationError, SpoutEmitError
from airflow_trident.operation import Count, Sum
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.database_table import DatabaseTableSpout
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology

__all__ = ["SOURCE_FAULTS", "SourceChaosConfig", "SourceChaosReport", "run_source_chaos"]

MODES = ("transactional", "opaque")
SPOUT = "events"
STATES = ("counts", "sums")

SOURCE_FAULTS: dict[str, str] = {
    "files_land_during_batch": "file log: files land between begin, process and commit",
    "partition_vanishes": "file log: a partition directory is renamed away for 1-3 batches",
    "partition_vanishes_before_retry": "file log: a partition is away for a failed txid's retry",
    "root_missing": "file log: the landing root is briefly missing at a begin",
    "malformed_record": "file log: a line that is not JSON (dead-lettered)",
    "mistyped_record": "file log: a field of another type (dead-lettered)",
    "insert_during_batch": "rows inserted between a batch's begin, process and commit",
    "out_of_order_id": "a row inserted with an id below a partition's committed mark",
    "fail_after_process": "an attempt fails after processing (nothing written)",
    "fail_after_state": "an attempt fails after writing its states, before the compare-and-set",
    "update_before_retry": "a row of the failed txid's ranges is updated before the retry",
    "delete_before_retry": "a row of the failed txid's ranges is deleted before the retry",
    "insert_below_mark": "a row is inserted inside the failed txid's range before the retry",
    "commit_again": "a committed txid's commit runs again",
}
"""Fault kind -> what it simulates."""

Process = Callable[[BatchSteps, int], Any]


@dataclass(frozen=True)
class SourceChaosConfig:
    """What a source-chaos schedule runs.

    Parameters
    ----------
    seed:
        Seed of every random choice.
    mode:
        ``transactional`` (table source, transactional states) or ``opaque``
        (``as_opaque()``, opaque states).
    source:
        ``table`` (a database table) or ``file_log`` (a transactional file log: files landing
        during batches, a partition directory vanishing and returning, the landing root
        briefly missing, malformed and mistyped records; ``mode`` must be transactional).
    batches:
        Txids committed under faults (then the table is drained without faults).
    fault_rate:
        Chance that an attempt fails (and that a fault is applied between steps).
    partitions, max_rows:
        The table source's partitions and rows per partition per batch.
    """

    seed: int
    mode: str = "transactional"
    source: str = "table"
    batches: int = 30
    fault_rate: float = 0.4
    partitions: int = 2
    max_rows: int = 4

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            msg = f"unknown source-chaos mode {self.mode!r}: use one of {', '.join(MODES)}"
            raise ConfigurationError(msg)
        if self.source not in ("table", "file_log"):
            msg = f"unknown source {self.source!r}: use 'table' or 'file_log'"
            raise ConfigurationError(msg)
        if self.source == "file_log" and self.mode != "transactional":
            msg = "the file log schedule runs the transactional file log (mode='transactional')"
            raise ConfigurationError(msg)

    def replay_command(self) -> str:
        """The configuration that replays this schedule (fields that are not defaults).

        >>> SourceChaosConfig(seed=4, mode="opaque").replay_command()
        "SourceChaosConfig(seed=4, mode='opaque')"
        """
        changed = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.name == "seed" or getattr(self, f.name) != f.default
        ]
        return f"SourceChaosConfig({', '.join(changed)})"


@dataclass
class SourceChaosReport:
    """What a source-chaos schedule did and found."""

    config: SourceChaosConfig
    label: str = ""
    batches: int = 0
    rows: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    differences: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        """No key differed from the reference and no invariant broke."""
        return not (self.differences or self.violations)

    def summary(self, limit: int = 12) -> str:
        """The report as text."""
        c = self.config
        unit = "files" if c.source == "file_log" else "rows"
        lines = [
            f"source chaos {self.label or c.source} seed={c.seed} mode={c.mode}: {self.batches} "
            f"batches committed, {self.rows} {unit}, in {self.elapsed_s:.1f}s; replay: "
            f"{c.replay_command()}",
            f"  faults: {dict(sorted(self.faults.items()))} (total {sum(self.faults.values())})",
            f"  refused as expected: {dict(sorted(self.refused.items()))}",
            f"  keys different from the reference: {len(self.differences)}",
        ]
        lines += [f"    {d}" for d in self.differences[:limit]]
        lines += [f"  VIOLATION seed={c.seed}: {v}" for v in self.violations[:limit]]
        return "\n".join(lines)


class _Chaos:
    """One schedule over one table: the topology, the table's history, the driver."""

    def __init__(
        self,
        config: SourceChaosConfig,
        url: str,
        process: Process,
        store: Any,
        staging: str,
        name: str,
        echo: Callable[[str], None],
    ) -> None:
        self.c = config
        self.rng = random.Random(config.seed)
        self.url = url
        self.process = process
        self.echo = echo
        self.name = name
        self.table = f"{name}_events"
        self.engine = sa.create_engine(url)
        with self.engine.begin() as conn:
            conn.execute(
                sa.text(
                    f"CREATE TABLE {self.table} (id BIGINT PRIMARY KEY, part INTEGER NOT NULL, "
                    f"word TEXT NOT NULL, amount INTEGER NOT NULL)"
                )
            )
        self.next_id = 2  # even ids in order; odd ids are left for out-of-order rows
        self.late: set[int] = set()  # rows inserted below a committed mark: never read
        self.spout = DatabaseTableSpout(
            url,
            self.table,
            ["word", "amount"],
            partitions=config.partitions,
            partition_column="part",
            max_rows_per_batch=config.max_rows,
        )
        kind = config.mode
        self.factories = {
            s: sql_state(None, f"{name}_{s}", kind, key_fields=("word",), value_type="bigint")
            for s in STATES
        }
        t = TridentTopology(name)
        source: Any = self.spout.as_opaque() if kind == "opaque" else self.spout
        words = t.new_stream(SPOUT, source).group_by(["word"])
        words.persistent_aggregate(self.factories["counts"], Count(), ["n"], name="counts")
        words.persistent_aggregate(
            self.factories["sums"], ["amount"], Sum(), ["total"], name="sums"
        )
        self.steps = BatchSteps(t, store, StagingArea(staging, name), states=StateBinding(url))
        self.store = store
        self.ranges: list[tuple[int, str, dict[str, Any]]] = []  # committed (txid, part, meta)
        self.report = SourceChaosReport(config)

    # -- the table ------------------------------------------------------------------------------

    def _sql(self, sql: str, **params: Any) -> Any:
        with self.engine.begin() as conn:
            return conn.execute(sa.text(sql), params)

    def insert(self, n: int) -> None:
        """``n`` new rows with ids above every mark."""
        for _ in range(n):
            self._insert(self.next_id)
            self.next_id += 2

    def _insert(self, row_id: int) -> None:
        word = f"w{int(self.rng.paretovariate(1.2)) % 40:02d}"
        self._sql(
            f"INSERT INTO {self.table} (id, part, word, amount) VALUES (:i, :p, :w, :a)",
            i=row_id, p=self.rng.randrange(1000), w=word, a=self.rng.randint(1, 9),
        )  # fmt: skip

    def _marks(self) -> int:
        """The lowest committed high-water mark over the partitions (0: none)."""
        highs: dict[str, int] = {}
        for _, part, meta in self.ranges:
            highs[part] = max(highs.get(part, 0), int(meta["high"]))
        if len(highs) < len(self.spout.partitions):
            return 0
        return min(highs.values())

    def out_of_order(self) -> None:
        """A row with an odd id below every committed mark (never read: the documented
        limit), so the reference excludes it."""
        mark = self._marks()
        taken = {int(r[0]) for r in self._sql(f"SELECT id FROM {self.table} WHERE id < :m", m=mark)}
        free = [i for i in range(1, mark, 2) if i not in taken]
        if not free:
            return
        row_id = self.rng.choice(free)
        self._insert(row_id)
        self.late.add(row_id)
        self.report.faults["out_of_order_id"] += 1

    def _in_flight_rows(self, txid: int) -> list[tuple[int, int, int]]:
        """``(id, part, low)`` of the rows in ``txid``'s ranges (its last attempt)."""
        rows: list[tuple[int, int, int]] = []
        for part, meta in self._metas(txid).items():
            low = -1 if meta["low"] is None else int(meta["low"])
            found = self._sql(
                f"SELECT id, part FROM {self.table} WHERE id > :lo AND id <= :hi",
                lo=low, hi=int(meta["high"]),
            ).all()  # fmt: skip
            index = int(part[1:]) if part.startswith("p") else 0
            n = len(self.spout.partitions)
            rows += [(int(i), int(p), low) for i, p in found if n == 1 or int(p) % n == index]
        return rows

    def mutate(self, txid: int) -> list[Callable[[], None]]:
        """Change rows of ``txid``'s ranges (a failed attempt read them); return the undos."""
        rows = self._in_flight_rows(txid)
        undo: list[Callable[[], None]] = []
        if not rows:
            return undo
        kind = self.rng.choice(["update_before_retry", "delete_before_retry", "insert_below_mark"])
        row_id, part, low = self.rng.choice(rows)
        old = self._sql(
            f"SELECT part, word, amount FROM {self.table} WHERE id = :i", i=row_id
        ).one()
        if kind == "update_before_retry":
            self._sql(
                f"UPDATE {self.table} SET word = :w, amount = :a WHERE id = :i",
                w=f"u{self.rng.randrange(5)}", a=self.rng.randint(1, 9), i=row_id,
            )  # fmt: skip
        elif kind == "delete_before_retry":
            self._sql(f"DELETE FROM {self.table} WHERE id = :i", i=row_id)
        else:
            free = row_id - 1 if row_id % 2 == 0 else None
            exists = (
                free is not None
                and self._sql(f"SELECT 1 FROM {self.table} WHERE id = :i", i=free).first()
            )
            if free is None or free <= low or exists:
                return undo
            self._sql(
                f"INSERT INTO {self.table} (id, part, word, amount) VALUES (:i, :p, :w, 1)",
                i=free, p=part, w="late",
            )  # fmt: skip
            row_id = free
        self.report.faults[kind] += 1

        def restore() -> None:
            self._sql(f"DELETE FROM {self.table} WHERE id = :i", i=row_id)
            if kind != "insert_below_mark":
                self._sql(
                    f"INSERT INTO {self.table} (id, part, word, amount) VALUES (:i, :p, :w, :a)",
                    i=row_id, p=old[0], w=old[1], a=old[2],
                )  # fmt: skip

        undo.append(restore)
        return undo

    # -- metadata and reference -----------------------------------------------------------------

    def _metas(self, txid: int) -> dict[str, dict[str, Any]]:
        """Each partition's range of ``txid`` as the coordinator holds it (its last attempt's)."""
        state = self.store.partition_state(SPOUT)
        metas: dict[str, dict[str, Any]] = {}
        for part in self.spout.partitions:
            meta = state.get(part, txid)
            if isinstance(meta, dict) and "end" in meta:  # opaque: {"start", "end"}
                meta = meta["end"]
            if isinstance(meta, dict) and meta.get("count") and meta.get("high") is not None:
                metas[part] = meta
        return metas

    def record(self, txid: int) -> None:
        for part, meta in self._metas(txid).items():
            self.ranges.append((txid, part, meta))

    def reference(self) -> dict[str, Counter[str]]:
        """Counts and sums of the rows the committed ranges name (late rows excluded); checks
        each range's rows still have the digest it was read with."""
        counts: Counter[str] = Counter()
        sums: Counter[str] = Counter()
        for txid, part, meta in self.ranges:
            source = self.spout.range(part, meta)
            with self.spout.connect() as conn:
                table = self.spout.table_object()
                query = sa.select(table.c.id, table.c.word, table.c.amount).where(
                    *source._where(table)
                )
                rows = [tuple(r) for r in conn.execute(query)]
            read = [r for r in rows if int(r[0]) not in self.late]
            if len(read) == len(rows):
                got, digest = source.read()
                if len(got) != int(meta["count"]) or digest != meta.get("digest"):
                    self._violation(
                        f"txid {txid} partition {part}: the rows of its committed range changed "
                        f"(the harness must not change them): {len(got)} rows, digest {digest}"
                    )
            elif len(read) != int(meta["count"]):
                self._violation(f"txid {txid} partition {part}: {len(read)} rows, {meta}")
            for _, word, amount in read:
                counts[str(word)] += 1
                sums[str(word)] += int(amount)
        return {"counts": counts, "sums": sums}

    def stored(self) -> dict[str, dict[str, int]]:
        found: dict[str, dict[str, int]] = {}
        for s, factory in self.factories.items():
            with self.engine.connect() as conn:
                rows = conn.execute(sa.select(factory.layout.table)).mappings().all()
            found[s] = {str(r["word"]): int(r["val"]) for r in rows}
        return found

    def check(self, txid: int) -> None:
        want = self.reference()
        have = self.stored()
        for s in STATES:
            for key in sorted(set(want[s]) | set(have[s])):
                expected = want[s].get(key)
                got = have[s].get(key)
                if (expected or None) != (got or None) and not (expected is None and got == 0):
                    diff = (
                        f"seed={self.c.seed} mode={self.c.mode} txid={txid} state={s} key={key!r} "
                        f"expected={expected} got={got}"
                    )
                    self.report.differences.append(diff)
                    self.echo(f"DIFFERENCE {diff}")

    # -- the driver -----------------------------------------------------------------------------

    def _violation(self, what: str) -> None:
        message = f"seed={self.c.seed} mode={self.c.mode}: {what}"
        self.report.violations.append(message)
        self.echo(f"VIOLATION {message}")

    def _fault(self) -> bool:
        return self.rng.random() < self.c.fault_rate

    def batch(self, *, faults: bool) -> int:
        """One txid, attempted until it commits; returns the rows it read."""
        if faults and self._fault():
            self.insert(self.rng.randint(1, 3))
            self.report.faults["insert_during_batch"] += 1
        txid = int(self.steps.begin(None)["txid"])
        undo: list[Callable[[], None]] = []
        for attempt in range(1, 31):
            faulty = faults and attempt <= 5  # then the txid is left to commit
            try:
                self.process(self.steps, txid)
            except SpoutEmitError as exc:
                if self.c.mode == "opaque" or not undo:
                    self._violation(f"txid {txid} attempt {attempt}: unexpected {exc}")
                self.report.refused["SpoutEmitError"] += 1
                for restore in undo:  # the operator restores the rows
                    restore()
                undo = []
                continue
            if faulty and self._fault():
                self.insert(self.rng.randint(1, 2))  # rows landing between process and commit
                self.report.faults["insert_during_batch"] += 1
            if faulty and self._fault():
                if self.rng.random() < 0.6:
                    plan = self.steps.plan(txid)
                    manifest = self.steps.staging.verified_manifest(plan.attempt, plan.metas)
                    self.steps.apply_staged(plan, manifest)
                    self.report.faults["fail_after_state"] += 1
                else:
                    self.report.faults["fail_after_process"] += 1
                if self.rng.random() < 0.7:
                    undo += self.mutate(txid)
                continue
            if undo and self.c.mode == "transactional":
                self._violation(f"txid {txid}: a retry read changed rows without refusing them")
            summary = self.steps.commit(txid)
            if not summary.get("applied"):
                self._violation(f"txid {txid}: commit did not apply: {summary}")
            self.steps.success(txid)
            self.record(txid)
            if faults and self._fault():
                again = self.steps.commit(txid)
                self.report.faults["commit_again"] += 1
                if again.get("applied"):
                    self._violation(f"txid {txid}: a second commit applied again")
            self.check(txid)
            if faults and self._fault():
                self.out_of_order()
            return int(summary.get("records_in", 0))
        self._violation(f"txid {txid} did not commit in 30 attempts")
        return 0

    def run(self) -> SourceChaosReport:
        started = time.monotonic()
        self.insert(self.c.partitions * self.c.max_rows)
        while self.store.committed_txid() < self.c.batches and not self.report.violations:
            if self.rng.random() < 0.7:
                self.insert(self.rng.randint(0, 2 * self.c.max_rows))
            self.batch(faults=True)
        for _ in range(200):  # drain without faults
            if self.report.violations or not self.spout.has_rows_after(self._highs()):
                break
            self.batch(faults=False)
        self.report.batches = self.store.committed_txid()
        with self.engine.connect() as conn:
            self.report.rows = int(
                conn.execute(sa.text(f"SELECT count(*) FROM {self.table}")).scalar_one()
            )
        self.report.elapsed_s = time.monotonic() - started
        return self.report

    def _highs(self) -> dict[str, int | None]:
        highs: dict[str, int | None] = dict.fromkeys(self.spout.partitions)
        for _, part, meta in self.ranges:
            highs[part] = max(highs[part] or 0, int(meta["high"]))
        return highs

    def drop(self) -> None:
        with self.engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {self.table}"))
            for factory in self.factories.values():
                conn.execute(sa.schema.DropTable(factory.layout.table, if_exists=True))
        self.engine.dispose()


class _FileChaos(_Chaos):
    """A schedule over a transactional file log (``root/p0``, ``root/p1``) of JSON lines
    ``{"word": str, "n": int}``; malformed and mistyped lines go to the dead-letter directory."""

    def __init__(
        self,
        config: SourceChaosConfig,
        url: str,
        process: Process,
        store: Any,
        staging: str,
        name: str,
        echo: Callable[[str], None],
    ) -> None:  # the table's schedule's checks, over files (no table: no super().__init__)
        from pathlib import Path

        from airflow_trident.spout.file_log import FileLogSpout

        self.c = config
        self.rng = random.Random(config.seed)
        self.url = url
        self.process = process
        self.echo = echo
        self.name = name
        base = Path(staging).parent / f"{name}_files"
        self.root = base / "landing"
        self.parts = [f"p{i}" for i in range(config.partitions)]
        for part in self.parts:
            (self.root / part).mkdir(parents=True)
        self.seq = 0
        self.away: dict[str, int] = {}  # partition -> batches left away
        self.spout: Any = FileLogSpout(
            self.root,
            ["word", "n"],
            types={"word": "string", "n": "bigint"},
            max_files=2,
            dead_letter=base / "dead",
        )
        self.factories = {
            s: sql_state(None, f"{name}_{s}", "transactional", key_fields=("word",),
                         value_type="bigint")
            for s in STATES
        }  # fmt: skip
        t = TridentTopology(name)
        words = t.new_stream(SPOUT, self.spout).group_by(["word"])
        words.persistent_aggregate(self.factories["counts"], Count(), ["n_"], name="counts")
        words.persistent_aggregate(self.factories["sums"], ["n"], Sum(), ["total"], name="sums")
        self.steps = BatchSteps(t, store, StagingArea(staging, name), states=StateBinding(url))
        self.store = store
        self.engine = sa.create_engine(url)
        self.files: list[tuple[int, str, str]] = []  # committed (txid, partition, file)
        self.report = SourceChaosReport(config)

    def land(self, n: int) -> None:
        """``n`` files in partitions that are present (written hidden, then renamed)."""
        for _ in range(n):
            present = [p for p in self.parts if p not in self.away]
            if not present or not self.root.exists():
                return
            part = self.rng.choice(present)
            lines = []
            for _ in range(self.rng.randint(1, 5)):
                roll = self.rng.random()
                if roll < 0.06:
                    lines.append('{"word": "broken"')  # malformed
                    self.report.faults["malformed_record"] += 1
                elif roll < 0.12:
                    bad = self.rng.choice(
                        [
                            {"word": "x", "n": "five"},
                            {"word": 7, "n": 1},
                            {"word": "y", "n": True},
                            {"word": ["a"], "n": 2},
                        ]
                    )
                    lines.append(json.dumps(bad))  # mistyped
                    self.report.faults["mistyped_record"] += 1
                else:
                    word = f"w{int(self.rng.paretovariate(1.2)) % 40:02d}"
                    lines.append(json.dumps({"word": word, "n": self.rng.randint(1, 9)}))
            self.seq += 1
            tmp = self.root / part / f"_{self.seq:06d}.tmp"
            tmp.write_text("\n".join(lines) + "\n")
            tmp.rename(self.root / part / f"{self.seq:06d}.jsonl")

    def _move(self, part: str, away: bool) -> None:
        here, there = self.root / part, self.root.parent / f"away_{part}"
        (here if away else there).rename(there if away else here)

    def vanish_or_return(self) -> None:
        for part in list(self.away):
            self.away[part] -= 1
            if self.away[part] <= 0:
                self._move(part, away=False)
                del self.away[part]
        if not self.away and self.rng.random() < 0.3:
            part = self.rng.choice(self.parts)
            self._move(part, away=True)
            self.away[part] = self.rng.randint(1, 3)
            self.report.faults["partition_vanishes"] += 1

    def everything_back(self) -> None:
        for part in list(self.away):
            self._move(part, away=False)
            del self.away[part]

    def _metas(self, txid: int) -> dict[str, Any]:
        state = self.store.partition_state(SPOUT)
        found = {}
        for part in self.parts:
            meta = state.get(part, txid)
            if isinstance(meta, dict) and meta.get("files"):
                found[part] = meta
        return found

    @staticmethod
    def _valid(line: str) -> tuple[str, int] | None:
        try:
            record = json.loads(line)
        except ValueError:
            return None
        if not isinstance(record, dict):
            return None
        word, n = record.get("word"), record.get("n")
        if not isinstance(word, str) or isinstance(n, bool) or not isinstance(n, int):
            return None
        return word, n

    def reference(self) -> dict[str, Counter[str]]:
        counts: Counter[str] = Counter()
        sums: Counter[str] = Counter()
        for _, part, name in self.files:
            path = self.root / part / name
            if not path.exists():  # the partition is away: the files are where it went
                path = self.root.parent / f"away_{part}" / name
            for line in path.read_text().splitlines():
                if not line.strip():
                    continue
                got = self._valid(line)
                if got is not None:
                    counts[got[0]] += 1
                    sums[got[0]] += got[1]
        return {"counts": counts, "sums": sums}

    def _begin(self) -> int:
        run_id = f"chaos__{uuid.uuid4().hex[:12]}"  # a retried begin re-binds its txid
        for attempt in range(1, 31):
            root_gone = attempt == 1 and self.rng.random() < 0.1
            if root_gone:
                self.root.rename(self.root.parent / "landing_away")
                self.report.faults["root_missing"] += 1
            try:
                return int(self.steps.begin(run_id)["txid"])
            except Exception as exc:
                self.report.refused[type(exc).__name__] += 1
                if not root_gone:
                    self._violation(f"begin failed with the root present: {exc}")
            finally:
                if root_gone:
                    (self.root.parent / "landing_away").rename(self.root)
        raise RuntimeError("begin never succeeded")

    def batch(self, *, faults: bool) -> int:
        if faults:
            self.vanish_or_return()
            if self._fault():
                self.land(self.rng.randint(1, 3))
        else:
            self.everything_back()
        txid = self._begin()
        if faults and self._fault():
            self.land(self.rng.randint(1, 2))
            self.report.faults["files_land_during_batch"] += 1
        for attempt in range(1, 31):
            faulty = faults and attempt <= 5
            try:
                self.process(self.steps, txid)
            except Exception as exc:
                self.report.refused[type(exc).__name__] += 1
                if attempt > 6:
                    self._violation(f"txid {txid} attempt {attempt}: {exc}")
                self.everything_back()
                continue
            if faulty and self._fault():
                self.land(1)
                self.report.faults["files_land_during_batch"] += 1
            if faulty and self._fault():
                if self.rng.random() < 0.6:
                    plan = self.steps.plan(txid)
                    manifest = self.steps.staging.verified_manifest(plan.attempt, plan.metas)
                    self.steps.apply_staged(plan, manifest)
                    self.report.faults["fail_after_state"] += 1
                else:
                    self.report.faults["fail_after_process"] += 1
                if self.rng.random() < 0.3 and not self.away:
                    part = self.rng.choice(self.parts)  # gone before the retry
                    self._move(part, away=True)
                    self.away[part] = 1
                    self.report.faults["partition_vanishes_before_retry"] += 1
                continue
            summary = self.steps.commit(txid)
            if not summary.get("applied"):
                self._violation(f"txid {txid}: commit did not apply: {summary}")
            self.steps.success(txid)
            for part, meta in self._metas(txid).items():
                self.files += [(txid, part, f["name"]) for f in meta["files"]]
            self.check(txid)
            return int(summary.get("records_in", 0))
        self._violation(f"txid {txid} did not commit in 30 attempts")
        return 0

    def run(self) -> SourceChaosReport:
        started = time.monotonic()
        self.land(2 * len(self.parts))
        while self.store.committed_txid() < self.c.batches and not self.report.violations:
            if self.rng.random() < 0.7:
                self.land(self.rng.randint(0, 3))
            self.batch(faults=True)
        self.everything_back()
        for _ in range(200):
            if self.report.violations:
                break
            committed = {(p, n) for _, p, n in self.files}
            waiting = [
                (p, f.name)
                for p in self.parts
                for f in (self.root / p).iterdir()
                if not f.name.startswith(("_", "."))
            ]
            if all(w in committed for w in waiting):
                break
            self.batch(faults=False)
        self.report.batches = self.store.committed_txid()
        self.report.rows = len(self.files)
        self.report.elapsed_s = time.monotonic() - started
        return self.report

    def drop(self) -> None:
        with self.engine.begin() as conn:
            for factory in self.factories.values():
                conn.execute(sa.schema.DropTable(factory.layout.table, if_exists=True))
        self.engine.dispose()


def run_source_chaos(
    config: SourceChaosConfig,
    *,
    state_url: str,
    staging: str,
    store: Any = None,
    process: Process | None = None,
    label: str = "",
    echo: Callable[[str], None] = print,
    keep: bool = False,
) -> SourceChaosReport:
    """Run one source-chaos schedule over a table in the ``state_url`` database (its states
    live there too) and return its report (see the module docstring).

    ``store``: the coordinator store (default: a memory store); ``process(steps, txid)``: the
    runtime (default: in-process); ``staging``: the staging directory. Tables are dropped
    afterwards unless ``keep`` or the report is not ok.
    """
    name = f"chaos_{config.mode[:2]}_{uuid.uuid4().hex[:8]}"
    kind: type[_Chaos] = _FileChaos if config.source == "file_log" else _Chaos
    chaos = kind(
        config,
        state_url,
        process or (lambda steps, txid: steps.process_local(txid)),
        store if store is not None else MemoryCoordinatorStore(name),
        staging,
        name,
        echo,
    )
    chaos.report.label = label
    report = chaos.run()
    if report.ok and not keep:
        chaos.drop()
    echo(report.summary())
    return report
