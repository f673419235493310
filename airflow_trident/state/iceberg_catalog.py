"""The Iceberg catalog of :func:`~airflow_trident.state.iceberg.iceberg_state`, from an Airflow
connection, without importing Airflow.

A sink finds its catalog, first match wins:

1. ``catalog={...}``: pyiceberg catalog properties, as given;
2. ``catalog_conn_id="..."``: an Airflow connection, read by the resolver the Airflow adapter
   registers in Airflow processes (:func:`register_connection_resolver`,
   ``airflow_trident.hooks.iceberg``), else from ``AIRFLOW_CONN_<ID>`` in the environment
   (Airflow's own connection variable: JSON or URI), which is how a Spark executor that
   commits the sink sees it;
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
anything else (``iceberg``)   REST catalog at ``uri`` (extra) or ``http(s)://host:port/schema``;
                              the password is its ``token``
============================  ==========================================================

Every extra except ``catalog_name`` is passed on as a catalog property (``warehouse``,
``s3.endpoint``, ``type`` to pick another pyiceberg catalog). Properties may hold a password:
they are never logged or shown (:func:`redacted`).

Examples
--------
>>> import json, os
>>> os.environ["AIRFLOW_CONN_ICEBERG_DOC"] = json.dumps({"conn_type": "sqlite",
...     "host": "/data/catalog.db", "extra": {"warehouse": "file:///data/warehouse"}})
>>> name, props = resolve_connection("iceberg_doc")
>>> name, props["type"], props["uri"], props["warehouse"]
('trident', 'sql', 'sqlite:////data/catalog.db', 'file:///data/warehouse')
>>> os.environ["AIRFLOW_CONN_REST_DOC"] = "iceberg://cat.example:8181/api?warehouse=w1"
>>> resolve_connection("rest_doc")[1]
{'type': 'rest', 'warehouse': 'w1', 'uri': 'https://cat.example:8181/api'}
>>> del os.environ["AIRFLOW_CONN_ICEBERG_DOC"], os.environ["AIRFLOW_CONN_REST_DOC"]
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from airflow_trident.errors import ConfigurationError, MissingConnectionError

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
    """Read connections with ``resolver`` (the Airflow adapter registers Airflow's lookup);
    ``None`` goes back to the environment's ``AIRFLOW_CONN_<ID>``."""
    global _resolver
    _resolver = resolver


def resolve_connection(conn_id: str) -> tuple[str, dict[str, str]]:
    """The catalog name and properties of connection ``conn_id``.

    Raises
    ------
    MissingConnectionError
        If no resolver is registered and ``AIRFLOW_CONN_<ID>`` is not set.
    """
    if _resolver is not None:
        fields = _resolver(conn_id)
    else:
        value = os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}")
        if value is None:
            msg = (
                f"iceberg catalog connection {conn_id!r} is not defined in this process (no "
                f"Airflow here, and AIRFLOW_CONN_{conn_id.upper()} is not set); hint: define it "
                f"in the environment of the processes that commit (Spark executors too), or "
                f"give the sink catalog={{...}} properties"
            )
            raise MissingConnectionError(msg)
        fields = _parse_env_connection(value, conn_id)
    return connection_properties(fields, conn_id)


def connection_properties(fields: ConnectionFields, conn_id: str) -> tuple[str, dict[str, str]]:
    """The catalog name and pyiceberg properties a connection's fields give (see the table)."""
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
            msg = f"iceberg catalog connection {conn_id!r}: SQLite needs the file path in host"
            raise ConfigurationError(msg)
        return name, {"type": "sql", "uri": f"sqlite:///{path}", **extra}
    props = {"type": "rest", **extra}
    if "uri" not in props:
        if not fields.host:
            msg = f"iceberg catalog connection {conn_id!r}: give host, or the uri in extra"
            raise ConfigurationError(msg)
        scheme = "http" if extra.get("scheme") == "http" else "https"
        props.pop("scheme", None)
        port = f":{fields.port}" if fields.port else ""
        path = f"/{fields.schema.strip('/')}" if fields.schema else ""
        props["uri"] = f"{scheme}://{fields.host}{port}{path}"
    if fields.password and "token" not in props and "credential" not in props:
        key = "credential" if fields.login else "token"
        props[key] = f"{fields.login}:{fields.password}" if fields.login else fields.password
    return name, props


def _parse_env_connection(value: str, conn_id: str) -> ConnectionFields:
    """An ``AIRFLOW_CONN_*`` value, JSON or URI, as Airflow reads it."""
    if value.lstrip().startswith("{"):
        data = json.loads(value)
        given = data.get("extra") or {}
        if isinstance(given, str):
            given = json.loads(given)
        return ConnectionFields(
            conn_type=str(data.get("conn_type", "")),
            host=data.get("host"),
            port=int(data["port"]) if data.get("port") else None,
            schema=data.get("schema"),
            login=data.get("login"),
            password=data.get("password"),
            extra=given,
        )
    parts = urlsplit(value)
    if not parts.scheme:
        msg = f"AIRFLOW_CONN_{conn_id.upper()} is neither JSON nor a URI"
        raise ConfigurationError(msg)
    query = dict(parse_qsl(parts.query))
    extra_json = query.pop("__extra__", None)
    extra: dict[str, Any] = json.loads(extra_json) if extra_json else query
    conn_type = parts.scheme.replace("-", "_")
    path = unquote(parts.path[1:]) if parts.path else None
    host = unquote(parts.hostname) if parts.hostname else None
    if conn_type == "sqlite" and not host:  # sqlite:////abs/path.db
        host, path = unquote(parts.path), None
    return ConnectionFields(
        conn_type=conn_type,
        host=host,
        port=parts.port,
        schema=path or None,
        login=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        extra=extra,
    )


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
