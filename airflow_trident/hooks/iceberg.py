"""Airflow hook for the Iceberg catalog of :func:`~airflow_trident.state.iceberg.iceberg_state`.

It reads the connection in the Iceberg provider's shape
(``apache-airflow-providers-apache-iceberg``: conn type ``iceberg``, Host the catalog's full
URI, Login/Password the OAuth2 client id and secret, extras as catalog properties) and takes
the provider's parameter name, ``iceberg_conn_id``. It registers no connection type of its
own: ``iceberg`` is the Iceberg provider's (its form and its **Test** button); ``postgres``,
``sqlite`` and ``trident_state`` connections give SQL catalogs.

The state layer cannot import Airflow: a sink's ``iceberg_conn_id`` is read through
:class:`~airflow_trident.hooks.connections.AirflowConnections` (installed by every Trident
task) or the resolver this module registers on import, always through Airflow's own API
(:mod:`airflow_trident.hooks.connection_reader`). A Spark executor committing the sink gets the
catalog the task resolved in its task closure. Which connection gives which catalog:
``airflow_trident/state/iceberg_catalog.py`` and ``docs/sinks/iceberg.md``.

Examples
--------
>>> import json, os
>>> os.environ["AIRFLOW_CONN_ICEBERG_HOOK_DOC"] = json.dumps({"conn_type": "iceberg",
...     "host": "https://catalog.example.com/ws", "login": "client-id",
...     "password": "not-shown", "extra": {"warehouse": "lake"}})
>>> IcebergCatalogHook(iceberg_conn_id="iceberg_hook_doc").shown_properties()
{'type': 'rest', 'warehouse': 'lake', 'uri': 'https://catalog.example.com/ws', 'credential': '***'}
>>> os.environ["AIRFLOW_CONN_ICEBERG_HOOK_DOC"] = json.dumps({"conn_type": "postgres",
...     "host": "db", "port": 5432, "schema": "lake", "login": "etl", "password": "not-shown",
...     "extra": {"warehouse": "file:///data/warehouse"}})
>>> IcebergCatalogHook(iceberg_conn_id="iceberg_hook_doc").shown_properties()
{'type': 'sql', 'uri': 'postgresql+psycopg://etl:***@db:5432/lake', 'warehouse': 'file:///data/warehouse'}
>>> del os.environ["AIRFLOW_CONN_ICEBERG_HOOK_DOC"]
"""

from __future__ import annotations

import warnings
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_trident.errors import MissingConnectionError
from airflow_trident.hooks.connection_reader import extra_of, get_connection
from airflow_trident.state.iceberg_catalog import (
    ConnectionFields,
    connection_properties,
    load_catalog,
    redacted,
    register_connection_resolver,
)

__all__ = ["IcebergCatalogHook", "airflow_connection", "catalog_of"]


def airflow_connection(conn_id: str) -> ConnectionFields:
    """The fields of Airflow connection ``conn_id`` (any secrets backend Airflow reads).

    Raises
    ------
    MissingConnectionError
        If Airflow does not have it.
    ConfigurationError
        If its ``AIRFLOW_CONN_*`` variable or its extra is malformed (naming ``conn_id``).
    """
    try:
        conn = get_connection(conn_id)
    except AirflowNotFoundException as exc:
        msg = (
            f"iceberg catalog connection {conn_id!r} was not found ({exc}); hint: add it "
            f"(Admin > Connections, or AIRFLOW_CONN_{conn_id.upper()})"
        )
        raise MissingConnectionError(msg) from None
    return ConnectionFields(
        conn_type=conn.conn_type or "",
        host=conn.host,
        port=conn.port,
        schema=conn.schema,
        login=conn.login,
        password=conn.password,
        extra=extra_of(conn, f"iceberg catalog connection {conn_id!r}"),
    )


def catalog_of(conn_id: str) -> tuple[str, dict[str, str]]:
    """The catalog name and pyiceberg properties of Airflow connection ``conn_id``."""
    return connection_properties(airflow_connection(conn_id), conn_id)


register_connection_resolver(airflow_connection)


class IcebergCatalogHook(BaseHook):
    """The pyiceberg catalog an Airflow connection names.

    Parameters
    ----------
    iceberg_conn_id:
        Airflow connection id (default ``iceberg_default``, as the Iceberg provider's).
    catalog_conn_id:
        Deprecated name of ``iceberg_conn_id`` (a ``DeprecationWarning``).
    """

    conn_name_attr = "iceberg_conn_id"
    default_conn_name = "iceberg_default"

    def __init__(
        self,
        *,
        iceberg_conn_id: str | None = None,
        catalog_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if catalog_conn_id is not None:
            if iceberg_conn_id is not None:
                msg = "IcebergCatalogHook: give iceberg_conn_id, not also catalog_conn_id"
                raise TypeError(msg)
            warnings.warn(
                "IcebergCatalogHook(catalog_conn_id=...) is deprecated; use "
                "iceberg_conn_id=..., the Iceberg provider's name for it",
                DeprecationWarning,
                stacklevel=2,
            )
            iceberg_conn_id = catalog_conn_id
        self.iceberg_conn_id = iceberg_conn_id or self.default_conn_name

    @property
    def catalog_conn_id(self) -> str:
        """Deprecated name of :attr:`iceberg_conn_id`."""
        return self.iceberg_conn_id

    def catalog_properties(self) -> tuple[str, dict[str, str]]:
        """The catalog's name and pyiceberg properties (they may hold a password)."""
        return catalog_of(self.iceberg_conn_id)

    def shown_properties(self) -> dict[str, str]:
        """The catalog properties with secrets hidden, for logs and messages."""
        return redacted(self.catalog_properties()[1])

    def get_conn(self) -> Any:
        """The pyiceberg catalog (one per process and properties)."""
        return load_catalog(*self.catalog_properties())
