"""Connection ids of sources and sinks, resolved when they are used, never when a DAG file is
parsed: ``DatabaseTableSpout(conn_id="analytics_pg", ...)``, ``delta_state(..., conn_id=...)``.

This module knows no Airflow: the Airflow adapters install a resolver
(:func:`install_resolver`; ``airflow_trident.hooks.connections`` reads the Airflow connection
as ``PostgresHook`` does). A source or sink only calls :func:`declare` when it is made (no I/O)
and :func:`database_url` / :func:`storage_options` when it reads or writes. A ``spark-submit``
job gets the connections its task resolved as one secret in its environment
(:data:`CONNECTIONS_ENV`, JSON, never on its command line), which :func:`resolved` reads.
Spark tasks whose executors do not inherit that environment (a cluster, a Spark Connect
server) get the same JSON inside their task closure (:func:`shipment`, :func:`receive`: the
state binding carries it, as it carries the state database URL).

Examples
--------
>>> class Fixed:
...     def database_url(self, conn_id): return f"sqlite:///{conn_id}.db"
...     def storage_options(self, conn_id): return {}
>>> install_resolver(Fixed())
>>> _ = declare("analytics")
>>> database_url("analytics")
'sqlite:///analytics.db'
>>> sorted(resolved(["analytics"]))
['analytics']
>>> install_resolver(None)
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from airflow_trident.errors import ConfigurationError, MissingConnectionError

__all__ = [
    "CONNECTIONS_ENV",
    "ConnectionResolver",
    "database_url",
    "declare",
    "declare_iceberg",
    "declare_kafka",
    "declared",
    "iceberg_catalog",
    "install_resolver",
    "kafka_client_settings",
    "kafka_config",
    "receive",
    "resolved",
    "shipment",
    "storage_options",
]

CONNECTIONS_ENV = "TRIDENT_CONNECTIONS"
"""JSON ``{conn_id: {"url": ..., "storage_options": {...}}}`` a Spark job inherits (a Kafka
connection: ``{"kafka_config": {...}}``; an Iceberg catalog's: ``{"iceberg_catalog": {"name":
..., "properties": {...}}}``)."""


class ConnectionResolver(Protocol):
    """Reads a connection id (the Airflow adapters' resolver reads Airflow connections)."""

    def database_url(self, conn_id: str) -> str:
        """The SQLAlchemy URL (with its password) of a database connection."""
        ...

    def storage_options(self, conn_id: str) -> dict[str, str]:
        """Object-store options (delta-rs ``storage_options``) of a connection."""
        ...


_LOCK = threading.Lock()
_RESOLVER: ConnectionResolver | None = None
_DECLARED: set[str] = set()
_RECEIVED: dict[str, Any] = {}


def install_resolver(resolver: ConnectionResolver | None) -> None:
    """Make ``resolver`` this process's (``None``: none; only shipped connections resolve)."""
    global _RESOLVER
    with _LOCK:
        _RESOLVER = resolver


def declare(conn_id: str) -> str:
    """Record that a source or sink of this process uses ``conn_id`` (no I/O); ``conn_id``."""
    if not isinstance(conn_id, str) or not conn_id:
        msg = f"conn_id must be a non-empty Airflow connection id, got {conn_id!r}"
        raise ConfigurationError(msg)
    with _LOCK:
        _DECLARED.add(conn_id)
    return conn_id


def declared() -> set[str]:
    """The connection ids declared in this process so far."""
    with _LOCK:
        return set(_DECLARED)


def _shipped() -> dict[str, Any]:
    with _LOCK:
        found: dict[str, Any] = dict(_RECEIVED)
    text = os.environ.get(CONNECTIONS_ENV)
    if text:
        found.update(json.loads(text))
    return found


def shipment() -> str | None:
    """The connections this process's sources and sinks declared, resolved, as the JSON a Spark
    task closure carries to executors (:func:`receive`); ``None`` when none were declared.
    It holds credentials: never log it. A connection that does not resolve here is left out
    (where it is used, its own error says why)."""
    found: dict[str, dict[str, Any]] = {}
    for conn_id in sorted(declared()):
        try:
            found.update(resolved([conn_id]))
        except ConfigurationError:
            continue
    return json.dumps(found) if found else None


def receive(text: str | None) -> None:
    """Make the connections of a :func:`shipment` resolvable in this process (an executor)."""
    if text:
        shipped = json.loads(text)
        with _LOCK:
            _RECEIVED.update(shipped)


def _lookup(conn_id: str, kind: str) -> Any:
    shipped = _shipped().get(conn_id)
    if shipped is not None and kind in shipped:
        return shipped[kind]
    resolver = _RESOLVER
    if resolver is None:
        msg = (
            f"connection {conn_id!r} cannot be resolved in this process: no Airflow here and "
            f"the task did not ship it ({CONNECTIONS_ENV}); hint: run the topology from an "
            f"Airflow task or the airflow-trident CLI, or pass a URL instead of conn_id"
        )
        raise ConfigurationError(msg)
    if kind == "url":
        return resolver.database_url(conn_id)
    return resolver.storage_options(conn_id)


def database_url(conn_id: str) -> str:
    """The SQLAlchemy URL of database connection ``conn_id`` (it holds the password: never
    log it).

    Raises
    ------
    ConfigurationError
        If no resolver is installed and the task did not ship the connection.
    """
    url: str = _lookup(conn_id, "url")
    return url


def storage_options(conn_id: str) -> dict[str, str]:
    """The object-store options of connection ``conn_id`` (credentials: never log them)."""
    return dict(_lookup(conn_id, "storage_options"))


_KAFKA: set[str] = set()


def declare_kafka(conn_id: str) -> str:
    """:func:`declare` for a Kafka connection (an Airflow ``kafka`` connection: librdkafka
    settings in its extra), which :func:`resolved` ships as its settings."""
    declare(conn_id)
    with _LOCK:
        _KAFKA.add(conn_id)
    return conn_id


def kafka_config(conn_id: str) -> dict[str, Any]:
    """The librdkafka settings of Kafka connection ``conn_id`` (SASL/SSL secrets: never log
    them), from the task's shipment or the resolver's ``kafka_config``; callbacks (the Kafka
    provider's allow-listed ones) as callables.

    Raises
    ------
    ConfigurationError
        If neither has it, or the shipment could not carry one of its callbacks.
    """
    shipped = _shipped().get(conn_id)
    if shipped is not None and "kafka_config" in shipped:
        return _received_kafka(conn_id, shipped)
    resolve = getattr(_RESOLVER, "kafka_config", None)
    if not callable(resolve):
        msg = (
            f"Kafka connection {conn_id!r} cannot be resolved in this process: the task did "
            f"not ship it ({CONNECTIONS_ENV}) and the installed resolver reads no Kafka "
            f"connections; hint: run the topology from an Airflow task or the airflow-trident "
            f"CLI, or give the spout config= instead of kafka_config_id"
        )
        raise ConfigurationError(msg)
    return {str(k): v if callable(v) else str(v) for k, v in resolve(conn_id).items()}


def _shipped_kafka(config: Mapping[str, Any]) -> dict[str, Any]:
    """A Kafka connection's entry of a shipment: its settings (TLS files as their PEM
    contents, ``ssl.ca.pem``...: a Spark executor on another machine has no copy), its
    callbacks by import path
    (a module-level function: the allow-list that resolved it was checked where it was read)
    and the keys of callbacks no path names (e.g. a token provider's ``functools.partial``)."""
    settings = {k: v for k, v in config.items() if not callable(v)}
    for name in ("ca", "certificate", "key"):  # the files' contents: no copy where it goes
        location = settings.get(f"ssl.{name}.location")
        if location and location != "probe" and f"ssl.{name}.pem" not in settings:
            try:
                with open(str(location), encoding="utf-8") as pem:
                    settings[f"ssl.{name}.pem"] = pem.read()
            except OSError:
                continue  # left as a path: the client where it goes says what is missing
            del settings[f"ssl.{name}.location"]
    paths, unshippable = {}, []
    for key, value in config.items():
        if not callable(value):
            continue
        module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", "")
        if module and name and "<" not in name and "." not in name:
            paths[key] = f"{module}.{name}"
        else:
            unshippable.append(key)
    entry: dict[str, Any] = {"kafka_config": settings}
    if paths:
        entry["kafka_callbacks"] = paths
    if unshippable:
        entry["kafka_unshippable"] = sorted(unshippable)
    return entry


def _received_kafka(conn_id: str, shipped: Mapping[str, Any]) -> dict[str, Any]:
    import importlib

    config: dict[str, Any] = dict(shipped["kafka_config"])
    lost = shipped.get("kafka_unshippable") or []
    if lost:
        msg = (
            f"Kafka connection {conn_id!r}: callbacks {lost} that the Kafka provider made "
            f"(a token provider such as Amazon MSK IAM's) cannot travel to this process (a "
            f"spark-submit job's driver); hint: use process_mode='connect' (the task is the "
            f"driver), or name a module-level function of yours in [apache_kafka] "
            f"callback_allowlist and the extra"
        )
        raise ConfigurationError(msg)
    for key, path in (shipped.get("kafka_callbacks") or {}).items():
        module, _, name = str(path).rpartition(".")
        config[key] = getattr(importlib.import_module(module), name)
    return config


QUICK_RECONNECT_MS = 10
"""``reconnect.backoff.ms`` of our short-lived librdkafka clients unless the user's settings
name one: librdkafka (2.x) drops its bootstrap connection once it learns the brokers and waits
about half of that backoff (100 ms by default) before it connects to the one it learned, so a
client made for a few requests pays ~50 ms before its first answer; with 10 ms, ~10 ms
(docs/sources/kafka.md, "Client settings")."""


def kafka_client_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a short-lived librdkafka client of ours: the user's ``config`` with
    ``reconnect.backoff.ms`` at :data:`QUICK_RECONNECT_MS` unless they set it (or set a
    ``reconnect.backoff.max.ms`` below it).

    >>> kafka_client_settings({"bootstrap.servers": "b:9092"})["reconnect.backoff.ms"]
    10
    >>> kafka_client_settings({"reconnect.backoff.ms": "250"})["reconnect.backoff.ms"]
    '250'
    >>> "reconnect.backoff.ms" in kafka_client_settings({"reconnect.backoff.max.ms": "5"})
    False
    """
    out = {str(k): v for k, v in config.items()}
    ceiling = out.get("reconnect.backoff.max.ms")
    if ceiling is None or int(ceiling) >= QUICK_RECONNECT_MS:
        out.setdefault("reconnect.backoff.ms", QUICK_RECONNECT_MS)
    return out


_ICEBERG: set[str] = set()


def declare_iceberg(conn_id: str) -> str:
    """:func:`declare` for an Iceberg catalog connection, which :func:`resolved` ships as the
    catalog's name and pyiceberg properties (:func:`iceberg_catalog`)."""
    declare(conn_id)
    with _LOCK:
        _ICEBERG.add(conn_id)
    return conn_id


IcebergCatalog = tuple[str, dict[str, str]]
"""A pyiceberg catalog's name and properties."""


def iceberg_catalog(
    conn_id: str, fallback: Callable[[str], IcebergCatalog] | None = None
) -> IcebergCatalog:
    """The name and pyiceberg properties of Iceberg catalog connection ``conn_id`` (they may
    hold a secret: never log them): from the task's shipment (a Spark executor), else the
    installed resolver's ``iceberg_catalog``, else ``fallback``.

    Raises
    ------
    MissingConnectionError
        If none of them has it.
    """
    shipped = _shipped().get(conn_id)
    if shipped is not None and "iceberg_catalog" in shipped:
        catalog = shipped["iceberg_catalog"]
        return str(catalog["name"]), {str(k): str(v) for k, v in catalog["properties"].items()}
    resolve = getattr(_RESOLVER, "iceberg_catalog", None)
    if callable(resolve):
        name, props = resolve(conn_id)
        return str(name), dict(props)
    if fallback is not None:
        return fallback(conn_id)
    msg = (
        f"iceberg catalog connection {conn_id!r} cannot be resolved in this process: no "
        f"Airflow here and the task did not ship it ({CONNECTIONS_ENV}); hint: run the "
        f"topology from an Airflow task or the airflow-trident CLI (a Spark task gets the "
        f"catalog in its closure), or give the sink catalog={{...}} properties"
    )
    raise MissingConnectionError(msg)


def resolved(conn_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Each connection resolved as what a Spark job needs (its URL, or its storage options
    when it has no database URL; a Kafka connection's settings; an Iceberg catalog), for
    :data:`CONNECTIONS_ENV`."""
    out: dict[str, dict[str, Any]] = {}
    for conn_id in sorted(set(conn_ids)):
        entry: dict[str, Any] = {}
        with _LOCK:
            is_kafka, is_iceberg = conn_id in _KAFKA, conn_id in _ICEBERG
        if is_kafka:
            out[conn_id] = _shipped_kafka(kafka_config(conn_id))
            continue
        if is_iceberg:
            name, props = iceberg_catalog(conn_id)
            out[conn_id] = {"iceberg_catalog": {"name": name, "properties": props}}
            continue
        try:
            entry["url"] = database_url(conn_id)
        except ConfigurationError:
            entry["storage_options"] = storage_options(conn_id)
        out[conn_id] = entry
    return out
