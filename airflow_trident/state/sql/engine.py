"""Engines shared per URL, and translation of database errors into :class:`TridentError` s.

Creating an engine does no I/O. Engines made here check a pooled connection before use (so a
restarted server is survived), give PostgreSQL connections a connect timeout, and make SQLite
transactions start at ``begin()``. A URL is only ever shown with its password hidden.

Examples
--------
>>> describe_url("postgresql+psycopg://trident:secret@db:5432/trident")
'postgresql+psycopg://trident:***@db:5432/trident'
>>> shared_engine("sqlite://") is shared_engine("sqlite://")
True
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from airflow_trident.errors import StateError, StateStoreUnavailableError, TridentError

__all__ = [
    "CONNECT_TIMEOUT_S",
    "SQLITE_BUSY_TIMEOUT_S",
    "connect",
    "describe_url",
    "resolve_engine",
    "shared_engine",
    "translate_errors",
    "writing",
]

CONNECT_TIMEOUT_S = 10
"""Default connect timeout (seconds) of PostgreSQL engines made from a URL."""

_HINT_UNAVAILABLE = (
    "hint: check that the database server runs and the URL (the state connection, or "
    "TRIDENT_STATE_URL) is right"
)

SQLITE_BUSY_TIMEOUT_S = 60.0
"""How long a SQLite connection waits for another one's write lock before "database is
locked" (pysqlite's default is 5 s)."""
_WRITING = "trident_sqlite_immediate"

_ENGINES: dict[str, sa.Engine] = {}
_ENGINES_LOCK = threading.Lock()


def describe_url(url: str | sa.URL | sa.Engine) -> str:
    """The URL as text with its password replaced by ``***``."""
    if isinstance(url, sa.Engine):
        url = url.url
    return sa.make_url(url).render_as_string(hide_password=True)


def shared_engine(url: str | sa.URL) -> sa.Engine:
    """Return the process-wide engine for ``url``, creating it (without I/O) on first use."""
    parsed = sa.make_url(url)
    cache_key = parsed.render_as_string(hide_password=False)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(cache_key)
        if engine is None:
            connect_args: dict[str, object] = {}
            if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
                connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
            if parsed.get_backend_name() == "sqlite":
                connect_args["isolation_level"] = None  # we emit BEGIN ourselves, see below
                # writers wait for each other (one at a time) this long, not pysqlite's 5 s
                if "timeout" not in parsed.query:
                    connect_args["timeout"] = SQLITE_BUSY_TIMEOUT_S
            engine = sa.create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
            if parsed.get_backend_name() == "sqlite":
                sa.event.listen(engine, "begin", _sqlite_begin)
            _ENGINES[cache_key] = engine
        return engine


def _sqlite_begin(conn: sa.Connection) -> None:
    """Start SQLite transactions at ``begin()``, not at the first write as pysqlite would.

    SQLAlchemy's documented recipe: with pysqlite's own transaction handling off, a commit's
    reads and writes all belong to the one transaction opened by ``begin_commit``. A
    connection marked by :func:`writing` begins ``IMMEDIATE``: it takes SQLite's write lock
    at once. Two transactions that read and then write (a state commit, a window's batch)
    would otherwise both hold read locks and deadlock on the upgrade: SQLite fails one at once
    with "database is locked" (busy waits cannot help), e.g. two Spark tasks of one batch.
    """
    immediate = conn.get_execution_options().get(_WRITING, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def writing(conn: sa.Connection) -> sa.Connection:
    """``conn``, whose transactions (from its next ``begin()``) take SQLite's write lock at
    once (``BEGIN IMMEDIATE``: writers queue, for up to :data:`SQLITE_BUSY_TIMEOUT_S`); no
    change on PostgreSQL."""
    if conn.dialect.name == "sqlite":
        conn.execution_options(**{_WRITING: True})
    return conn


def resolve_engine(url_or_engine: str | sa.URL | sa.Engine) -> sa.Engine:
    """An :class:`~sqlalchemy.Engine` as given, or the shared engine of a URL."""
    if isinstance(url_or_engine, sa.Engine):
        return url_or_engine
    return shared_engine(url_or_engine)


def _scrub(text: str, engine: sa.Engine) -> str:
    password = engine.url.password
    if password:
        text = text.replace(str(password), "***")
    return text


def _driver_message(exc: sa.exc.DBAPIError, engine: sa.Engine) -> str:
    orig = exc.orig if exc.orig is not None else exc
    first = " ".join(str(orig).split())  # one line, no statement or parameters
    return _scrub(first, engine)


def connect(engine: sa.Engine, table: str, what: str) -> sa.Connection:
    """Check a connection out of ``engine``'s pool.

    Raises
    ------
    StateStoreUnavailableError
        If the database cannot be reached (refused, unknown host, missing file, bad login...).
    """
    try:
        return engine.connect()
    except sa.exc.DBAPIError as exc:
        raise _unavailable(exc, engine, table, what) from exc


@contextmanager
def translate_errors(engine: sa.Engine, table: str, what: str) -> Iterator[None]:
    """Re-raise database errors as :class:`StateStoreUnavailableError` or :class:`StateError`.

    ``what`` says what was being done (``"multi_put (txid 7)"``) and goes into the message.
    A lost connection is "unavailable"; any other database error is a :class:`StateError`.
    Errors that are already :class:`TridentError` s pass unchanged.
    """
    try:
        yield
    except TridentError:
        raise
    except sa.exc.DBAPIError as exc:
        if exc.connection_invalidated:
            raise _unavailable(exc, engine, table, what) from exc
        msg = (
            f"state table {table!r} at {describe_url(engine)}: {what} failed: "
            f"{_driver_message(exc, engine)}; hint: check the table's schema and the values' "
            f"types (key_types, value_type); the call's transaction was rolled back"
        )
        raise StateError(msg) from exc


def _unavailable(
    exc: sa.exc.DBAPIError, engine: sa.Engine, table: str, what: str
) -> StateStoreUnavailableError:
    msg = (
        f"state table {table!r}: {what} failed, the state database {describe_url(engine)} is "
        f"unavailable: {_driver_message(exc, engine)}; {_HINT_UNAVAILABLE}"
    )
    return StateStoreUnavailableError(msg)
