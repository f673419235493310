"""The Airflow side of :mod:`airflow_trident.connections`: connection ids of sources and sinks
read as Airflow connections, when a task (or the CLI, or the API server) uses them.

A database connection (``postgres``, ``sqlite`` or ``trident_state``) becomes a SQLAlchemy URL
the way :class:`~airflow_trident.hooks.state_store.StateStoreHook` reads the state database:
PostgreSQL's host, port, login, password, ``schema`` as the database and the libpq extras
(``sslmode``, ``sslrootcert``, ..., ``options``), with the ``psycopg`` driver. Where
``apache-airflow-providers-postgres`` is installed a ``postgres`` connection is read by its
``PostgresHook.sqlalchemy_url`` instead (its extras, ``sqlalchemy_query`` and IAM tokens).
A ``kafka`` connection (the Kafka provider's) gives its extra's librdkafka settings.
Any other connection gives object-store options (delta-rs ``storage_options``): an ``aws``
connection's credentials, region and endpoint (:mod:`airflow_trident.hooks.aws`: through the
Amazon provider's ``AwsBaseHook`` when it is installed: session tokens, roles, profiles), then
the connection's extra ``storage_options`` (a JSON object). An Iceberg catalog connection gives
the catalog's pyiceberg properties (:mod:`airflow_trident.hooks.iceberg`). Connections are read
through Airflow's API and a malformed one is refused naming it
(:mod:`airflow_trident.hooks.connection_reader`).
"""

from __future__ import annotations

import importlib.util
from typing import Any

from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_trident import connections
from airflow_trident.errors import ConfigurationError, MissingConnectionError
from airflow_trident.hooks.aws import aws_storage_options
from airflow_trident.hooks.connection_reader import extra_of, get_connection
from airflow_trident.hooks.state_store import POSTGRES_DRIVER, StateStoreHook

__all__ = ["AirflowConnections", "install"]


class AirflowConnections:
    """A :class:`~airflow_trident.connections.ConnectionResolver` over Airflow connections."""

    def database_url(self, conn_id: str) -> str:
        """The SQLAlchemy URL of database connection ``conn_id``."""
        conn = _connection(conn_id)
        if conn.conn_type == "postgres" and importlib.util.find_spec("airflow.providers.postgres"):
            from airflow.providers.postgres.hooks.postgres import (  # type: ignore[import-not-found,unused-ignore]
                PostgresHook,
            )

            url = PostgresHook(postgres_conn_id=conn_id).sqlalchemy_url.set(
                drivername=POSTGRES_DRIVER
            )
        else:
            url = StateStoreHook(state_conn_id=conn_id).get_url()
        rendered: str = url.render_as_string(hide_password=False)
        return rendered

    def storage_options(self, conn_id: str) -> dict[str, str]:
        """delta-rs ``storage_options`` of connection ``conn_id``: an ``aws`` connection's
        credentials (:mod:`airflow_trident.hooks.aws`: through the Amazon provider's hook when
        it is installed), then the extra ``storage_options``.

        Raises
        ------
        ConfigurationError
            If the extra is not a JSON object, ``storage_options`` is not one, or the ``aws``
            connection cannot give credentials (the message names the connection).
        """
        conn = _connection(conn_id)
        extra = extra_of(conn, f"connection {conn_id!r}")
        options: dict[str, str] = {}
        if conn.conn_type == "aws":
            options = aws_storage_options(conn_id, conn, extra)
        given = extra.get("storage_options", {})
        if not isinstance(given, dict):
            msg = f"connection {conn_id!r}: extra storage_options must be a JSON object"
            raise ConfigurationError(msg)
        options.update({str(k): str(v) for k, v in given.items()})
        return options

    def iceberg_catalog(self, conn_id: str) -> tuple[str, dict[str, str]]:
        """The name and pyiceberg properties of Iceberg catalog connection ``conn_id``
        (:func:`airflow_trident.hooks.iceberg.catalog_of`)."""
        from airflow_trident.hooks.iceberg import catalog_of

        return catalog_of(conn_id)

    def kafka_config(self, conn_id: str) -> dict[str, Any]:
        """The librdkafka settings of Kafka connection ``conn_id`` (secrets: never logged).

        Where ``apache-airflow-providers-apache-kafka`` is installed they are what its
        ``KafkaBaseHook`` builds for a client: the extra, with the callbacks it names
        (``oauth_cb``, ``error_cb``...) resolved when the provider's ``[apache_kafka]
        callback_allowlist`` lists them, and its token providers (Amazon MSK IAM, Google
        Managed Kafka) added as it adds them. Without the provider the extra is read as is,
        and a callback is refused (only the provider's allow-list may import one).

        Raises
        ------
        ConfigurationError
            If the extra is not a JSON object with ``bootstrap.servers``, or the provider
            refuses it (a callback not allow-listed), naming the connection.
        """
        conn = _connection(conn_id)
        extra: Any = extra_of(conn, f"Kafka connection {conn_id!r}")
        if not extra.get("bootstrap.servers"):
            msg = (
                f"Kafka connection {conn_id!r} has no bootstrap.servers in its extra; hint: a "
                f"`kafka` connection's extra is a JSON object of librdkafka settings, e.g. "
                f'{{"bootstrap.servers": "broker:9092"}}'
            )
            raise ConfigurationError(msg)
        if importlib.util.find_spec("airflow.providers.apache.kafka") is not None:
            return _kafka_provider_config(conn_id)
        callbacks = sorted(k for k in extra if k.endswith("_cb") or k == "on_commit")
        if callbacks:
            msg = (
                f"Kafka connection {conn_id!r} names callbacks ({', '.join(callbacks)}), which "
                f"only the Kafka provider's allow-list may import; hint: install "
                f"apache-airflow-providers-apache-kafka and list them in [apache_kafka] "
                f"callback_allowlist"
            )
            raise ConfigurationError(msg)
        return {str(k): str(v) for k, v in extra.items()}


def _kafka_provider_config(conn_id: str) -> dict[str, Any]:
    """The configuration the Kafka provider's hook gives its clients (its ``_get_client``
    extension point returns it instead of a client)."""
    from airflow.providers.apache.kafka.hooks.base import (  # type: ignore[import-not-found,unused-ignore]
        KafkaBaseHook,
    )

    class _Settings(KafkaBaseHook):  # type: ignore[misc,unused-ignore]
        def _get_client(self, config: Any) -> Any:
            return config

    try:
        hook = _Settings(kafka_config_id=conn_id)  # type: ignore[no-untyped-call,unused-ignore]
        config = hook.get_conn
    except ValueError as exc:  # a callback not allow-listed, no bootstrap.servers
        raise ConfigurationError(f"Kafka connection {conn_id!r}: {exc}") from None
    except Exception as exc:  # the provider's optional features (MSK IAM's signer...)
        if type(exc).__name__ != "AirflowOptionalProviderFeatureException":
            raise
        raise ConfigurationError(f"Kafka connection {conn_id!r}: {exc}") from None
    return {str(k): v if callable(v) else str(v) for k, v in dict(config).items()}


def _connection(conn_id: str) -> Any:
    try:
        return get_connection(conn_id)
    except AirflowNotFoundException:
        msg = (
            f"connection {conn_id!r} of a source or sink is not defined; hint: define it in "
            f"the Airflow UI (Admin > Connections), with `airflow connections add {conn_id}`, "
            f"or as AIRFLOW_CONN_{conn_id.upper()}"
        )
        raise MissingConnectionError(msg) from None


def install() -> None:
    """Resolve connection ids through Airflow in this process (idempotent)."""
    connections.install_resolver(AirflowConnections())
