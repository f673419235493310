"""Creating a state table (and its indexes), and checking that an existing one has the expected
columns.

An index the layout has and an existing table lacks (a table created by an earlier version) is
created with ``CREATE INDEX IF NOT EXISTS``; only then, because on PostgreSQL that statement
waits for the table's open write transactions even when the index exists.

A table made before ``trident_null_keys`` (the primary key's column saying which key fields are
``None``) is used as it is, through the layout's :meth:`~TableLayout.legacy` form, until
:func:`migrate_null_keys` adds the column (keeping every row).

Examples
--------
>>> import sqlalchemy as sa
>>> from airflow_trident.state.sql.table import NULL_KEYS, TableLayout
>>> engine = sa.create_engine("sqlite://")
>>> ensure_table(engine, TableLayout.build("counts", state_type="opaque")).null_keys
True
>>> ensure_table(engine, TableLayout.build("counts", state_type="opaque", key_fields=("word",)))
Traceback (most recent call last):
...
airflow_trident.errors.ConfigurationError: state table 'counts' exists with columns key text, ...
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from airflow_trident.errors import ConfigurationError
from airflow_trident.state.sql.engine import connect, translate_errors
from airflow_trident.state.sql.table import NULL_KEYS, TableLayout

__all__ = [
    "check_schema_support",
    "create_schema_if_absent",
    "create_table_if_absent",
    "ensure_table",
    "layout_in",
    "migrate_null_keys",
]


def ensure_table(engine: sa.Engine, layout: TableLayout) -> TableLayout:
    """``CREATE TABLE IF NOT EXISTS``, create missing indexes, then check the table's columns
    and their kinds; return the layout the table has (``layout``, or its
    :meth:`~TableLayout.legacy` form for a table made before ``None`` keys).

    Raises
    ------
    StateStoreUnavailableError
        If the database cannot be reached.
    ConfigurationError
        If the table exists with other columns (other key fields, say) or column kinds (a json
        table opened as bigint, say).
    """
    what = "create table"
    check_schema_support(engine, layout)
    name, schema = layout.name, layout.schema
    with connect(engine, name, what) as conn, translate_errors(engine, name, what):
        if schema is not None:
            create_schema_if_absent(conn, schema)
        create_table_if_absent(conn, layout.table)
        with conn.begin():
            inspector = sa.inspect(conn)
            found = {c["name"]: _kind(c["type"]) for c in inspector.get_columns(name, schema)}
            indexes = {ix["name"] for ix in inspector.get_indexes(name, schema)}
        layout = _check_columns(layout, found)
        for index in layout.table.indexes:
            if index.name not in indexes:
                _create_index(conn, index)
    return layout


def layout_in(conn: sa.Connection, layout: TableLayout) -> TableLayout:
    """The layout of the table as it is in the database (looked at through ``conn``, in the
    caller's transaction; nothing is created): ``layout``, or its
    :meth:`~TableLayout.legacy` form when the table exists without ``trident_null_keys``."""
    inspector = sa.inspect(conn)
    if not layout.null_keys or not inspector.has_table(layout.name, layout.schema):
        return layout
    names = {c["name"] for c in inspector.get_columns(layout.name, layout.schema)}
    return layout if NULL_KEYS in names else layout.legacy()


def migrate_null_keys(engine: sa.Engine, layout: TableLayout) -> bool:
    """Give a table made before ``None`` keys its ``trident_null_keys`` column (0 in every
    row: no key field of a stored row is ``None``) and make it part of the primary key, in one
    transaction; return whether anything changed (``False``: already done, or no table).

    PostgreSQL adds the column and swaps the primary key (the table is locked meanwhile);
    SQLite, which cannot change a primary key, copies the rows into a new table that takes the
    old one's name (its txid index made again). Run it while no commit writes the table.
    """
    what = "migrate table (trident_null_keys)"
    name, schema = layout.name, layout.schema
    with connect(engine, name, what) as conn, translate_errors(engine, name, what), conn.begin():
        inspector = sa.inspect(conn)
        if not inspector.has_table(name, schema):
            return False
        found = {c["name"]: _kind(c["type"]) for c in inspector.get_columns(name, schema)}
        if NULL_KEYS in found:
            return False
        legacy = _check_columns(layout.legacy(), found)
        if engine.dialect.name == "postgresql":
            _migrate_postgresql(conn, inspector, layout)
        else:
            _migrate_sqlite(conn, legacy, layout)
    return True


def _migrate_postgresql(conn: sa.Connection, inspector: Any, layout: TableLayout) -> None:
    prep = conn.dialect.identifier_preparer
    table = prep.format_table(layout.table)
    pk = inspector.get_pk_constraint(layout.name, layout.schema).get("name")
    columns = ", ".join(prep.quote(c) for c in layout.stored_key_fields)
    conn.execute(sa.text(
        f"ALTER TABLE {table} ADD COLUMN {prep.quote(NULL_KEYS)} BIGINT NOT NULL DEFAULT 0"
    ))  # fmt: skip
    if pk:
        conn.execute(sa.text(f"ALTER TABLE {table} DROP CONSTRAINT {prep.quote(pk)}"))
    conn.execute(sa.text(f"ALTER TABLE {table} ADD PRIMARY KEY ({columns})"))


def _migrate_sqlite(conn: sa.Connection, legacy: TableLayout, layout: TableLayout) -> None:
    prep = conn.dialect.identifier_preparer
    staged = f"{layout.name}__trident_migrating"
    copy = sa.Table(staged, sa.MetaData(), *(c._copy() for c in layout.table.columns))
    conn.execute(sa.schema.CreateTable(copy))
    columns = ", ".join(prep.quote(c.name) for c in legacy.table.columns)
    conn.execute(sa.text(
        f"INSERT INTO {prep.quote(staged)} ({columns}, {prep.quote(NULL_KEYS)}) "
        f"SELECT {columns}, 0 FROM {prep.quote(layout.name)}"
    ))  # fmt: skip
    conn.execute(sa.text(f"DROP TABLE {prep.quote(layout.name)}"))
    conn.execute(sa.text(f"ALTER TABLE {prep.quote(staged)} RENAME TO {prep.quote(layout.name)}"))
    for index in layout.table.indexes:
        conn.execute(sa.schema.CreateIndex(index, if_not_exists=True))


def check_schema_support(engine: sa.Engine, layout: TableLayout) -> None:
    """Refuse a schema-qualified table (``analytics.word_counts``) on SQLite, which has no
    schemas (its ``schema.table`` names an attached database file).

    Raises
    ------
    ConfigurationError
        If ``layout`` names a schema and ``engine`` is not PostgreSQL.
    """
    if layout.schema is not None and engine.dialect.name != "postgresql":
        msg = (
            f"state table {layout.qualified!r}: a schema-qualified table needs PostgreSQL, but "
            f"the state database is {engine.dialect.name}; hint: name the table without "
            f"{layout.schema + '.'!r} on SQLite, or use a PostgreSQL state connection"
        )
        raise ConfigurationError(msg)


def create_schema_if_absent(conn: sa.Connection, schema: str) -> None:
    """Create PostgreSQL schema ``schema`` unless it exists (looked up first: creating one
    needs the CREATE privilege on the database, which a role writing into an existing schema
    may lack). Another process creating it at the same moment is fine."""
    with conn.begin():
        if sa.inspect(conn).has_schema(schema):
            return
    try:
        with conn.begin():
            conn.execute(sa.schema.CreateSchema(schema, if_not_exists=True))
    except (sa.exc.IntegrityError, sa.exc.ProgrammingError):
        with conn.begin():
            if not sa.inspect(conn).has_schema(schema):
                raise


def create_table_if_absent(conn: sa.Connection, table: sa.Table) -> None:
    """``CREATE TABLE IF NOT EXISTS`` (not its indexes) in its own transaction, safe
    when several processes or Spark tasks create the same table at the same moment.

    PostgreSQL's ``IF NOT EXISTS`` is not atomic: two sessions can both see no table, and the
    second fails with ``duplicate key ... pg_type`` (an ``IntegrityError``) or ``relation ...
    already exists`` (a ``ProgrammingError``). Either way the table exists now, which is checked
    before the error is ignored.

    >>> engine = sa.create_engine("sqlite://")
    >>> table = sa.Table("t", sa.MetaData(), sa.Column("k", sa.Integer, primary_key=True))
    >>> with engine.connect() as conn:
    ...     create_table_if_absent(conn, table)
    ...     create_table_if_absent(conn, table)
    ...     sa.inspect(conn).has_table("t")
    True
    """
    try:
        with conn.begin():
            conn.execute(sa.schema.CreateTable(table, if_not_exists=True))
    except (sa.exc.IntegrityError, sa.exc.ProgrammingError):
        with conn.begin():
            exists = sa.inspect(conn).has_table(table.name, table.schema)
        if not exists:
            raise


def _check_columns(layout: TableLayout, found: dict[str, str]) -> TableLayout:
    """The layout whose columns are ``found``: ``layout``, or its legacy form (a table made
    before ``None`` keys).

    Raises
    ------
    ConfigurationError
        If neither has those columns.
    """
    expected = {c.name: _kind(c.type) for c in layout.table.columns}
    if found == expected:
        return layout
    if layout.null_keys and NULL_KEYS not in found:
        legacy = layout.legacy()
        if found == {c.name: _kind(c.type) for c in legacy.table.columns}:
            return legacy
    msg = (
        f"state table {layout.name!r} exists with columns {_show(found)}, expected "
        f"{_show(expected)}; hint: use the key_fields, key_types and value_type the table was "
        f"created with, or another table name"
    )
    raise ConfigurationError(msg)


def _create_index(conn: sa.Connection, index: sa.Index) -> None:
    try:
        with conn.begin():
            conn.execute(sa.schema.CreateIndex(index, if_not_exists=True))
    except (sa.exc.IntegrityError, sa.exc.ProgrammingError):
        # Created by another process at the same moment, as for the table.
        table = index.table
        if table is None:
            raise
        with conn.begin():
            names = {ix["name"] for ix in sa.inspect(conn).get_indexes(table.name, table.schema)}
        if index.name not in names:
            raise


def _kind(column_type: Any) -> str:
    """A column type's family, as the database reports it back."""
    if isinstance(column_type, sa.Integer):
        return "integer"
    if isinstance(column_type, sa.Float | sa.Double | sa.Numeric):
        return "number"
    if isinstance(column_type, sa.String):
        return "text"
    return str(column_type).lower()


def _show(columns: dict[str, str]) -> str:
    return ", ".join(f"{name} {kind}" for name, kind in columns.items())
