"""Airflow hook resolving the state database of Trident states to a SQLAlchemy URL and engine.

Three kinds of connection are accepted:

- ``trident_state`` with extra ``{"dialect": "sqlite" | "postgresql"}``; for PostgreSQL host, port,
  schema (the database, shown as "Database"), login and password; for SQLite the database file
  path in schema (or host). Without a dialect it is SQLite, the form's default, when it gives an
  absolute file path and no port, login or password; otherwise it is refused with a hint (also
  by :meth:`StateStoreHook.test_connection`, the form's "Test" button);
- a plain ``postgres`` connection (driver ``postgresql+psycopg``);
- a plain ``sqlite`` connection (the file path in host, as Airflow's SQLite provider keeps it,
  or in schema, as a ``sqlite:////path`` URI gives it).

PostgreSQL extras among ``sslmode``, ``sslrootcert``, ``sslcert``, ``sslkey``,
``connect_timeout``, ``application_name``, ``options`` and ``target_session_attrs`` are passed to
libpq. The password only ever travels inside a :class:`sqlalchemy.engine.URL`, whose text form
hides it.

Examples
--------
>>> import json, os
>>> os.environ["AIRFLOW_CONN_STATE_DOC"] = json.dumps(
...     {"conn_type": "trident_state", "host": "db", "port": 5432, "schema": "trident",
...      "login": "etl", "password": "not-shown", "extra": {"dialect": "postgresql"}})
>>> str(StateStoreHook(state_conn_id="state_doc").get_url())
'postgresql+psycopg://etl:***@db:5432/trident'
>>> del os.environ["AIRFLOW_CONN_STATE_DOC"]
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import TracebackType
from typing import Any

import sqlalchemy as sa
from airflow.sdk import BaseHook
from sqlalchemy.engine import URL

from airflow_trident.errors import ConfigurationError
from airflow_trident.get_provider_info import ui_field_behaviour
from airflow_trident.hooks.connection_reader import extra_of, get_connection

__all__ = ["StateStoreHook"]

POSTGRES_DRIVER = "postgresql+psycopg"
CONNECT_TIMEOUT_S = 10
_LIBPQ_EXTRAS = (
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "connect_timeout",
    "application_name",
    "options",
    "target_session_attrs",
)
_DIALECTS = {"sqlite": "sqlite", "postgresql": "postgresql", "postgres": "postgresql"}


class StateStoreHook(BaseHook):
    """Give the SQLAlchemy URL and engine of the state database named by an Airflow connection.

    Parameters
    ----------
    state_conn_id:
        Airflow connection id (default ``trident_state_default``).
    logger_name:
        Name of the logger, as for every Airflow hook.
    """

    conn_name_attr = "state_conn_id"
    default_conn_name = "trident_state_default"
    conn_type = "trident_state"
    hook_name = "Trident State Store"

    def __init__(
        self, *, state_conn_id: str = default_conn_name, logger_name: str | None = None
    ) -> None:
        super().__init__(logger_name=logger_name)
        self.state_conn_id = state_conn_id
        self._engine: sa.Engine | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(state_conn_id={self.state_conn_id!r})"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Connection form behaviour, mirrored from the provider info (Airflow reads it there)."""
        return ui_field_behaviour(cls.conn_type)

    def get_url(self) -> URL:
        """The SQLAlchemy URL of the state database (no database I/O).

        Raises
        ------
        ConfigurationError
            If the connection type or dialect is not supported, or SQLite has no file path.
        """
        conn = get_connection(self.state_conn_id)
        where = f"state store connection {self.state_conn_id!r}"
        extra = extra_of(conn, where)
        dialect = _dialect(conn.conn_type, extra, where)
        if dialect is None:  # a trident_state connection without one: the form's default
            return URL.create("sqlite", database=_dialectless_sqlite_path(conn, where))
        if dialect == "sqlite":
            return URL.create("sqlite", database=_sqlite_path(conn.host, conn.schema, where))
        if importlib.util.find_spec("psycopg") is None:
            msg = (
                f"{where} is PostgreSQL, whose driver psycopg is not installed here; hint: "
                f"pip install 'airflow-trident[postgres]'"
            )
            raise ConfigurationError(msg)
        return URL.create(
            POSTGRES_DRIVER,
            username=conn.login or None,
            password=conn.password or None,
            host=conn.host or None,
            port=conn.port or None,
            database=conn.schema or None,
            query=_libpq_query(extra, where),
        )

    def get_engine(self) -> sa.Engine:
        """The engine of :meth:`get_url`, created (without I/O) on first call and cached."""
        if self._engine is None:
            self._engine = self._create_engine(self.get_url())
        return self._engine

    def get_conn(self) -> sa.Engine:
        """Same as :meth:`get_engine` (Airflow's generic name)."""
        return self.get_engine()

    def close(self) -> None:
        """Dispose of the cached engine's pool, if any (safe to call twice)."""
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.dispose()

    def __enter__(self) -> StateStoreHook:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def test_connection(self) -> tuple[bool, str]:
        """Run ``SELECT 1`` on a fresh engine and say what was found; never raises.

        A SQLite file that does not exist yet is reported, not created.
        """
        try:
            url = self.get_url()
        except ConfigurationError as exc:
            return False, str(exc)
        shown = url.render_as_string(hide_password=True)
        if url.get_backend_name() == "sqlite" and url.database != ":memory:":
            path = Path(str(url.database))
            if not path.exists():
                if path.parent.is_dir():
                    return True, f"SQLite state store {path} does not exist yet (created on use)"
                return False, f"SQLite state store {path}: directory {path.parent} does not exist"
        engine = self._create_engine(url)
        try:
            with engine.connect() as connection:
                connection.execute(sa.text("SELECT 1")).scalar_one()
        except sa.exc.SQLAlchemyError as exc:
            reason = str(getattr(exc, "orig", None) or exc).strip()
            if url.password:
                reason = reason.replace(str(url.password), "***")
            return False, f"Cannot reach the state store at {shown}: {reason}"
        finally:
            engine.dispose()
        return True, f"Connected to the state store at {shown}"

    def _create_engine(self, url: URL) -> sa.Engine:
        connect_args: dict[str, Any] = {}
        if url.get_backend_name() == "postgresql" and "connect_timeout" not in url.query:
            connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
        self.log.info("State store engine for %s", url.render_as_string(hide_password=True))
        return sa.create_engine(url, pool_pre_ping=True, connect_args=connect_args)


def _dialect(conn_type: str | None, extra: dict[str, Any], where: str) -> str | None:
    """``"sqlite"`` or ``"postgresql"``; ``None`` for a ``trident_state`` connection without one."""
    if conn_type == StateStoreHook.conn_type:
        given = extra.get("dialect", extra.get(f"extra__{conn_type}__dialect"))
        if given in (None, ""):
            return None
        if not isinstance(given, str) or given.lower() not in _DIALECTS:
            msg = f"{where}: dialect {given!r} is not supported; use 'sqlite' or 'postgresql'"
            raise ConfigurationError(msg)
        return _DIALECTS[given.lower()]
    if conn_type in ("sqlite", "postgres"):
        return _DIALECTS[conn_type]
    msg = (
        f"{where} has type {conn_type!r}; hint: use a 'trident_state', 'postgres' or 'sqlite' "
        f"connection"
    )
    raise ConfigurationError(msg)


_SERVER_HINT = (
    "hint: set Dialect to 'postgresql' for a database server (extra "
    '{"dialect": "postgresql"}), or give the SQLite file\'s absolute path in Database'
)


def _dialectless_sqlite_path(conn: Any, where: str) -> str:
    """The SQLite file of a ``trident_state`` connection without a dialect, refusing one that
    describes a server (port, login, password, or a host that is no absolute path)."""
    server_fields = [name for name in ("port", "login", "password") if getattr(conn, name)]
    if server_fields:
        msg = (
            f"{where} has no dialect, so it is SQLite (the form's default), but it sets "
            f"{', '.join(server_fields)}, which SQLite does not use; {_SERVER_HINT}"
        )
        raise ConfigurationError(msg)
    path = _sqlite_path(conn.host, conn.schema, where)
    if path != ":memory:" and not Path(path).is_absolute():
        msg = (
            f"{where} has no dialect, so it is SQLite (the form's default), but {path!r} is "
            f"not an absolute file path; {_SERVER_HINT}"
        )
        raise ConfigurationError(msg)
    return path


def _sqlite_path(host: str | None, schema: str | None, where: str) -> str:
    given = {value for value in (host, schema) if value}
    if len(given) != 1:
        problem = "gives no database file" if not given else f"gives two paths {sorted(given)}"
        msg = f"{where} {problem}; hint: put the SQLite file path in Database (schema)"
        raise ConfigurationError(msg)
    return given.pop()


def _libpq_query(extra: dict[str, Any], where: str) -> dict[str, str]:
    query: dict[str, str] = {}
    for key in _LIBPQ_EXTRAS:
        value = extra.get(key)
        if value in (None, ""):
            continue
        if isinstance(value, (dict, list)):
            msg = f"{where}: extra {key!r} must be a string or a number, not a JSON object or array"
            raise ConfigurationError(msg)
        query[key] = str(value)
    return query
