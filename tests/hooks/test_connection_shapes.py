"""Official connection shapes and loud malformed connections (issue 53, items 6 and 4).

- An ``iceberg`` connection as the Iceberg provider defines it (Host = the catalog's full URI,
  Login/Password = OAuth2 client id and secret, hook parameter ``iceberg_conn_id``) gives that
  catalog; before, a Host with a scheme became ``https://https://...``, and the hook took only
  ``catalog_conn_id``. No hook of ours claims another provider's connection type.
- Connections are read through Airflow's API: an ``AIRFLOW_CONN_*`` that is not valid JSON is
  refused naming the connection and where the JSON breaks (before: Airflow's "isn't defined",
  or a bare ``JSONDecodeError`` from our own parser).
- A malformed extra (not JSON, not an object, a value of the wrong type) is refused naming the
  connection, for every connection type we read; before, ZooKeeper's was read as ``{}``,
  silently turning TLS and SASL off.

Connections are real Airflow connections (``AIRFLOW_CONN_*`` in JSON); the catalog of the
end-to-end test is a real pyiceberg SQL catalog.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import airflow_trident.hooks
from airflow_trident import connections
from airflow_trident.errors import ConfigurationError, MissingConnectionError
from airflow_trident.get_provider_info import get_provider_info
from airflow_trident.hooks.connections import AirflowConnections, install
from airflow_trident.hooks.iceberg import IcebergCatalogHook
from airflow_trident.hooks.state_store import StateStoreHook
from airflow_trident.hooks.zookeeper import ZooKeeperHook
from airflow_trident.state.iceberg import iceberg_state
from tests.hooks.conftest import SetConnection

SECRET = "s3cr3t-client-secret"


@pytest.fixture
def airflow_resolver() -> Any:
    install()
    yield
    connections.install_resolver(None)


# -- the Iceberg provider's shape -------------------------------------------------------------


def test_an_official_iceberg_connection_gives_its_catalog_uri_and_credential(
    airflow_conn: SetConnection,
) -> None:
    # Given a connection as the Iceberg provider's form writes it
    conn_id = airflow_conn(
        conn_type="iceberg", host="https://catalog.example.com/ws/", login="client-id",
        password=SECRET, extra={"warehouse": "s3://lake/", "s3.region": "us-east-1"},
    )  # fmt: skip
    # When our hook reads it by the provider's parameter name
    _, props = IcebergCatalogHook(iceberg_conn_id=conn_id).catalog_properties()
    # Then Host is the URI as given, and the client id and secret are the OAuth2 credential
    assert props == {
        "type": "rest", "uri": "https://catalog.example.com/ws", "warehouse": "s3://lake/",
        "s3.region": "us-east-1", "credential": f"client-id:{SECRET}",
    }  # fmt: skip
    assert SECRET not in str(IcebergCatalogHook(iceberg_conn_id=conn_id).shown_properties())
    # and a bare host name still becomes https://host:port/schema, as before
    bare = airflow_conn(conn_type="iceberg", host="cat.example", port=8181, schema="api")
    assert IcebergCatalogHook(iceberg_conn_id=bare).catalog_properties()[1]["uri"] == (
        "https://cat.example:8181/api"
    )


def test_a_full_uri_host_with_port_or_schema_too_is_refused(airflow_conn: SetConnection) -> None:
    conn_id = airflow_conn(conn_type="iceberg", host="https://cat.example/ws", port=8181)
    with pytest.raises(ConfigurationError, match=rf"'{conn_id}': host is the catalog's full URI"):
        IcebergCatalogHook(iceberg_conn_id=conn_id).catalog_properties()


def test_a_sink_commits_through_an_official_shaped_connection(
    airflow_conn: SetConnection, airflow_resolver: None, tmp_path: Path
) -> None:
    # Given an `iceberg` connection whose Host is a SQL catalog's full URI (the provider's
    # shape with `type` in the extra, as its hook passes extras on)
    conn_id = airflow_conn(
        conn_type="iceberg", host=f"sqlite:///{tmp_path}/catalog.db",
        extra={"type": "sql", "warehouse": f"file://{tmp_path}/warehouse"},
    )  # fmt: skip
    factory = iceberg_state("trident_tests.shapes", "shapes.events", iceberg_conn_id=conn_id)
    # When a batch commits
    state = factory.make_state()
    state.begin_commit(1)
    state.write([{"word": "a"}, {"word": "b"}])
    state.commit(1)
    # Then the rows are in that catalog's table
    rows = factory.load_table().scan().to_arrow().to_pylist()
    assert sorted(r["word"] for r in rows) == ["a", "b"]
    assert (tmp_path / "catalog.db").is_file()


def test_catalog_conn_id_still_works_with_a_deprecation_warning(
    airflow_conn: SetConnection,
) -> None:
    conn_id = airflow_conn(conn_type="iceberg", host="https://cat.example/ws")
    with pytest.warns(DeprecationWarning, match=r"use iceberg_conn_id"):
        hook = IcebergCatalogHook(catalog_conn_id=conn_id)
    assert hook.iceberg_conn_id == hook.catalog_conn_id == conn_id
    with pytest.warns(DeprecationWarning, match=r"iceberg_state\(catalog_conn_id=\.\.\.\)"):
        factory = iceberg_state("db.t", "x.y", catalog_conn_id=conn_id)
    assert factory.iceberg_conn_id == factory.catalog_conn_id == conn_id
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert iceberg_state("db.t", "x.y", iceberg_conn_id=conn_id).iceberg_conn_id == conn_id
        assert IcebergCatalogHook().iceberg_conn_id == "iceberg_default"  # the provider's
    with pytest.raises(ConfigurationError, match="not also catalog_conn_id"):
        iceberg_state("db.t", "x.y", iceberg_conn_id="a", catalog_conn_id="b")


def _our_hooks() -> list[type]:
    found: list[type] = []
    for info in pkgutil.iter_modules(airflow_trident.hooks.__path__):
        module = importlib.import_module(f"airflow_trident.hooks.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and any(
                base.__name__ == "BaseHook" for base in cls.__mro__[1:]
            ):
                found.append(cls)
    return found


def test_no_hook_of_ours_claims_another_providers_connection_type() -> None:
    ours = {c["connection-type"] for c in get_provider_info()["connection-types"]}
    assert all(t.startswith("trident_") for t in ours)
    hooks = _our_hooks()
    assert IcebergCatalogHook in hooks
    claimed = {h.__name__: getattr(h, "conn_type", None) for h in hooks}
    assert {name: t for name, t in claimed.items() if t is not None and t not in ours} == {}
    assert IcebergCatalogHook.conn_name_attr == "iceberg_conn_id"


# -- AIRFLOW_CONN_* is read by Airflow; bad JSON names the connection -----------------------------


READERS: dict[str, Callable[[str], Any]] = {
    "iceberg": lambda c: IcebergCatalogHook(iceberg_conn_id=c).catalog_properties(),
    "zookeeper": lambda c: ZooKeeperHook(zookeeper_conn_id=c).get_config(),
    "state store": lambda c: StateStoreHook(state_conn_id=c).get_url(),
    "storage options": lambda c: AirflowConnections().storage_options(c),
    "database url": lambda c: AirflowConnections().database_url(c),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_an_airflow_conn_variable_that_is_not_json_is_refused_naming_it(
    reader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given AIRFLOW_CONN_BROKEN_JSON with a JSON syntax error (a secret in it)
    monkeypatch.setenv("AIRFLOW_CONN_BROKEN_JSON", f'{{"conn_type": "x", "password": "{SECRET}",')
    # When any reader of ours looks it up
    with pytest.raises(ConfigurationError) as raised:
        READERS[reader]("broken_json")
    # Then it says which connection, which variable and where the JSON breaks, not "not found"
    text = str(raised.value)
    assert not isinstance(raised.value, MissingConnectionError)
    assert "connection 'broken_json': AIRFLOW_CONN_BROKEN_JSON is set but Airflow cannot read " \
           "it: not valid JSON (" in text, text  # fmt: skip
    assert "line 1 column" in text
    assert SECRET not in text


def test_an_iceberg_catalog_is_never_read_from_the_environment_by_hand(
    airflow_conn: SetConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a catalog connection in the environment, and a process with no Airflow resolver and
    # nothing shipped (a Spark executor of an older run, a plain script)
    from airflow_trident.state import iceberg_catalog

    conn_id = airflow_conn(conn_type="iceberg", host="https://cat.example/ws")
    connections.install_resolver(None)
    registered = iceberg_catalog._resolver
    monkeypatch.setattr(iceberg_catalog, "_resolver", None)
    # Then it is not parsed by hand: the error says how a catalog gets here
    with pytest.raises(MissingConnectionError, match=r"did not ship it \(TRIDENT_CONNECTIONS"):
        iceberg_catalog.resolve_connection(conn_id)
    # and with Airflow's resolver it is read through Airflow
    monkeypatch.setattr(iceberg_catalog, "_resolver", registered)
    assert iceberg_catalog.resolve_connection(conn_id)[1]["uri"] == "https://cat.example/ws"


# -- a malformed extra is refused, naming the connection, for every type we read ------------------


MALFORMED = {
    "not JSON": "{not json",
    "an array": "[1, 2]",
    "a string": '"use_ssl"',
}
TYPES = {
    "zookeeper": {"conn_type": "trident_zookeeper", "host": "zk1:2181"},
    "state store": {"conn_type": "trident_state", "schema": "/tmp/state.db"},
    "iceberg": {"conn_type": "iceberg", "host": "https://cat.example/ws"},
    "storage options": {"conn_type": "aws", "login": "AKIAEXAMPLE", "password": SECRET},
    "database url": {"conn_type": "postgres", "host": "db", "login": "etl", "password": SECRET},
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
@pytest.mark.parametrize("reader", sorted(TYPES))
def test_a_malformed_extra_is_refused_naming_the_connection(
    reader: str, kind: str, airflow_conn: SetConnection
) -> None:
    # Given a connection whose extra is malformed (the extra as Airflow stores it: a string)
    conn_id = airflow_conn(**TYPES[reader], extra=MALFORMED[kind])
    # When we read it, then it is refused naming the connection (never read as no extra)
    with pytest.raises(ConfigurationError, match=rf"'{conn_id}'.*: its extra is ") as raised:
        READERS[reader](conn_id)
    assert SECRET not in str(raised.value)


def test_a_zookeeper_extra_that_is_not_json_no_longer_turns_tls_off(
    airflow_conn: SetConnection,
) -> None:
    # Given a ZooKeeper connection whose TLS/SASL extra has a typo that breaks the JSON
    conn_id = airflow_conn(
        conn_type="trident_zookeeper", host="zk1:2281",
        extra='{"use_ssl": true, "ca": "/etc/zk/ca.pem", "sasl_mechanism": "DIGEST-MD5",}',
    )  # fmt: skip
    # Then the hook refuses it (before: a plain, unauthenticated client)
    wanted = rf"ZooKeeper connection '{conn_id}': its extra is not valid JSON \(Expecting property"
    with pytest.raises(ConfigurationError, match=wanted):
        ZooKeeperHook(zookeeper_conn_id=conn_id).get_config()


@pytest.mark.parametrize(
    ("fields", "wanted"),
    [
        ({"conn_type": "iceberg", "host": "https://c/ws", "extra": {"warehouse": {"a": 1}}},
         r"iceberg catalog connection '.*': extra warehouse must be a string"),
        ({"conn_type": "trident_state", "host": "db", "extra": {"dialect": "postgresql",
          "sslmode": ["require"]}}, r"state store connection '.*': extra 'sslmode' must be"),
        ({"conn_type": "aws", "extra": {"aws_session_token": {"t": 1}}},
         r"aws connection '.*': extra aws_session_token must be a string"),
        ({"conn_type": "aws", "extra": {"storage_options": ["x"]}},
         r"connection '.*': extra storage_options must be a JSON object"),
        ({"conn_type": "trident_zookeeper", "host": "zk", "extra": {"timeout": "soon"}},
         r"ZooKeeper connection '.*'"),
    ],
)  # fmt: skip
def test_an_extra_value_of_the_wrong_type_is_refused_naming_the_connection(
    fields: dict[str, Any], wanted: str, airflow_conn: SetConnection
) -> None:
    conn_id = airflow_conn(**fields)
    reader = {"iceberg": "iceberg", "trident_state": "state store", "aws": "storage options",
              "trident_zookeeper": "zookeeper"}[fields["conn_type"]]  # fmt: skip
    with pytest.raises(ConfigurationError, match=wanted) as raised:
        READERS[reader](conn_id)
    assert conn_id in str(raised.value)
