"""Validation of names that become znode path segments and SQL identifiers, and the OpenLineage
names of the datasets that sources and sinks read and write.

Topology, spout and state names are stable ids: they name znodes in ZooKeeper and tables in the
state database, so they are checked once, when given, with one rule that is safe for both.

A source or sink says which datasets it reads or writes by :class:`LineageDatasets`: its
``openlineage_datasets`` gives ``(namespace, name)`` pairs per the OpenLineage naming spec
(https://openlineage.io/docs/spec/naming), built with :func:`table_dataset`,
:func:`location_dataset`, :func:`kafka_dataset` and :func:`iceberg_dataset`, so they join other
producers' datasets of the same table, topic or files. Names never hold credentials.

Examples
--------
>>> from airflow_trident.names import validate_name
>>> validate_name("word_counts", kind="state")
'word_counts'
>>> validate_name("bad name", kind="state")
Traceback (most recent call last):
...
airflow_trident.errors.InvalidNameError: state name 'bad name' is invalid: ...
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Protocol, runtime_checkable
from urllib.parse import quote, unquote, urlsplit

from airflow_trident.errors import InvalidNameError

__all__ = [
    "Dataset",
    "LineageDatasets",
    "decode_segment",
    "encode_segment",
    "iceberg_dataset",
    "kafka_dataset",
    "location_dataset",
    "table_dataset",
    "validate_name",
]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def validate_name(name: object, *, kind: str) -> str:
    """Return ``name`` if it is a valid id, else raise :class:`InvalidNameError`.

    A valid id starts with a letter or ``_``, then letters, digits or ``_``, 63 characters at most
    (PostgreSQL's identifier limit). Such a name is also a valid znode path segment.

    Parameters
    ----------
    name:
        The candidate name.
    kind:
        What the name names (``"topology"``, ``"state"``, ...), used in the message.

    Raises
    ------
    InvalidNameError
        If ``name`` is not a string matching the rule above.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        msg = (
            f"{kind} name {name!r} is invalid: use 1-63 letters, digits or '_', starting with a "
            f"letter or '_' (it becomes a ZooKeeper path segment and a SQL identifier)"
        )
        raise InvalidNameError(msg)
    return name


def encode_segment(value: str) -> str:
    """Encode any string (an Airflow run id, say) as one safe znode path segment.

    >>> encode_segment("scheduled__2026-01-01T00:00:00+00:00")
    'scheduled__2026-01-01T00%3A00%3A00%2B00%3A00'
    >>> decode_segment(encode_segment("a/b"))
    'a/b'
    """
    if not value:
        msg = "an empty string cannot be a znode path segment"
        raise InvalidNameError(msg)
    return quote(value, safe="-_.~").replace(".", "%2E")


def decode_segment(segment: str) -> str:
    """Invert :func:`encode_segment`."""
    return unquote(segment)


# -- OpenLineage dataset names -------------------------------------------------------------------

Dataset = tuple[str, str]
"""An OpenLineage dataset's ``(namespace, name)``."""


@runtime_checkable
class LineageDatasets(Protocol):
    """A source or sink that names the datasets it reads or writes (for OpenLineage).

    ``openlineage_datasets`` is called when a task reports its lineage, at run time: it may
    resolve a connection id then (never when a DAG file is parsed), and may raise; the caller
    logs the error and names the source or sink by its topology instead. ``state_url`` is the
    run's state database (where a state made without a database of its own lives).
    """

    def openlineage_datasets(self, state_url: str | None = None) -> list[Dataset]:
        """The ``(namespace, name)`` of each dataset read or written."""
        ...


_DEFAULT_PORTS = {"postgres": 5432, "mysql": 3306, "kafka": 9092, "hive": 9083}
_SCHEMES = {"postgresql": "postgres", "s3a": "s3", "s3n": "s3", "gcs": "gs"}


def table_dataset(url: str | None, table: str, schema: str | None = None) -> Dataset:
    """``(namespace, name)`` of ``table`` (in ``schema``) in the database of SQLAlchemy URL
    ``url``: PostgreSQL ``postgres://host:port`` + ``database.schema.table`` (schema
    ``public`` by default), MySQL ``mysql://host:port`` + ``database.table``, SQLite
    ``sqlite://<file>`` + ``table``. The password is never part of it.

    >>> table_dataset("postgresql+psycopg://u:pw@db/trident", "word_counts")
    ('postgres://db:5432', 'trident.public.word_counts')
    >>> table_dataset("mysql+pymysql://u:pw@my:3307/shop", "orders")
    ('mysql://my:3307', 'shop.orders')
    >>> table_dataset("sqlite:////var/lib/trident/state.db", "counts")
    ('sqlite:///var/lib/trident/state.db', 'counts')
    """
    if not url:
        return ("trident://state", table)
    import sqlalchemy as sa

    parsed = sa.make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return (f"sqlite://{parsed.database or ':memory:'}", table)
    scheme = _SCHEMES.get(backend, backend)
    port = parsed.port or _DEFAULT_PORTS.get(scheme)
    authority = f"{parsed.host or 'localhost'}{f':{port}' if port else ''}"
    database = parsed.database or ""
    if scheme == "postgres":
        return (f"postgres://{authority}", f"{database}.{schema or 'public'}.{table}")
    parts = [p for p in (database, schema, table) if p]
    return (f"{scheme}://{authority}", ".".join(parts))


def _location(location: str) -> tuple[str, str, str]:
    """``(scheme, authority, path)`` of a location; a local path is ``("file", "", abspath)``."""
    parts = urlsplit(location)
    if parts.scheme in ("", "file") or len(parts.scheme) == 1:  # a path (or a drive letter)
        path = parts.path if parts.scheme == "file" else location
        return ("file", parts.netloc if parts.scheme == "file" else "",
                os.path.abspath(path).rstrip("/") or "/")  # fmt: skip
    _, _, authority = parts.netloc.rpartition("@")  # never user info
    return (_SCHEMES.get(parts.scheme, parts.scheme), authority, parts.path)


def location_dataset(location: str) -> Dataset:
    """``(namespace, name)`` of files at ``location`` as Airflow's own providers name them: a
    local path or ``file:`` URL is namespace ``file`` (``file://host`` for a remote host) and
    its absolute path; an object store ``s3://bucket`` (``s3a``/``s3n`` too), ``gs://bucket``,
    ``abfss://container@account...`` and the key (no leading ``/``); HDFS
    ``hdfs://namenode:port`` and the absolute path.

    >>> location_dataset("s3a://lake/events/2026/"), location_dataset("/data/log/")
    (('s3://lake', 'events/2026'), ('file', '/data/log'))
    >>> location_dataset("file:///data/log"), location_dataset("hdfs://nn:8020/data/x")
    (('file', '/data/log'), ('hdfs://nn:8020', '/data/x'))
    """
    scheme, authority, path = _location(location)
    if scheme == "file":
        return ("file" if not authority else f"file://{authority}", path)
    name = (path.rstrip("/") or "/") if scheme == "hdfs" else path.strip("/")
    return (f"{scheme}://{authority}", name or "/")


def kafka_dataset(bootstrap_servers: str, topic: str) -> Dataset:
    """``(namespace, name)`` of a Kafka topic: ``kafka://host:port`` of the first bootstrap
    server (a listener prefix such as ``SASL_SSL://`` dropped, port 9092 by default) and the
    topic.

    >>> kafka_dataset("SASL_SSL://b1.example:9093,b2.example:9093", "events")
    ('kafka://b1.example:9093', 'events')
    >>> kafka_dataset("broker", "events")
    ('kafka://broker:9092', 'events')
    """
    first = bootstrap_servers.split(",")[0].strip()
    first = first.rpartition("://")[2].rpartition("@")[2].rstrip("/")
    if not first:
        msg = f"no bootstrap server in {bootstrap_servers!r} to name topic {topic!r} by"
        raise InvalidNameError(msg)
    host, colon, port = first.rpartition(":")
    if not colon or not port.isdigit() or (host.count(":") and not host.endswith("]")):
        first = f"{first}:{_DEFAULT_PORTS['kafka']}"
    return (f"kafka://{first}", topic)


def iceberg_dataset(catalog_name: str, properties: Mapping[str, str], table: str) -> Dataset:
    """``(namespace, name)`` of Iceberg table ``table`` (``namespace.table``) in the catalog of
    pyiceberg ``properties``. The name is the table's catalog identifier; the namespace names
    the catalog:

    * a Hive metastore: ``hive://host:port`` (as the spec names Hive tables);
    * a REST catalog: its URI (no credentials, no query), with the warehouse appended as a path
      segment when the warehouse is a name rather than a location (one server, many catalogs);
    * any other catalog (SQL, Glue, ...) with a warehouse location: that location
      (``s3://bucket/path``, ``file:///abs/path``, ``hdfs://nn:8020/path``);
    * otherwise ``iceberg://<catalog name>``.

    >>> iceberg_dataset("c", {"type": "rest", "uri": "https://u:t@cat.example:8181/api/"},
    ...                 "db.events")
    ('https://cat.example:8181/api', 'db.events')
    >>> iceberg_dataset("c", {"uri": "https://polaris:8181/api/catalog", "warehouse": "prod"},
    ...                 "db.events")
    ('https://polaris:8181/api/catalog/prod', 'db.events')
    >>> iceberg_dataset("c", {"type": "sql", "uri": "postgresql://u:pw@db/cat",
    ...                       "warehouse": "s3a://lake/wh/"}, "db.events")
    ('s3://lake/wh', 'db.events')
    >>> iceberg_dataset("c", {"type": "hive", "uri": "thrift://hms:9083"}, "db.events")
    ('hive://hms:9083', 'db.events')
    """
    uri = str(properties.get("uri") or "")
    kind = str(properties.get("type") or "").lower()
    parts = urlsplit(uri)
    warehouse = str(properties.get("warehouse") or "")
    is_location = "://" in warehouse or warehouse.startswith("/")
    if kind == "hive" or parts.scheme == "thrift":
        port = parts.port or _DEFAULT_PORTS["hive"]
        return (f"hive://{parts.hostname}:{port}", table)
    if kind == "rest" or (not kind and parts.scheme in ("http", "https")):
        _, _, authority = parts.netloc.rpartition("@")
        namespace = f"{parts.scheme}://{authority}{parts.path}".rstrip("/")
        if warehouse and not is_location:
            namespace = f"{namespace}/{warehouse.strip('/')}"
        return (namespace, table)
    if is_location:
        scheme, authority, path = _location(warehouse)
        return (f"{scheme}://{authority}{path.rstrip('/')}", table)
    return (f"iceberg://{catalog_name}", table)
