"""Airflow hook for the Iceberg catalog of :func:`~airflow_trident.state.iceberg.iceberg_state`.

The state layer cannot import Airflow, so it reads a sink's ``catalog_conn_id`` through the
resolver this module registers on import (every Airflow process that runs Trident tasks imports
``airflow_trident.hooks``); elsewhere (a Spark executor committing the sink) it reads Airflow's
``AIRFLOW_CONN_<ID>`` variable itself. Which connection gives which catalog:
``airflow_trident/state/iceberg_catalog.py`` and ``docs/sinks/iceberg.md``.

Examples
--------
>>> import json, os
>>> os.environ["AIRFLOW_CONN_ICEBERG_HOOK_DOC"] = json.dumps({"conn_type": "postgres",
...     "host": "db", "port": 5432, "schema": "lake", "login": "etl", "password": "not-shown",
...     "extra": {"warehouse": "file:///data/warehouse"}})
>>> IcebergCatalogHook(catalog_conn_id="iceberg_hook_doc").shown_properties()
{'type': 'sql', 'uri': 'postgresql+psycopg://etl:***@db:5432/lake', 'warehouse': 'file:///data/warehouse'}
>>> del os.environ["AIRFLOW_CONN_ICEBERG_HOOK_DOC"]
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from airflow_trident.errors import MissingConnectionError
from airflow_trident.state.iceberg_catalog import (
    ConnectionFields,
    connection_properties,
    load_catalog,
    redacted,
    register_connection_resolver,
)

__all__ = ["IcebergCatalogHook"]


def airflow_connection(conn_id: str) -> ConnectionFields:
    """The fields of Airflow connection ``conn_id`` (any secrets backend Airflow reads)."""
    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:  # AirflowNotFoundException, and the Task SDK's own
        msg = (
            f"iceberg catalog connection {conn_id!r} was not found ({exc}); hint: add it "
            f"(Admin > Connections, or AIRFLOW_CONN_{conn_id.upper()})"
        )
        raise MissingConnectionError(msg) from exc
    return ConnectionFields(
        conn_type=conn.conn_type or "",
        host=conn.host,
        port=conn.port,
        schema=conn.schema,
        login=conn.login,
        password=conn.password,
        extra=conn.extra_dejson,
    )


register_connection_resolver(airflow_connection)


class IcebergCatalogHook(BaseHook):
    """The pyiceberg catalog an Airflow connection names.

    Parameters
    ----------
    catalog_conn_id:
        Airflow connection id (default ``iceberg_default``).
    """

    conn_name_attr = "catalog_conn_id"
    default_conn_name = "iceberg_default"
    conn_type = "iceberg"
    hook_name = "Iceberg Catalog (Trident)"

    def __init__(self, *, catalog_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.catalog_conn_id = catalog_conn_id

    def catalog_properties(self) -> tuple[str, dict[str, str]]:
        """The catalog's name and pyiceberg properties (they may hold a password)."""
        return connection_properties(airflow_connection(self.catalog_conn_id), self.catalog_conn_id)

    def shown_properties(self) -> dict[str, str]:
        """The catalog properties with secrets hidden, for logs and messages."""
        return redacted(self.catalog_properties()[1])

    def get_conn(self) -> Any:
        """The pyiceberg catalog (one per process and properties)."""
        return load_catalog(*self.catalog_properties())
