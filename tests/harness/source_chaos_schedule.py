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

The replay profile (issue 32; ``replays``, ``redeploys``, ``sizes``, ``sinks``) adds, over the
table source:

* replays of older txids, not just the newest: through the lifecycle as a ``conf txid`` run does
  (begin re-binds the txid, the process task skips a committed txid, the commit must answer
  "already committed", success runs), and straight into each state, one state at a time (the
  txid processed again and applied without the coordinator's check, as a commit whose record
  was lost would): each state must then hold exactly what it held, or refuse the txid with a
  Trident error having written nothing;
* new deployments of the same topology name with another ``parallelism_hint`` (1-4) between
  batches (half of them followed at once by a replay, before the new deployment's first commit
  moved any partition's mark) and between a failed attempt that wrote its states and its
  retry: the partial stage of the aggregated states and the commit partitions of the sinks
  follow the hint; a retry refused for its partition count is run again on the deployment that
  first wrote it, as an operator would;
* batches of very different sizes: 1 row, 2-6 rows, or 1,000-4,000 rows;
* append sinks of every row (``id, word, amount``): an Iceberg table (SQL catalog in the state
  database) and a Delta table, compared row by row (each committed row exactly once).

The reference of the replay profile is kept per committed range (read once, its digest checked)
and every range is read again every 20 commits and at the end.

The runtime is the caller's: ``process(steps, txid)`` (default ``steps.process_local``), which
returns the staged manifest. The project's command line runs it on Spark as well
(``bash scripts/source-chaos.sh``).

Example (SQLite, in-process, memory coordinator; ~1 s)::

    report = run_source_chaos(SourceChaosConfig(seed=3, batches=10), state_url=url)
    assert report.ok, report.summary()
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.errors import ConfigurationError, SpoutEmitError, TridentError
from airflow_trident.operation import Count, Sum
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.database_table import DatabaseTableSpout
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology

__all__ = ["SOURCE_FAULTS", "SourceChaosConfig", "SourceChaosReport", "run_source_chaos"]

MODES = ("transactional", "opaque")
SOURCES = ("table", "file_log", "kafka")
SPOUT = "events"
STATES = ("counts", "sums")
SINKS = ("iceberg", "delta")
HINTS = (1, 2, 3, 4)
"""The ``parallelism_hint`` of the replay profile's deployments."""
REPLAY_WINDOW = 12
"""Replays into the states pick among the newest txids whose metadata the coordinator keeps
(16)."""
VERIFY_EVERY = 20
"""The replay profile reads every committed range again every this many commits."""

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
    "replay_older_txid": "a committed txid replayed through the lifecycle (a conf txid run)",
    "replay_into_states": "a committed txid processed again and applied to each state directly",
    "redeploy": "the topology deployed again with another parallelism_hint between batches",
    "redeploy_before_retry": "deployed again with another hint after an attempt wrote states",
}
"""Fault kind -> what it simulates (the Kafka schedule's: :data:`~tests.harness.kafka_chaos.
KAFKA_FAULTS`, merged in below)."""

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
        ``table`` (a database table), ``file_log`` (a transactional file log: files landing
        during batches, a partition directory vanishing and returning, the landing root
        briefly missing, malformed and mistyped records; ``mode`` must be transactional) or
        ``kafka`` (a topic of a broker the schedule owns, read by ``KafkaSpout`` or
        ``OpaqueKafkaSpout``, into the SQL states and a Kafka sink:
        :mod:`tests.harness.kafka_chaos`).
    batches:
        Txids committed under faults (then the table is drained without faults).
    fault_rate:
        Chance that an attempt fails (and that a fault is applied between steps).
    partitions, max_rows:
        The table source's partitions and rows per partition per batch.
    replays:
        Chance, after each commit, of a replay of a committed txid (the newest or an older
        one): through the lifecycle, or (transactional mode) into each state directly.
    redeploys:
        Chance, before each batch and after an attempt that wrote its states, that the
        topology is deployed again with another ``parallelism_hint``.
    sizes:
        Batches of 1 row, a few, or thousands (``max_rows`` must hold them).
    sinks:
        Append sinks of every row besides the aggregated states: ``iceberg``, ``delta``.
    broker_kills:
        The Kafka schedule's chance, at each of a batch's begin, first process and commit, that
        its broker is killed there (and restarted).
    """

    seed: int
    mode: str = "transactional"
    source: str = "table"
    batches: int = 30
    fault_rate: float = 0.4
    partitions: int = 2
    max_rows: int = 4
    replays: float = 0.0
    redeploys: float = 0.0
    sizes: bool = False
    sinks: tuple[str, ...] = ()
    broker_kills: float = 0.02

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            msg = f"unknown source-chaos mode {self.mode!r}: use one of {', '.join(MODES)}"
            raise ConfigurationError(msg)
        if self.source not in SOURCES:
            msg = f"unknown source {self.source!r}: use one of {', '.join(SOURCES)}"
            raise ConfigurationError(msg)
        if self.source == "file_log" and self.mode != "transactional":
            msg = "the file log schedule runs the transactional file log (mode='transactional')"
            raise ConfigurationError(msg)
        unknown = [s for s in self.sinks if s not in SINKS]
        if unknown:
            msg = f"unknown sinks {unknown}: use {', '.join(SINKS)}"
            raise ConfigurationError(msg)
        if self.sinks and self.mode != "transactional":
            msg = "the Iceberg and Delta sinks take a transactional source (mode='transactional')"
            raise ConfigurationError(msg)
        if self.source != "table" and (self.replays or self.redeploys or self.sizes or self.sinks):
            msg = "replays, redeploys, sizes and sinks are options of the table source"
            raise ConfigurationError(msg)
        if self.sizes and self.max_rows < 4000:
            msg = "sizes=True makes batches of up to 4,000 rows: max_rows must be >= 4000"
            raise ConfigurationError(msg)

    @property
    def shaped(self) -> bool:
        """The replay profile: the states' and sinks' partitions follow a parallelism hint."""
        return bool(self.redeploys or self.sinks or self.replays)

    @classmethod
    def replay_profile(cls, seed: int, mode: str = "transactional", **kw: Any) -> SourceChaosConfig:
        """The replay profile (issue 32): older txids replayed, deployments with other hints,
        batches of 1 to 4,000 rows; the Iceberg and Delta sinks in transactional mode."""
        sinks = SINKS if mode == "transactional" else ()
        options: dict[str, Any] = {
            "replays": 0.25, "redeploys": 0.1, "sizes": True, "sinks": sinks, "max_rows": 4000
        }  # fmt: skip
        options.update(kw)
        return cls(seed=seed, mode=mode, **options)

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
    rows_different: int = 0
    """Sink rows different from the reference (each committed row exactly once), at the worst
    check."""
    replays: Counter[str] = field(default_factory=Counter)
    """Replay outcomes: ``lifecycle: already committed``, ``<state>: same`` or ``<state>:
    refused (<error>)``."""
    sizes: Counter[str] = field(default_factory=Counter)
    """Committed batches by rows read: ``0``, ``1``, ``2-9``, ``10-999``, ``1000+``."""
    shapes: Counter[str] = field(default_factory=Counter)
    """Commits whose sink partition count differed from the deployment's hint."""
    lost: int = 0
    """Kafka, opaque: valid records an opaque batch skipped as gone (deleted), accounted."""
    sink_records: int = 0
    """Kafka: the records a ``read_committed`` consumer read from the Kafka sink's topic."""

    @property
    def ok(self) -> bool:
        """No key differed from the reference and no invariant broke."""
        return not (self.differences or self.violations)

    def summary(self, limit: int = 12) -> str:
        """The report as text."""
        c = self.config
        unit = {"file_log": "files", "kafka": "records"}.get(c.source, "rows")
        lines = [
            f"source chaos {self.label or c.source} seed={c.seed} mode={c.mode}: {self.batches} "
            f"batches committed, {self.rows} {unit}, in {self.elapsed_s:.1f}s; replay: "
            f"{c.replay_command()}",
            f"  faults: {dict(sorted(self.faults.items()))} (total {sum(self.faults.values())})",
            f"  refused as expected: {dict(sorted(self.refused.items()))}",
            f"  keys different from the reference: {len(self.differences)}",
        ]
        if c.source == "kafka":
            lines[-1:] = [
                f"  records lost by opaque (deleted before read, accounted): {self.lost}",
                f"  sink records read (read_committed): {self.sink_records}",
                f"  keys or sink records different from the reference: {len(self.differences)} "
                f"checks found differences, {self.rows_different} sink records at worst",
            ]
        if c.shaped or c.sizes:
            lines[-1:] = [
                f"  replays: {dict(sorted(self.replays.items()))}",
                f"  batches by rows read: {dict(sorted(self.sizes.items()))}",
                f"  sink partitions not the hint: {dict(sorted(self.shapes.items()))}",
                f"  keys or rows different from the reference: {len(self.differences)} checks "
                f"found differences, {self.rows_different} sink rows at worst",
            ]
        lines += [f"    {d}" for d in self.differences[:limit]]
        lines += [f"  VIOLATION seed={c.seed}: {v}" for v in self.violations[:limit]]
        return "\n".join(lines)


def _bucket(records: int) -> str:
    """A batch's size class: ``0``, ``1``, ``2-9``, ``10-999`` or ``1000+`` rows.

    >>> [_bucket(n) for n in (0, 1, 5, 10, 3000)]
    ['0', '1', '2-9', '10-999', '1000+']
    """
    for most, name in ((0, "0"), (1, "1"), (9, "2-9"), (999, "10-999")):
        if records <= most:
            return name
    return "1000+"


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
            ["id", "word", "amount"] if config.sinks else ["word", "amount"],
            partitions=config.partitions,
            partition_column="part",
            max_rows_per_batch=config.max_rows,
        )
        kind = config.mode
        self.factories = {
            s: sql_state(None, f"{name}_{s}", kind, key_fields=("word",), value_type="bigint")
            for s in STATES
        }
        self.sink_dir = Path(staging).parent / f"{name}_sinks"
        self.sinks = {s: self._sink_factory(s) for s in config.sinks}
        self.staging_dir = staging
        self.store = store
        self.ranges: list[tuple[int, str, dict[str, Any]]] = []  # committed (txid, part, meta)
        self.read: list[list[tuple[int, str, int]]] = []  # each range's rows (id, word, amount)
        self.hint = 2
        self.hint_of: dict[int, int] = {}  # committed txid -> the hint of its deployment
        self.report = SourceChaosReport(config)
        self.steps = self._deploy(self.hint)

    # -- the deployments ------------------------------------------------------------------------

    def _sink_factory(self, sink: str) -> Any:
        if sink == "iceberg":
            from airflow_trident.state.iceberg import iceberg_state

            warehouse = self.sink_dir / "warehouse"
            warehouse.mkdir(parents=True, exist_ok=True)
            return iceberg_state(
                f"chaos.{self.name}_rows", f"{self.name}.rows", warehouse=f"file://{warehouse}"
            )
        from airflow_trident.state.delta import delta_state

        return delta_state(str(self.sink_dir / "delta_rows"), f"{self.name}.rows")

    def _topology(self, hint: int) -> TridentTopology:
        """The topology as deployed with ``parallelism_hint(hint)`` (the replay profile; the
        other profiles have no hint)."""
        t = TridentTopology(self.name)
        source: Any = self.spout.as_opaque() if self.c.mode == "opaque" else self.spout
        stream = t.new_stream(SPOUT, source)
        if self.c.shaped:
            words = stream.partition_by(["word"]).parallelism_hint(hint).group_by(["word"])
        else:
            words = stream.group_by(["word"])
        words.persistent_aggregate(self.factories["counts"], Count(), ["n"], name="counts")
        words.persistent_aggregate(
            self.factories["sums"], ["amount"], Sum(), ["total"], name="sums"
        )
        for sink, factory in self.sinks.items():
            from airflow_trident.state.delta import DeltaWriter
            from airflow_trident.state.iceberg import IcebergWriter

            writer: Any = IcebergWriter() if sink == "iceberg" else DeltaWriter()
            rows = stream.partition_by(["id"]).parallelism_hint(hint)
            rows.partition_persist(factory, ["id", "word", "amount"], writer, name=sink)
        return t

    def _deploy(self, hint: int) -> BatchSteps:
        """A new deployment of the topology (same name, coordinator and states)."""
        self.hint = hint
        self.steps = BatchSteps(
            self._topology(hint),
            self.store,
            StagingArea(self.staging_dir, self.name),
            states=StateBinding(self.url),
        )
        return self.steps

    def redeploy(self, kind: str) -> None:
        self._deploy(self.rng.choice([h for h in HINTS if h != self.hint]))
        self.report.faults[kind] += 1

    # -- the table ------------------------------------------------------------------------------

    def _sql(self, sql: str, many: list[dict[str, Any]] | None = None, **params: Any) -> Any:
        with self.engine.begin() as conn:
            return conn.execute(sa.text(sql), params if many is None else many)

    def insert(self, n: int) -> None:
        """``n`` new rows with ids above every mark (one transaction)."""
        rows = []
        for _ in range(n):
            rows.append(self._row(self.next_id))
            self.next_id += 2
        if rows:
            self._sql(
                f"INSERT INTO {self.table} (id, part, word, amount) VALUES (:i, :p, :w, :a)", rows
            )

    def _row(self, row_id: int) -> dict[str, Any]:
        word = f"w{int(self.rng.paretovariate(1.2)) % 40:02d}"
        return {"i": row_id, "p": self.rng.randrange(1000), "w": word, "a": self.rng.randint(1, 9)}

    def _insert(self, row_id: int) -> None:
        self._sql(
            f"INSERT INTO {self.table} (id, part, word, amount) VALUES (:i, :p, :w, :a)",
            [self._row(row_id)],
        )

    def _size(self) -> int:
        """A batch's new rows in the replay profile: 1, a few, or thousands."""
        roll = self.rng.random()
        if roll < 0.35:
            return 1
        if roll < 0.7:
            return self.rng.randint(2, 6)
        return self.rng.randint(1000, 4000)

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
            self.read.append(self._range_rows(txid, part, meta))

    def _range_rows(self, txid: int, part: str, meta: dict[str, Any]) -> list[tuple[int, str, int]]:
        """The rows of a committed range (late rows excluded); checks they still have the
        digest the range was read with."""
        source = self.spout.range(part, meta)
        with self.spout.connect() as conn:
            table = self.spout.table_object()
            query = sa.select(table.c.id, table.c.word, table.c.amount).where(*source._where(table))
            rows = [(int(i), str(w), int(a)) for i, w, a in conn.execute(query)]
        read = [r for r in rows if r[0] not in self.late]
        if len(read) == len(rows):
            got, digest = source.read()
            if len(got) != int(meta["count"]) or digest != meta.get("digest"):
                self._violation(
                    f"txid {txid} partition {part}: the rows of its committed range changed "
                    f"(the harness must not change them): {len(got)} rows, digest {digest}"
                )
        elif len(read) != int(meta["count"]):
            self._violation(f"txid {txid} partition {part}: {len(read)} rows, {meta}")
        return read

    def _verify_ranges(self) -> None:
        """Read every committed range again: the rows each was read with, still there."""
        for (txid, part, meta), kept in zip(self.ranges, self.read, strict=True):
            if sorted(self._range_rows(txid, part, meta)) != sorted(kept):
                self._violation(f"txid {txid} partition {part}: its rows changed since its commit")

    def reference(self) -> dict[str, Counter[str]]:
        """Counts and sums of the rows the committed ranges name (late rows excluded); each
        range's rows still have the digest it was read with (every commit; in the replay
        profile every :data:`VERIFY_EVERY` commits)."""
        if not self.c.sizes or len(self.hint_of) % VERIFY_EVERY == 0:
            self._verify_ranges()
        counts: Counter[str] = Counter()
        sums: Counter[str] = Counter()
        for read in self.read:
            for _, word, amount in read:
                counts[word] += 1
                sums[word] += amount
        return {"counts": counts, "sums": sums}

    def sink_rows(self, sink: str) -> Counter[tuple[int, str, int]]:
        """The rows ``(id, word, amount)`` the sink's table holds, with their multiplicity."""
        factory = self.sinks[sink]
        columns = ["id", "word", "amount"]
        if sink == "iceberg":
            table = factory.located_at(self.url).load_table()
            data = None if table is None else table.scan(selected_fields=tuple(columns)).to_arrow()
        else:
            from deltalake import DeltaTable

            path = factory.path
            found = DeltaTable.is_deltatable(path)
            data = DeltaTable(path).to_pyarrow_table(columns=columns) if found else None
        if data is None:
            return Counter()
        got = zip(*(data.column(c).to_pylist() for c in columns), strict=True)
        return Counter((int(i), str(w), int(a)) for i, w, a in got)

    def check_sinks(self, txid: int) -> None:
        """Every committed row exactly once in each sink, no other row."""
        want = Counter(r for read in self.read for r in read)
        for sink in self.sinks:
            have = self.sink_rows(sink)
            diff = (have - want) + (want - have)
            if not diff:
                continue
            self.report.rows_different = max(self.report.rows_different, sum(diff.values()))
            first = sorted(diff)[:3]
            shown = [f"id={r[0]} expected={want[r]} got={have[r]}" for r in first]
            text = (
                f"seed={self.c.seed} mode={self.c.mode} txid={txid} sink={sink}: "
                f"{sum(diff.values())} rows different ({sum(have.values())} rows, "
                f"{sum(want.values())} expected); first: {', '.join(shown)}"
            )
            self.report.differences.append(text)
            self.echo(f"DIFFERENCE {text}")

    def stored(self) -> dict[str, dict[str, int]]:
        found: dict[str, dict[str, int]] = {}
        for s, factory in self.factories.items():
            with self.engine.connect() as conn:
                rows = conn.execute(sa.select(factory.layout.table)).mappings().all()
            found[s] = {str(r["word"]): int(r["val"]) for r in rows}
        return found

    def check(self, txid: int, *, sinks: bool = False) -> None:
        """The states (and, with ``sinks``, the sinks' rows) against the reference."""
        want = self.reference()
        have = self.stored()
        if sinks and self.c.sinks:
            self.check_sinks(txid)
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
        if faults and self.c.redeploys and self.rng.random() < self.c.redeploys:
            self.redeploy("redeploy")
            if self.c.replays and self.store.commits.committed_txid() and self.rng.random() < 0.5:
                self.replay()  # before the new deployment's first commit
        if faults and self._fault():
            self.insert(self.rng.randint(1, 3))
            self.report.faults["insert_during_batch"] += 1
        txid = int(self.steps.begin(None)["txid"])
        undo: list[Callable[[], None]] = []
        written: int | None = None  # the hint of the deployment that first wrote its states
        refused = False
        manifest: Any = None
        for attempt in range(1, 31):
            faulty = faults and attempt <= 5  # then the txid is left to commit
            try:
                manifest = self.process(self.steps, txid)
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
                    staged = self.steps.staging.verified_manifest(plan.attempt, plan.metas)
                    try:
                        self.steps.apply_staged(plan, staged)
                        written = self.hint if written is None else written
                    except TridentError as exc:  # written with another partition count
                        if written in (None, self.hint):
                            self._violation(f"txid {txid} attempt {attempt}: {exc!r}")
                            return 0
                        self.report.refused[type(exc).__name__] += 1
                        refused = True
                    self.report.faults["fail_after_state"] += 1
                else:
                    self.report.faults["fail_after_process"] += 1
                if self.rng.random() < 0.7:
                    undo += self.mutate(txid)
                if self.c.redeploys and written is not None and self.rng.random() < 0.5:
                    self.redeploy("redeploy_before_retry")
                continue
            if undo and self.c.mode == "transactional":
                self._violation(f"txid {txid}: a retry read changed rows without refusing them")
            try:
                summary = self.steps.commit(txid)
            except TridentError as exc:
                if written in (None, self.hint):
                    self._violation(f"txid {txid} attempt {attempt}: commit failed: {exc!r}")
                    return 0
                # refused for its partition count: the operator deploys the hint that wrote it
                self.report.refused[type(exc).__name__] += 1
                refused = True
                self._deploy(written)
                continue
            if not summary.get("applied"):
                self._violation(f"txid {txid}: commit did not apply: {summary}")
            self.steps.success(txid)
            self.hint_of[txid] = self.hint
            self._shapes(manifest, int(summary.get("records_in", 0)))
            self.record(txid)
            if faults and self._fault():
                again = self.steps.commit(txid)
                self.report.faults["commit_again"] += 1
                if again.get("applied"):
                    self._violation(f"txid {txid}: a second commit applied again")
            self.check(txid, sinks=refused or written is not None or txid % 10 == 0)
            if faults and self.c.replays and self.rng.random() < self.c.replays:
                self.replay()
            if faults and self._fault():
                self.out_of_order()
            return int(summary.get("records_in", 0))
        self._violation(f"txid {txid} did not commit in 30 attempts")
        return 0

    def _shapes(self, manifest: Any, records: int) -> None:
        """Count the batch by size, and the sinks whose commit partitions were not the hint."""
        if not (self.c.sizes or self.c.shaped):
            return
        self.report.sizes[_bucket(records)] += 1
        states = manifest.get("states", {}) if isinstance(manifest, dict) else {}
        for sink in self.sinks:
            n = len(states.get(sink, {}).get("files", []))
            if n != self.hint:
                self.report.shapes[f"{sink}: {n} for hint {self.hint}"] += 1

    # -- replays of committed txids -------------------------------------------------------------

    def replay(self) -> None:
        """A committed txid (the newest or older) replayed: through the lifecycle, or
        (transactional mode) into each state directly."""
        committed = self.store.commits.committed_txid()
        if self.c.mode == "transactional" and self.rng.random() < 0.5:
            self.replay_into_states(self.rng.randint(max(1, committed - REPLAY_WINDOW), committed))
            self.check(committed, sinks=True)
        else:
            self.replay_through_lifecycle(self.rng.randint(1, committed))
            self.check(committed)

    def replay_through_lifecycle(self, txid: int) -> None:
        """What a run triggered with ``conf={"txid": txid}`` does: begin re-binds the txid, the
        process task skips a committed txid, the commit answers "already committed", success
        runs."""
        self.report.faults["replay_older_txid"] += 1
        run_id = f"replay__{uuid.uuid4().hex[:12]}"
        try:
            begun = int(self.steps.begin(run_id, txid)["txid"])
            summary = self.steps.commit(txid)
            self.steps.success(txid)
        except TridentError as exc:
            self._violation(f"replay of committed txid {txid}: {exc!r}")
            return
        if begun != txid or summary.get("applied") or summary.get("reason") != "already committed":
            self._violation(f"replay of committed txid {txid}: begun {begun}, commit {summary}")
        self.report.replays["lifecycle: already committed"] += 1

    def _held(self, name: str) -> Any:
        return self.sink_rows(name) if name in self.sinks else self.stored()[name]

    def replay_into_states(self, txid: int) -> None:
        """Committed ``txid`` processed again (a new attempt of its metadata, on the current
        deployment) and applied to each state alone, without the coordinator's check: each
        must hold what it held, or refuse the txid with a Trident error."""
        self.report.faults["replay_into_states"] += 1
        hint = "same hint" if self.hint_of.get(txid) == self.hint else "other hint"
        try:
            self.steps.begin(f"replay__{uuid.uuid4().hex[:12]}", txid)
            self.process(self.steps, txid)
            plan = self.steps.plan(txid)
            manifest = self.steps.staging.verified_manifest(plan.attempt, plan.metas)
            staged = self.steps.staging.read_states(manifest)
        except TridentError as exc:  # e.g. a late row inside its range: the emit refuses it
            self.report.refused[type(exc).__name__] += 1
            self.report.replays[f"emit: refused ({type(exc).__name__})"] += 1
            return
        for name in staged:
            before = self._held(name)
            try:
                self.steps.commits.apply_result(txid, staged, only=frozenset({name}), revert=False)
                outcome = "same"
            except TridentError as exc:
                self.report.refused[type(exc).__name__] += 1
                outcome = f"refused ({type(exc).__name__})"
            if self._held(name) != before:
                outcome = f"CHANGED after {outcome}"
                self._violation(
                    f"replay of committed txid {txid} (committed with hint "
                    f"{self.hint_of.get(txid)}, replayed with {self.hint}) changed state {name}"
                )
            self.report.replays[f"{name} ({hint}): {outcome}"] += 1

    def run(self) -> SourceChaosReport:
        started = time.monotonic()
        self.insert(self._size() if self.c.sizes else self.c.partitions * self.c.max_rows)
        while self.store.commits.committed_txid() < self.c.batches and not self.report.violations:
            if self.c.sizes:
                self.insert(self._size())
            elif self.rng.random() < 0.7:
                self.insert(self.rng.randint(0, 2 * self.c.max_rows))
            self.batch(faults=True)
        for _ in range(200):  # drain without faults
            if self.report.violations or not self.spout.has_rows_after(self._highs()):
                break
            self.batch(faults=False)
        self.report.batches = self.store.commits.committed_txid()
        if self.c.sizes or self.c.shaped:
            self._verify_ranges()
            self.check(self.report.batches, sinks=True)
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
        if "iceberg" in self.sinks:
            with contextlib.suppress(Exception):
                factory = self.sinks["iceberg"].located_at(self.url)
                factory.load_catalog().drop_table(factory.table)
        shutil.rmtree(self.sink_dir, ignore_errors=True)


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
        while self.store.commits.committed_txid() < self.c.batches and not self.report.violations:
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
        self.report.batches = self.store.commits.committed_txid()
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
    broker: Any = None,
) -> SourceChaosReport:
    """Run one source-chaos schedule over a table in the ``state_url`` database (its states
    live there too) and return its report (see the module docstring).

    ``store``: the coordinator store (default: a memory store); ``process(steps, txid)``: the
    runtime (default: in-process); ``staging``: the staging directory. Tables are dropped
    afterwards unless ``keep`` or the report is not ok. ``broker``: the Kafka schedule's
    :class:`~tests.harness.kafka.PrivateKafkaCluster` (default: it starts one of its own).
    """
    name = f"chaos_{config.mode[:2]}_{uuid.uuid4().hex[:8]}"
    if config.source == "kafka":
        from tests.harness.kafka_chaos import KafkaChaos

        kchaos = KafkaChaos(
            config, state_url, process or (lambda steps, txid: steps.process_local(txid)),
            store if store is not None else MemoryCoordinatorStore(name), staging, name, echo,
            broker,
        )  # fmt: skip
        kchaos.report.label = label
        found = kchaos.run()
        if found.ok and not keep:
            kchaos.drop()
        echo(found.summary())
        return found
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


def _kafka_faults() -> None:
    from tests.harness.kafka_chaos import KAFKA_FAULTS

    for kind, what in KAFKA_FAULTS.items():
        SOURCE_FAULTS.setdefault(kind, what)


_kafka_faults()
