"""A state table as a :class:`BackingMap`: SQLite (embedded default) or PostgreSQL.

:class:`SqlBackingMap` implements the three store protocols of
:mod:`airflow_trident.state.map.backing`:

* ``BackingMap``: batched ``multi_get``/``multi_put`` (never one round trip per key);
* ``CommitAware``: ``begin_commit(txid)`` opens one connection and one transaction that every call
  uses until ``commit(txid)`` or ``rollback()``, so a commit is one database transaction per
  partition. Outside a commit each call runs in a short transaction of its own. An error in a
  ``multi_get``, ``multi_put`` or ``multi_combine`` inside a commit (a database error, a value
  that cannot be stored, a state ahead of the batch) rolls the commit's transaction back; writes
  are then refused until ``rollback()`` or a new ``begin_commit``, so a failed commit can never be
  half-applied by later calls (reads keep working);
* ``CombiningBackingMap``: with a numeric ``value_type`` the database applies count/sum/min/max
  under the state's exactly-once rule in one statement (see :mod:`.combine`);
* ``TxidIndexedBackingMap``: ``keys_at_txid`` (through the ``txid`` index of opaque tables) and
  ``multi_delete``, inside the commit's transaction like every other call.

Keys repeated within one ``multi_combine`` call are folded with the combiner (they are partial
aggregates of the same batch); repeated within one ``multi_put`` call, the last value wins.

A store is used by one thread at a time (one per partition); stores share their engine's pool.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from airflow_trident.errors import ConfigurationError, StateBehindError, StateError
from airflow_trident.state.base import Key, StateType, check_same_length
from airflow_trident.state.combine import CombineOp
from airflow_trident.state.sql.bulk import PgBulk
from airflow_trident.state.sql.codec import RowCodec
from airflow_trident.state.sql.engine import connect, describe_url, resolve_engine, writing
from airflow_trident.state.sql.engine import translate_errors as _translate
from airflow_trident.state.sql.rows import RowPaths
from airflow_trident.state.sql.schema import check_schema_support, ensure_table, layout_in
from airflow_trident.state.sql.table import TableLayout

__all__ = ["COPY_THRESHOLD", "SqlBackingMap"]

log = logging.getLogger(__name__)

COPY_THRESHOLD = 500
"""On PostgreSQL, writes of at least this many rows go through COPY (see :mod:`.bulk`)."""

_DIALECTS = ("sqlite", "postgresql")


class SqlBackingMap:
    """One state table behind SQLAlchemy Core: a store for the map states.

    Parameters
    ----------
    engine_or_url:
        An :class:`~sqlalchemy.Engine`, or a URL (``sqlite:///path.db``,
        ``postgresql+psycopg://user:password@host:port/db``); engines are shared per URL.
    table:
        The table's name (a valid identifier, see :func:`~airflow_trident.names.validate_name`).
    state_type:
        ``"transactional"``, ``"opaque"`` or ``"non_transactional"``: the values stored are
        ``TransactionalValue`` s, ``OpaqueValue`` s or plain values.
    key_fields, key_types:
        Names of the key columns (the primary key) and their python types (``str`` unless
        given; ``str``, ``int`` or ``float``).
    value_type:
        ``"json"`` (any JSON value, the default), ``"bigint"`` or ``"double"`` (numbers; the
        database then combines sums, minima and maxima itself).
    create:
        Create the table if it does not exist (else only look at its columns: a table made
        before ``None`` keys is used as it is); the only I/O done by the constructor.
    copy_threshold:
        PostgreSQL writes of at least this many rows use COPY.

    Raises
    ------
    InvalidNameError, UnknownStateTypeError, ConfigurationError
        For invalid options (see :class:`~airflow_trident.state.sql.table.TableLayout`).
    StateStoreUnavailableError
        If ``create`` and the database cannot be reached.

    Examples
    --------
    >>> from airflow_trident.state.map.opaque import OpaqueMap
    >>> from airflow_trident.state.combine import CombineOp
    >>> store = SqlBackingMap("sqlite://", "word_counts", state_type="opaque", value_type="bigint")
    >>> counts = OpaqueMap(store)
    >>> counts.begin_commit(1)
    >>> counts.multi_combine([("man",), ("dog",)], [2, 1], CombineOp.SUM)
    >>> counts.commit(1)
    >>> store.multi_get([("man",), ("cat",)])
    [OpaqueValue(curr_txid=1, curr=2, prev=None), None]
    """

    def __init__(
        self,
        engine_or_url: str | sa.URL | sa.Engine,
        table: str,
        *,
        state_type: StateType | str,
        key_fields: Sequence[str] = ("key",),
        key_types: Mapping[str, type] | None = None,
        value_type: str = "json",
        create: bool = True,
        copy_threshold: int = COPY_THRESHOLD,
    ) -> None:
        layout = TableLayout.build(
            table,
            state_type=state_type,
            key_fields=key_fields,
            key_types=key_types,
            value_type=value_type,
        )
        engine = resolve_engine(engine_or_url)
        self._init(engine, layout, copy_threshold)  # checks the dialect before any I/O
        if create:  # the table as it is: one made before None keys is used in its legacy form
            self._use(ensure_table(engine, layout))

    @classmethod
    def from_layout(
        cls,
        engine: sa.Engine,
        layout: TableLayout,
        *,
        copy_threshold: int = COPY_THRESHOLD,
        checked: bool = True,
    ) -> SqlBackingMap:
        """A store over an already validated (and created) table; does no I/O. ``checked``:
        ``layout`` is the table's as it is (``ensure_table``'s answer); else the store looks
        at the table's columns on its first use (a table made before ``None`` keys)."""
        store = cls.__new__(cls)
        store._init(engine, layout, copy_threshold)
        store._checked = checked
        return store

    def _init(self, engine: sa.Engine, layout: TableLayout, copy_threshold: int) -> None:
        dialect = engine.dialect.name
        if dialect not in _DIALECTS:
            msg = (
                f"state table {layout.name!r}: database {describe_url(engine)} is {dialect}; "
                f"supported: SQLite and PostgreSQL (postgresql+psycopg://...)"
            )
            raise ConfigurationError(msg)
        check_schema_support(engine, layout)
        self.engine = engine
        self._use(layout)
        self._checked = False  # whether the layout is the table's (see _check)
        self._copy_threshold = copy_threshold
        self._conn: sa.Connection | None = None
        self._tx: sa.RootTransaction | None = None
        self._txid: int | None = None
        self._aborted: int | None = None

    def _use(self, layout: TableLayout) -> None:
        """Read and write the table through ``layout``."""
        self.layout = layout
        self.codec = RowCodec(layout, self.engine.dialect.name)
        self._rows = RowPaths(layout, self.engine.dialect.name)
        self._bulk = PgBulk(layout) if self.engine.dialect.name == "postgresql" else None
        self._checked = True

    def _check(self, conn: sa.Connection) -> None:
        """On first use, the layout the table has (a table made before ``None`` keys)."""
        if not self._checked:
            self._use(layout_in(conn, self.layout))

    @property
    def table(self) -> str:
        """The table's name."""
        return self.layout.name

    @property
    def state_type(self) -> StateType:
        """The rule whose values this table stores."""
        return self.layout.state_type

    def __repr__(self) -> str:
        return (
            f"SqlBackingMap({describe_url(self.engine)!r}, {self.table!r}, "
            f"state_type={self.state_type.value!r}, value_type={self.layout.value_type!r})"
        )

    # -- transactions ---------------------------------------------------------------------
    def begin_commit(self, txid: int) -> None:
        """Open the connection and the transaction of batch ``txid``'s writes.

        A commit still open (an attempt that failed without ``rollback``) is rolled back first.
        """
        if self._conn is not None:
            log.warning(
                "state table %r: begin_commit(%s) while the commit of txid %s is open; "
                "rolling that one back",
                self.table,
                txid,
                self._txid,
            )
            self._end_commit(commit=False)
        self._aborted = None
        what = f"begin_commit({txid})"
        conn = connect(self.engine, self.table, what)
        try:
            with _translate(self.engine, self.table, what):
                # SQLite: the write lock at once (parallel commit partitions read, then write)
                self._tx = writing(conn).begin()
                self._check(conn)
        except BaseException:
            conn.close()
            raise
        self._conn, self._txid = conn, txid

    def commit(self, txid: int) -> None:
        """Commit the transaction opened by ``begin_commit(txid)``.

        Raises
        ------
        StateError
            If no commit of ``txid`` is open (never begun, or rolled back after an error).
        """
        if self._conn is None or self._txid != txid:
            if self._aborted == txid:
                why = "was rolled back after an error; call rollback() and replay the batch"
            else:
                why = f"was not begun (open: {self._txid}); call begin_commit({txid}) first"
            msg = f"state table {self.table!r}: commit({txid}) failed: the commit {why}"
            raise StateError(msg)
        with _translate(self.engine, self.table, f"commit({txid})"):
            self._end_commit(commit=True)

    def rollback(self) -> None:
        """Discard the writes since ``begin_commit`` (nothing happens if no commit is open)."""
        self._aborted = None
        if self._conn is not None:
            with _translate(self.engine, self.table, f"rollback of txid {self._txid}"):
                self._end_commit(commit=False)

    def _end_commit(self, *, commit: bool) -> None:
        conn, tx = self._conn, self._tx
        self._conn = self._tx = self._txid = None
        try:
            if tx is not None and tx.is_active:
                if commit:
                    tx.commit()
                else:
                    tx.rollback()
        finally:
            if conn is not None:
                conn.close()

    def _abort(self, txid: int | None) -> None:
        """Roll the commit back after an error, keeping the error that caused it."""
        self._aborted = txid
        try:
            self._end_commit(commit=False)
        except Exception:  # the connection may be gone: the server then rolled back itself
            log.warning(
                "state table %r: rollback of txid %s failed", self.table, txid, exc_info=True
            )

    @contextmanager
    def _transaction(self, what: str, *, write: bool) -> Iterator[sa.Connection]:
        """The commit's connection, or a connection in a transaction of its own."""
        if write and self._aborted is not None:
            msg = (
                f"state table {self.table!r}: {what} refused: the commit of txid "
                f"{self._aborted} was rolled back after an error; hint: call rollback(), then "
                f"begin_commit() to replay the batch"
            )
            raise StateError(msg)
        if self._conn is not None:
            txid = self._txid
            try:
                with _translate(self.engine, self.table, f"{what} (txid {txid})"):
                    yield self._conn
            except BaseException:
                self._abort(txid)
                raise
            return
        with (
            connect(self.engine, self.table, what) as conn,
            _translate(self.engine, self.table, what),
            conn.begin(),
        ):
            self._check(conn)
            yield conn

    # -- BackingMap -----------------------------------------------------------------------
    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        """The stored value of each key (``None`` where absent), in batched reads."""
        if not keys:
            return []
        with self._transaction("multi_get", write=False) as conn:
            stored = [self.codec.stored_key(k) for k in keys]  # None: a key no row can have
            wanted = list(dict.fromkeys(k for k in stored if k is not None))
            rows = self._rows.fetch(conn, wanted) if wanted else {}
        decode, n = self.codec.decode, len(self.layout.stored_key_fields)
        values = {key: decode(*row[n:]) for key, row in rows.items()}
        return [None if k is None else values.get(k) for k in stored]

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        """Store ``values[i]`` under ``keys[i]`` (batched upserts; the last of a key wins).

        Raises
        ------
        StateValueNotSerializableError
            If a value cannot be stored (checked before anything is written).
        """
        check_same_length(keys, values, f"state table {self.table!r}: multi_put")
        if not keys:
            return
        with self._transaction("multi_put", write=True) as conn:
            rows = self.codec.encode_rows(keys, values, txid=self._txid)
            if self._bulk is not None and len(rows) >= self._copy_threshold:
                self._bulk.put(conn, rows)
            else:
                self._rows.put(conn, rows)

    def items(self) -> list[tuple[Key, Any]]:
        """Every stored ``(key, value)`` of the table, in key order (a full scan: for
        ``TupleCollectionGet`` on small states)."""
        with self._transaction("items", write=False) as conn:
            layout = self.layout
            columns = [*layout.key_columns, *(layout.table.c[c] for c in layout.stored_columns)]
            n = len(layout.stored_key_fields)
            rows = conn.execute(sa.select(*columns).order_by(*layout.key_columns)).all()
        codec = self.codec
        return [(codec.decode_key(row[:n]), codec.decode(*row[n:])) for row in rows]

    # -- TxidIndexedBackingMap ------------------------------------------------------------
    def keys_at_txid(self, txid: int) -> list[Key]:
        """The keys whose row was written by batch ``txid`` (as ``multi_get`` takes them)."""
        with self._transaction(f"keys_at_txid({txid})", write=False) as conn:
            stored = self._rows.keys_at_txid(conn, txid)
        return [self.codec.decode_key(k) for k in stored]

    def multi_delete(self, keys: Sequence[Key]) -> None:
        """Delete the rows of ``keys`` (absent keys are ignored), in batched statements."""
        if not keys:
            return
        with self._transaction("multi_delete", write=True) as conn:
            stored = (self.codec.stored_key(k) for k in keys)
            wanted = list(dict.fromkeys(k for k in stored if k is not None))
            if wanted:
                self._rows.delete(conn, wanted)

    # -- CombiningBackingMap --------------------------------------------------------------
    def supports_combine(self, op: CombineOp, state_type: StateType) -> bool:
        """True for a numeric ``value_type`` and this table's own state type."""
        return self.layout.numeric and state_type is self.state_type and isinstance(op, CombineOp)

    def multi_combine(
        self,
        keys: Sequence[Key],
        deltas: Sequence[Any],
        op: CombineOp,
        state_type: StateType,
        txid: int,
    ) -> None:
        """Fold ``deltas`` into ``keys`` with ``op`` under the rule, in one SQL statement.

        Raises
        ------
        StateBehindError
            If a key's stored txid is ahead of ``txid``; nothing of the call (and, inside a
            commit, of the commit) is written.
        ConfigurationError
            If :meth:`supports_combine` is false for ``op`` and ``state_type``.
        """
        check_same_length(keys, deltas, f"state table {self.table!r}: multi_combine")
        if not self.supports_combine(op, state_type):
            msg = (
                f"state table {self.table!r} ({self.state_type.value}, value_type "
                f"{self.layout.value_type!r}) cannot combine {op} under the "
                f"{StateType.parse(state_type).value} rule; hint: check supports_combine()"
            )
            raise ConfigurationError(msg)
        if not keys:
            return
        what = f"multi_combine({op.value})"
        with self._transaction(what, write=True) as conn:
            if self._bulk is not None and len(keys) >= self._copy_threshold:
                stored = [self.codec.check_key(k, txid) for k in keys]
                ahead = self._bulk.combine(conn, stored, deltas, op, state_type, txid)
            else:
                folded = self._fold(keys, deltas, op, txid)
                ahead = self._rows.combine(conn, folded, op, state_type, txid)
            if ahead is not None:
                raise self._behind(txid, self.codec.decode_key(ahead[0]), ahead[1])

    def _fold(
        self, keys: Sequence[Key], deltas: Sequence[Any], op: CombineOp, txid: int
    ) -> dict[Key, Any]:
        folded: dict[Key, Any] = {}
        encode, check_key = self.codec.encode_val, self.codec.check_key
        for key, delta in zip(keys, deltas, strict=True):
            key = check_key(key, txid)
            d = encode(delta)
            folded[key] = op.combine(folded[key], d) if key in folded else d
        return folded

    def _behind(self, txid: int, key: Key, stored: int | None) -> StateBehindError:
        if stored is None:
            why = "has no txid (it was written as non-transactional state)"
        else:
            why = f"holds txid {stored}, ahead of the batch"
        msg = (
            f"state table {self.table!r}: batch txid {txid} cannot combine: key {key!r} {why}. "
            f"Commits are strictly ordered, so a later batch wrote this state; hint: two "
            f"topologies may share the table, or the coordinator's txids were reset. Nothing "
            f"was written (the transaction was rolled back)"
        )
        return StateBehindError(msg)
