"""The Iceberg catalog of :func:`~airflow_trident.state.iceberg.iceberg_state`, from an Airflow
connection, without importing Airflow.

A sink finds its catalog, first match wins:

1. ``catalog={...}``: pyiceberg catalog properties, as given;
2. ``iceberg_conn_id="..."``: an Airflow connection, read through Airflow's own API by the
   Airflow adapter (``airflow_trident.hooks.iceberg``; any secrets backend) in the task that
   makes the batch; a Spark executor that commits the sink gets the catalog the task resolved
   in its task closure (:func:`airflow_trident.connections.iceberg_catalog`), as Delta's and
   the databases' connections travel. A process with neither (no Airflow, nothing shipped) is
   refused with a hint: ``AIRFLOW_CONN_*`` is never read by hand;
3. the run's state database (``state_conn_id`` of the DAG, bound like SQL states) as a SQL
   catalog, with the sink's ``warehouse``;
4. ``TRIDENT_STATE_URL``, else SQLite under ``~/.airflow_trident`` (the embedded default).

A connection becomes catalog properties by :func:`connection_properties`:

============================  ==========================================================
connection type               catalog
============================  ==========================================================
``postgres``                  SQL catalog on PostgreSQL (``postgresql+psycopg``)
``sqlite``                    SQL catalog in the SQLite file of host (or schema)
``trident_state``             SQL catalog, as the state store reads it (``dialect`` extra)
anything else (``iceberg``)   the Iceberg provider's shape: a REST catalog (``type`` extra
                              for another) at host, used as given when it is a full URI
                              (``https://catalog.example/ws``); a bare host name becomes
                              ``https://host:port/schema``, or the ``uri`` extra; login and
                              password are the OAuth2 ``credential`` (client id and secret),
                              a password alone its ``token``
============================  ==========================================================

Every extra except ``catalog_name`` is passed on as a catalog property (``warehouse``,
``s3.endpoint``, ``type`` to pick another pyiceberg catalog); an extra that is not a JSON
object, or holds an object or array as a value, is refused naming the connection. Properties
may hold a password: they are never logged or shown (:func:`redacted`).

Examples
--------
>>> fields = ConnectionFields("sqlite", host="/data/catalog.db",
...                           extra={"warehouse": "file:///data/warehouse"})
>>> name, props = connection_properties(fields, "iceberg_doc")
>>> name, props["type"], props["uri"], props["warehouse"]
('trident', 'sql', 'sqlite:////data/catalog.db', 'file:///data/warehouse')
>>> official = ConnectionFields("iceberg", host="https://catalog.example.com/ws",
...     login="client-id", password="not-shown", extra={"warehouse": "lake"})
>>> redacted(connection_properties(official, "rest_doc")[1])
{'type': 'rest', 'warehouse': 'lake', 'uri': 'https://catalog.example.com/ws', 'credential': '***'}
>>> connection_properties(ConnectionFields("iceberg", host="cat.example", port=8181,
...     schema="api"), "rest_doc")[1]
{'type': 'rest', 'uri': 'https://cat.example:8181/api'}
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_trident import connections
from airflow_trident.errors import ConfigurationError

__all__ = [
    "ConnectionFields",
    "connection_properties",
    "load_catalog",
    "redacted",
    "register_connection_resolver",
    "resolve_connection",
]

DEFAULT_CATALOG_NAME = "trident"
_SECRET_WORDS = ("password", "token", "secret", "credential", "key")


@dataclass(frozen=True)
class ConnectionFields:
    """The fields of an Airflow connection that make a catalog."""

    conn_type: str
    host: str | None = None
    port: int | None = None
    schema: str | None = None
    login: str | None = None
    password: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


Resolver = Callable[[str], ConnectionFields]
_resolver: Resolver | None = None


def register_connection_resolver(resolver: Resolver | None) -> None:
    """Read connections with ``resolver`` (the Airflow adapter registers Airflow's lookup on
    import) where no resolver is installed in :mod:`airflow_trident.connections`; ``None``:
    only shipped catalogs resolve."""
    global _resolver
    _resolver = resolver


def resolve_connection(conn_id: str) -> tuple[str, dict[str, str]]:
    """The catalog name and properties of connection ``conn_id``: from the catalog the task
    shipped (a Spark executor, :func:`airflow_trident.connections.iceberg_catalog`), else
    read through Airflow (the resolver the Airflow adapter installs or registers).

    Raises
    ------
    MissingConnectionError
        If neither has it (no Airflow in this process and nothing shipped).
    ConfigurationError
        If the connection is malformed (the message names it).
    """
    resolver = _resolver

    def through_registered(conn_id: str) -> tuple[str, dict[str, str]]:
        assert resolver is not None
        return connection_properties(resolver(conn_id), conn_id)

    return connections.iceberg_catalog(conn_id, None if resolver is None else through_registered)


def connection_properties(fields: ConnectionFields, conn_id: str) -> tuple[str, dict[str, str]]:
    """The catalog name and pyiceberg properties a connection's fields give (see the table).

    Raises
    ------
    ConfigurationError
        If the extra is not a JSON object, holds an object or array as a value, or the fields
        do not make a catalog (the message names the connection).
    """
    where = f"iceberg catalog connection {conn_id!r}"
    if not isinstance(fields.extra, Mapping):
        msg = f"{where}: its extra must be a JSON object of catalog properties"
        raise ConfigurationError(msg)
    nested = sorted(str(k) for k, v in fields.extra.items() if isinstance(v, (dict, list)))
    if nested:
        msg = (
            f"{where}: extra {', '.join(nested)} must be a string, number or boolean (a "
            f"catalog property), not a JSON object or array"
        )
        raise ConfigurationError(msg)
    extra = {str(k): str(v) for k, v in fields.extra.items() if v is not None}
    name = extra.pop("catalog_name", DEFAULT_CATALOG_NAME)
    kind = fields.conn_type.lower()
    if kind == "trident_state":
        kind = {"postgres": "postgres", "postgresql": "postgres"}.get(
            extra.pop("dialect", "sqlite"), "sqlite"
        )
    if kind in ("postgres", "postgresql"):
        import sqlalchemy as sa

        url = sa.URL.create(
            "postgresql+psycopg",
            username=fields.login or None,
            password=fields.password or None,
            host=fields.host or None,
            port=fields.port or None,
            database=fields.schema or None,
        )
        return name, {"type": "sql", "uri": url.render_as_string(hide_password=False), **extra}
    if kind == "sqlite":
        path = fields.host or fields.schema
        if not path:
            msg = f"{where}: SQLite needs the file path in host"
            raise ConfigurationError(msg)
        return name, {"type": "sql", "uri": f"sqlite:///{path}", **extra}
    props = {"type": "rest", **extra}
    host = (fields.host or "").strip()
    if "://" in host:  # the Iceberg provider's shape: Host is the catalog's full URI
        _refuse_split_uri(fields, props, where)
        props.pop("scheme", None)
        props["uri"] = host.rstrip("/")
    elif "uri" not in props:
        if not host:
            msg = f"{where}: give host (the catalog's URI, e.g. https://catalog.example/ws)"
            raise ConfigurationError(msg)
        scheme = "http" if extra.get("scheme") == "http" else "https"
        props.pop("scheme", None)
        port = f":{fields.port}" if fields.port else ""
        path = f"/{fields.schema.strip('/')}" if fields.schema else ""
        props["uri"] = f"{scheme}://{host}{port}{path}"
    if fields.password and "token" not in props and "credential" not in props:
        key = "credential" if fields.login else "token"
        props[key] = f"{fields.login}:{fields.password}" if fields.login else fields.password
    return name, props


def _refuse_split_uri(fields: ConnectionFields, props: Mapping[str, str], where: str) -> None:
    """A Host that is a full URI leaves nothing for port, schema or a ``uri`` extra to add:
    refuse them rather than drop one of two answers."""
    also = [name for name in ("port", "schema") if getattr(fields, name)]
    if "uri" in props and props["uri"].rstrip("/") != (fields.host or "").strip().rstrip("/"):
        also.append("a different 'uri' extra")
    if also:
        msg = (
            f"{where}: host is the catalog's full URI, but the connection also sets "
            f"{', '.join(also)}; hint: put the whole URI in host (as the Iceberg provider's "
            f"connection does) and leave the others empty"
        )
        raise ConfigurationError(msg)


def redacted(props: Mapping[str, str]) -> dict[str, str]:
    """``props`` with secret-looking values (and passwords inside URIs) hidden, for messages."""
    shown: dict[str, str] = {}
    for key, value in props.items():
        if any(word in key.lower() for word in _SECRET_WORDS):
            shown[key] = "***"
        elif key == "uri" and "@" in value:
            head, _, tail = value.rpartition("@")
            scheme, _, user = head.partition("://")
            shown[key] = f"{scheme}://{user.split(':')[0]}:***@{tail}"
        else:
            shown[key] = value
    return shown


_catalogs: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
_lock = threading.Lock()


_CATALOG_TABLE_RACE_TRIES = 5


def load_catalog(name: str, props: Mapping[str, str]) -> Any:
    """The pyiceberg catalog ``name`` with ``props``, one per process and properties (a SQL
    catalog keeps its engine).

    A new SQL catalog's first users race to make its tables (the commit partitions of a Spark
    commit, each in its own Python worker): pyiceberg checks that ``iceberg_tables`` is absent,
    then creates it, and a process that loses the race fails with "table iceberg_tables already
    exists" (SQLite) or a duplicate ``pg_type`` key (PostgreSQL). Such a failure is asked again:
    the next check finds the tables the winner made."""
    key = (name, tuple(sorted(props.items())))
    with _lock:
        catalog = _catalogs.get(key)
        if catalog is None:
            from pyiceberg.catalog import load_catalog as pyiceberg_load_catalog
            from sqlalchemy.exc import DBAPIError

            for tries_left in range(_CATALOG_TABLE_RACE_TRIES - 1, -1, -1):
                try:
                    catalog = pyiceberg_load_catalog(name, **props)
                    break
                except DBAPIError as exc:
                    if tries_left == 0 or not _lost_the_table_race(exc):
                        raise
                    time.sleep(0.05)
            _catalogs[key] = catalog
        return catalog


def _lost_the_table_race(exc: Exception) -> bool:
    """Whether ``exc`` says another process made a catalog table first."""
    text = str(exc).lower()
    return "already exists" in text or ("duplicate key" in text and "pg_type" in text)
