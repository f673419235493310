"""Portable paths (SQLite, and small calls on PostgreSQL): chunked reads, ``executemany`` upserts.

Reads fetch up to a few thousand keys per statement: a tuple ``IN`` on SQLite, a join against
``unnest`` of one array per key field on PostgreSQL (one parameter per key field whatever the
chunk size). Writes run one ``INSERT ... ON CONFLICT DO UPDATE`` per row through the driver's
``executemany`` (one statement prepared once; psycopg pipelines the rows), in key order on
PostgreSQL so that concurrent writers lock rows in the same order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.dialects import sqlite

from airflow_trident.state.base import Key, StateType
from airflow_trident.state.combine import CombineOp
from airflow_trident.state.sql.codec import Row
from airflow_trident.state.sql.combine import combine_set, put_set
from airflow_trident.state.sql.table import TableLayout

__all__ = ["RowPaths"]

GET_CHUNK = 5000
"""Keys per read statement (SQLite allows 32766 parameters per statement)."""


class RowPaths:
    """Reads and row-by-row upserts of one state table, for SQLite or PostgreSQL.

    Examples
    --------
    >>> import sqlalchemy as sa
    >>> from airflow_trident.state.sql.table import TableLayout
    >>> layout = TableLayout.build("doc_rows", state_type="opaque", value_type="bigint")
    >>> paths = RowPaths(layout, "sqlite")
    >>> with sa.create_engine("sqlite://").begin() as conn:  # keys as rows hold them
    ...     layout.table.create(conn)
    ...     paths.combine(conn, {("a", 0): 2}, CombineOp.SUM, StateType.OPAQUE, 1)
    ...     paths.fetch(conn, [("a", 0), ("b", 0)])
    {('a', 0): ('a', 0, 1, 2, None)}
    """

    def __init__(self, layout: TableLayout, dialect: str) -> None:
        self.layout = layout
        self.dialect = dialect
        self._n = len(layout.stored_key_fields)
        self._names = [*layout.stored_key_fields, *layout.stored_columns]
        self._columns = [layout.table.c[c] for c in self._names]
        self._no_prev = (None,) * len(layout.prev_columns)
        self._insert = pg.insert if dialect == "postgresql" else sqlite.insert
        ins = self._insert(layout.table)
        self._put = ins.on_conflict_do_update(
            index_elements=layout.key_columns, set_=put_set(ins.excluded, layout.stored_columns)
        )
        self._combines: dict[tuple[CombineOp, StateType], sa.Insert] = {}
        self._chunk = max(1, min(GET_CHUNK, 30000 // self._n))

    # -- reads ----------------------------------------------------------------------------
    def _chunks(self, keys: Sequence[Key]) -> Iterator[Sequence[Key]]:
        for start in range(0, len(keys), self._chunk):
            yield keys[start : start + self._chunk]

    def _where_keys(self, chunk: Sequence[Key]) -> tuple[Any, Any | None]:
        """A ``(where clause, join target)`` selecting the rows of ``chunk``'s keys."""
        cols = self.layout.key_columns
        if self.dialect == "postgresql":
            arrays = [
                sa.literal(list(values), pg.ARRAY(col.type))
                for col, values in zip(cols, zip(*chunk, strict=True), strict=True)
            ]
            wanted = sa.func.unnest(*arrays).table_valued(*self.layout.stored_key_fields)
            wanted = wanted.render_derived(name="wanted")
            on = sa.and_(*(col == wanted.c[col.name] for col in cols))
            return on, wanted
        if self._n == 1:
            return cols[0].in_([k[0] for k in chunk]), None
        return sa.tuple_(*cols).in_(list(chunk)), None

    def fetch(self, conn: sa.Connection, keys: Sequence[Key]) -> dict[Key, Row]:
        """The stored rows of ``keys`` (distinct tuples), by key; absent keys are left out."""
        found: dict[Key, Row] = {}
        n = self._n
        for chunk in self._chunks(keys):
            where, join = self._where_keys(chunk)
            query = sa.select(*self._columns)
            query = query.join(join, where) if join is not None else query.where(where)
            for row in conn.execute(query):
                found[tuple(row[:n])] = tuple(row)
        return found

    def find_ahead(
        self, conn: sa.Connection, keys: Sequence[Key], txid: int
    ) -> tuple[Key, int | None] | None:
        """A key of ``keys`` whose stored txid is ahead of ``txid`` (or NULL), with that txid."""
        table = self.layout.table
        for chunk in self._chunks(keys):
            where, join = self._where_keys(chunk)
            query = sa.select(*self.layout.key_columns, table.c.txid)
            query = query.join(join, where) if join is not None else query.where(where)
            query = query.where(sa.or_(table.c.txid > txid, table.c.txid.is_(None))).limit(1)
            row = conn.execute(query).first()
            if row is not None:
                stored: int | None = row[-1]
                return tuple(row[:-1]), stored
        return None

    def keys_at_txid(self, conn: sa.Connection, txid: int) -> list[Key]:
        """The keys of the rows whose ``txid`` is ``txid`` (the txid index finds them)."""
        table = self.layout.table
        query = sa.select(*self.layout.key_columns).where(table.c.txid == txid)
        return [tuple(row) for row in conn.execute(query)]

    # -- writes ---------------------------------------------------------------------------
    def delete(self, conn: sa.Connection, keys: Sequence[Key]) -> None:
        """Delete the rows of ``keys`` (distinct tuples); absent keys are ignored."""
        table = self.layout.table
        for chunk in self._chunks(keys):
            where, join = self._where_keys(chunk)
            if join is not None:  # PostgreSQL: the keys come as arrays, one per key field
                wanted = sa.select(*(join.c[f] for f in self.layout.stored_key_fields))
                where = sa.tuple_(*self.layout.key_columns).in_(wanted)
            conn.execute(table.delete().where(where))

    def _params(self, rows: Sequence[Row]) -> list[dict[str, Any]]:
        if self.dialect == "postgresql":
            # Stable: the last of repeated keys is still written last. Mixed key types cannot
            # be sorted: the database will then say what is wrong.
            with contextlib.suppress(TypeError):
                rows = sorted(rows, key=lambda r: r[: self._n])
        names = self._names
        return [dict(zip(names, row, strict=True)) for row in rows]

    def put(self, conn: sa.Connection, rows: Sequence[Row]) -> None:
        """Upsert ``rows`` (``key..., txid, val, prev``) one by one; the last of a key wins."""
        if rows:
            conn.execute(self._put, self._params(rows))

    def combine_statement(self, op: CombineOp, state_type: StateType) -> sa.Insert:
        """``INSERT ... VALUES (key, txid, delta, NULL) ON CONFLICT DO UPDATE`` under a rule."""
        stmt = self._combines.get((op, state_type))
        if stmt is None:
            ins = self._insert(self.layout.table)
            set_, where = combine_set(
                state_type, op, self.layout.table.c, ins.excluded, self.layout.combine_columns
            )
            stmt = ins.on_conflict_do_update(
                index_elements=self.layout.key_columns, set_=set_, where=where
            ).execution_options(preserve_rowcount=True)
            self._combines[(op, state_type)] = stmt
        return stmt

    def combine(
        self,
        conn: sa.Connection,
        folded: dict[Key, Any],
        op: CombineOp,
        state_type: StateType,
        txid: int,
    ) -> tuple[Key, int | None] | None:
        """Fold each delta of ``folded`` (distinct keys) into its key.

        Returns a key whose stored txid is ahead of ``txid`` with that txid, if any; rows may
        then have been written and the caller must roll back.
        """
        if not folded:
            return None
        stored_txid = None if state_type is StateType.NON_TRANSACTIONAL else txid
        rows = [(*key, stored_txid, delta, *self._no_prev) for key, delta in folded.items()]
        affected = conn.execute(self.combine_statement(op, state_type), self._params(rows))
        if affected.rowcount < len(rows):
            return self.find_ahead(conn, list(folded), txid)
        return None
