"""The window store: a window's tuples and each batch's results, in SQL, between batches.

Trident keeps a window's tuples and the results each batch emitted ("in-process triggers") in
a ``WindowsStore``; here it is three tables of the state database (``sql_window_store(None)``:
the run's, like ``sql_state(None, ...)``), shared by every window of every topology:

* ``<table>_tuples``: the tuples a window partition still needs (position, time, values);
* ``<table>_batches``: the results each processed txid emitted, per window partition — a retry
  of that txid emits exactly them again;
* ``<table>_heads``: per window partition, the last txid processed, where the window stands
  after it (``cursor``), and from where tuples are still needed.

A window partition takes txids in order: txid N is computed from the window as txid N-1 left
it, and refused (:class:`~airflow_trident.errors.BatchNotReadyError`) while N-1 is not
processed yet. A txid at or before the head whose results are gone was committed: it emits
nothing. The store is also the state of the window's persist step: the commit of txid N
removes the results of the txids before N (N-1 is committed by then) and the tuples no future
window needs. Values are stored pickled (a window holds any Python values).

Examples
--------
>>> factory = sql_window_store("sqlite://")
>>> store = factory.for_window("doc_topology", "win").make_state()
>>> def compute(cursor, live):  # one result per batch: how many tuples the window holds
...     n = (cursor or {}).get("n", 0) + 1
...     return WindowUpdate([(None, ("x",))], [(len(live) + 1,)], {"n": n}, keep_pos=0)
>>> store.process(0, 1, compute), store.process(0, 2, compute)
(([(1,)], 'new'), ([(2,)], 'new'))
>>> store.process(0, 1, compute)  # a retry of txid 1: the same results
([(1,)], 'retry')
>>> store.begin_commit(2); store.commit(2)  # txid 1's results are removed
>>> store.process(0, 1, compute)
([], 'committed')
>>> store.process(0, 4, compute)
Traceback (most recent call last):
...
airflow_trident.errors.BatchNotReadyError: window 'win' of topology 'doc_topology', ...
"""

from __future__ import annotations

import copy
import json
import logging
import pickle
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from airflow_trident.errors import BatchNotReadyError, ConfigurationError, StateError
from airflow_trident.names import validate_name
from airflow_trident.state.sql.engine import (
    connect,
    describe_url,
    resolve_engine,
    translate_errors,
    writing,
)
from airflow_trident.state.sql.factory import default_state_url
from airflow_trident.state.sql.schema import create_table_if_absent

__all__ = [
    "SqlWindowsStoreFactory",
    "StoredTuple",
    "WindowStateFactory",
    "WindowUpdate",
    "SqlWindowStore",
    "sql_window_store",
]

log = logging.getLogger(__name__)

Row = tuple[Any, ...]


@dataclass(frozen=True)
class StoredTuple:
    """A tuple a window partition holds: its position (0, 1, ... in arrival order), the txid
    that brought it, its time (duration windows) and its values."""

    pos: int
    txid: int
    ts: float | None
    values: Row


@dataclass(frozen=True)
class WindowUpdate:
    """What processing one txid does to a window partition: new tuples ``(ts, values)`` (given
    positions after those added before), the results, the new ``cursor`` (JSON), and from
    where tuples are still needed (``keep_pos`` / ``keep_ts``; ``None``: no limit)."""

    tuples: Sequence[tuple[float | None, Row]]
    results: list[Row]
    cursor: dict[str, Any]
    keep_pos: int | None = None
    keep_ts: float | None = None


Compute = Callable[[dict[str, Any] | None, list[StoredTuple]], WindowUpdate]


def _tables(prefix: str) -> tuple[sa.Table, sa.Table, sa.Table]:
    meta = sa.MetaData()

    def key() -> list[sa.Column[Any]]:
        return [
            sa.Column("topology", sa.String(63), primary_key=True),
            sa.Column("window_id", sa.String(63), primary_key=True),
            sa.Column("part", sa.Integer, primary_key=True),
        ]

    heads = sa.Table(
        f"{prefix}_heads",
        meta,
        *key(),
        sa.Column("txid", sa.BigInteger, nullable=False),
        sa.Column("added", sa.BigInteger, nullable=False),
        sa.Column("cursor", sa.Text, nullable=False),
        sa.Column("keep_pos", sa.BigInteger),
        sa.Column("keep_ts", sa.Float),
    )
    batches = sa.Table(
        f"{prefix}_batches",
        meta,
        *key(),
        sa.Column("txid", sa.BigInteger, primary_key=True),
        sa.Column("results", sa.LargeBinary, nullable=False),
    )
    tuples = sa.Table(
        f"{prefix}_tuples",
        meta,
        *key(),
        sa.Column("pos", sa.BigInteger, primary_key=True),
        sa.Column("txid", sa.BigInteger, nullable=False),
        sa.Column("ts", sa.Float),
        sa.Column("vals", sa.LargeBinary, nullable=False),
    )
    return heads, batches, tuples


_CREATED: set[tuple[str, str]] = set()
_CREATED_LOCK = threading.Lock()


class SqlWindowsStoreFactory:
    """Where windows keep their tuples and results: tables ``<table>_*`` of a SQL database
    (``url_or_engine=None``: the run's state database). See :func:`sql_window_store`."""

    def __init__(
        self, url_or_engine: str | sa.URL | sa.Engine | None, table: str = "trident_window"
    ) -> None:
        validate_name(table, kind="window store table")
        if len(table) > 55:
            msg = f"window store table prefix {table!r} is too long (55 characters at most)"
            raise ConfigurationError(msg)
        self._target = url_or_engine
        self.table = table

    def __repr__(self) -> str:
        where = "the run's database" if self._target is None else describe_url(self._target)
        return f"SqlWindowsStoreFactory({where!r}, {self.table!r})"

    def located_at(self, url: str) -> SqlWindowsStoreFactory:
        """This factory in the database ``url`` when it was made without one, else itself."""
        if self._target is not None:
            return self
        located = copy.copy(self)
        located._target = url
        return located

    def engine(self) -> sa.Engine:
        """The engine of the store's database (tables created on first use)."""
        target = self._target if self._target is not None else default_state_url()
        engine = resolve_engine(target)
        created = (describe_url(engine) + repr(id(engine)), self.table)
        with _CREATED_LOCK:
            if created not in _CREATED:
                what = "create window store tables"
                with (
                    connect(engine, self.table, what) as conn,
                    translate_errors(engine, self.table, what),
                ):
                    for table in _tables(self.table):
                        create_table_if_absent(conn, table)
                _CREATED.add(created)
        return engine

    def for_window(self, topology: str, window: str) -> WindowStateFactory:
        """The state factory of window ``window`` of ``topology`` (its persist step's)."""
        return WindowStateFactory(self, topology, window)


def sql_window_store(
    url_or_engine: str | sa.URL | sa.Engine | None = None, *, table: str = "trident_window"
) -> SqlWindowsStoreFactory:
    """A window store in SQL tables ``<table>_heads``, ``_batches`` and ``_tuples``
    (Trident's ``WindowsStoreFactory``); ``url_or_engine=None``: in the run's state database.

    Making it does no I/O; the tables are created when a window first uses them.
    """
    return SqlWindowsStoreFactory(url_or_engine, table)


@dataclass(frozen=True)
class WindowStateFactory:
    """The state factory of one window's persist step: its store, per partition."""

    factory: Any
    topology: str
    window: str

    def located_at(self, url: str) -> WindowStateFactory:
        """This window's store in the run's database ``url`` (see ``StateBinding``)."""
        located = self.factory.located_at(url)
        if located is self.factory:
            return self
        return WindowStateFactory(located, self.topology, self.window)

    def make_state(self, partition_index: int = 0, num_partitions: int = 1) -> SqlWindowStore:
        """The store of the window (``partition_index`` 0's commit does the cleanup)."""
        return SqlWindowStore(self.factory, self.topology, self.window, partition_index)


class SqlWindowStore:
    """One window's store; also the state its persist step commits (see the module doc)."""

    def __init__(
        self, factory: SqlWindowsStoreFactory, topology: str, window: str, partition_index: int
    ) -> None:
        self.factory = factory
        self.topology = topology
        self.window = window
        self.partition_index = partition_index
        self._tables = _tables(factory.table)
        self._txid: int | None = None

    def __repr__(self) -> str:
        return f"SqlWindowStore({self.topology!r}, {self.window!r})"

    def _key(self, table: sa.Table, part: int | None = None) -> Any:
        clause = (table.c.topology == self.topology) & (table.c.window_id == self.window)
        return clause if part is None else clause & (table.c.part == part)

    # -- processing a batch -----------------------------------------------------------------------

    def process(self, partition: int, txid: int, compute: Compute) -> tuple[list[Row], str]:
        """The results of ``txid`` in window partition ``partition`` and how they came:
        ``"new"`` (computed by ``compute(cursor, live tuples)`` and stored with the new tuples
        in one transaction), ``"retry"`` (stored by an earlier attempt of ``txid``) or
        ``"committed"`` (``txid`` was committed: nothing).

        Raises
        ------
        BatchNotReadyError
            If txid-1 was not processed yet in this window partition.
        StateStoreUnavailableError, StateError
            If the database cannot be reached or refuses the writes (nothing was written).
        """
        engine = self.factory.engine()
        what = f"window {self.window!r} partition {partition} (txid {txid})"
        with (
            connect(engine, self.factory.table, what) as conn,
            translate_errors(engine, self.factory.table, what),
        ):
            writing(conn)  # SQLite: the write lock first (window partitions write at once)
            for _ in range(5):
                try:
                    with conn.begin():
                        return self._process(conn, partition, txid, compute)
                except sa.exc.IntegrityError:
                    # a concurrent attempt of this txid (or a first batch) stored first: read it
                    log.info("%s: stored concurrently by another attempt; reading it", what)
        msg = f"{what}: the store kept changing under this attempt; retry the batch"
        raise StateError(msg)

    def _process(
        self, conn: sa.Connection, part: int, txid: int, compute: Compute
    ) -> tuple[list[Row], str]:
        heads, batches, tuples = self._tables
        found = conn.execute(
            sa.select(batches.c.results).where(self._key(batches, part) & (batches.c.txid == txid))
        ).scalar_one_or_none()
        if found is not None:
            return list(pickle.loads(found)), "retry"
        head = conn.execute(
            sa.select(heads.c.txid, heads.c.added, heads.c.cursor, heads.c.keep_pos)
            .add_columns(heads.c.keep_ts)
            .where(self._key(heads, part))
            .with_for_update()
        ).one_or_none()
        if head is not None and txid <= head.txid:
            return [], "committed"
        if head is not None and txid > head.txid + 1:
            msg = (
                f"window {self.window!r} of topology {self.topology!r}, partition {part}: txid "
                f"{txid} cannot be processed before txid {txid - 1} (processed up to txid "
                f"{head.txid}; a window takes its batches in txid order); retry once txid "
                f"{txid - 1} was processed"
            )
            raise BatchNotReadyError(msg)
        if head is None and txid > 1:
            log.info("window %r partition %d starts at txid %d", self.window, part, txid)
        query = sa.select(tuples.c.pos, tuples.c.txid, tuples.c.ts, tuples.c.vals).where(
            self._key(tuples, part)
        )
        if head is not None and head.keep_pos is not None:
            query = query.where(tuples.c.pos >= head.keep_pos)
        if head is not None and head.keep_ts is not None:
            query = query.where(tuples.c.ts >= head.keep_ts)
        live = [
            StoredTuple(r.pos, r.txid, r.ts, pickle.loads(r.vals))
            for r in conn.execute(query.order_by(tuples.c.pos))
        ]
        cursor = None if head is None else json.loads(head.cursor)
        update = compute(cursor, live)
        count = 0 if head is None else int(head.added)
        new = [
            {
                "topology": self.topology,
                "window_id": self.window,
                "part": part,
                "pos": count + i,
                "txid": txid,
                "ts": ts,
                "vals": pickle.dumps(tuple(values), protocol=pickle.HIGHEST_PROTOCOL),
            }
            for i, (ts, values) in enumerate(update.tuples)
        ]
        if new:
            conn.execute(tuples.insert(), new)
        conn.execute(
            batches.insert().values(
                topology=self.topology,
                window_id=self.window,
                part=part,
                txid=txid,
                results=pickle.dumps(update.results, protocol=pickle.HIGHEST_PROTOCOL),
            )
        )
        values = {
            "txid": txid,
            "added": count + len(new),
            "cursor": json.dumps(update.cursor, sort_keys=True),
            "keep_pos": update.keep_pos,
            "keep_ts": update.keep_ts,
        }
        if head is None:
            conn.execute(
                heads.insert().values(
                    topology=self.topology, window_id=self.window, part=part, **values
                )
            )
        else:
            conn.execute(heads.update().where(self._key(heads, part)).values(**values))
        return update.results, "new"

    # -- the commit of the window's persist step --------------------------------------------------

    def begin_commit(self, txid: int) -> None:
        """Start the commit of batch ``txid``."""
        self._txid = txid

    def commit(self, txid: int) -> None:
        """Remove the results of txids before ``txid`` (committed: ``txid`` commits after
        them) and the tuples no future window needs; partition 0's state does it for every
        partition of the window (the others do nothing)."""
        self._txid = None
        if self.partition_index == 0:
            self.cleanup(txid)

    def rollback(self) -> None:
        """Forget the commit in progress (nothing is written before :meth:`commit`)."""
        self._txid = None

    def cleanup(self, txid: int) -> int:
        """Remove results of txids before ``txid`` and tuples no longer needed; return how
        many rows went."""
        heads, batches, tuples = self._tables
        engine = self.factory.engine()
        what = f"window {self.window!r}: clean up at txid {txid}"
        removed = 0
        with (
            connect(engine, self.factory.table, what) as conn,
            translate_errors(engine, self.factory.table, what),
            writing(conn).begin(),
        ):
            removed += conn.execute(
                batches.delete().where(self._key(batches) & (batches.c.txid < txid))
            ).rowcount
            for head in conn.execute(
                sa.select(heads.c.part, heads.c.keep_pos, heads.c.keep_ts).where(self._key(heads))
            ):
                where = self._key(tuples, head.part)
                if head.keep_pos is not None:
                    removed += conn.execute(
                        tuples.delete().where(where & (tuples.c.pos < head.keep_pos))
                    ).rowcount
                if head.keep_ts is not None:
                    removed += conn.execute(
                        tuples.delete().where(where & (tuples.c.ts < head.keep_ts))
                    ).rowcount
        return removed

    # -- inspection ---------------------------------------------------------------------------

    def pending(self) -> dict[tuple[int, int], list[Row]]:
        """The stored results by ``(partition, txid)`` (txids not yet cleaned up)."""
        _, batches, _ = self._tables
        engine = self.factory.engine()
        with connect(engine, self.factory.table, "read") as conn:
            rows = conn.execute(
                sa.select(batches.c.part, batches.c.txid, batches.c.results)
                .where(self._key(batches))
                .order_by(batches.c.part, batches.c.txid)
            ).all()
        return {(r.part, r.txid): list(pickle.loads(r.results)) for r in rows}

    def held(self) -> dict[int, list[StoredTuple]]:
        """The stored tuples by partition."""
        _, _, tuples = self._tables
        engine = self.factory.engine()
        with connect(engine, self.factory.table, "read") as conn:
            rows = conn.execute(
                sa.select(tuples.c.part, tuples.c.pos, tuples.c.txid, tuples.c.ts, tuples.c.vals)
                .where(self._key(tuples))
                .order_by(tuples.c.part, tuples.c.pos)
            ).all()
        held: dict[int, list[StoredTuple]] = {}
        for r in rows:
            held.setdefault(r.part, []).append(
                StoredTuple(r.pos, r.txid, r.ts, pickle.loads(r.vals))
            )
        return held
