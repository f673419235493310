"""StateStoreHook: SQLAlchemy URLs from trident_state / postgres / sqlite connections, engines on
real SQLite and PostgreSQL, and the connection test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL

from airflow_trident.errors import ConfigurationError
from airflow_trident.hooks.state_store import StateStoreHook
from tests.hooks.conftest import SetConnection

PASSWORD = "Db-Pa55-never-shown"


def hook_for(airflow_conn: SetConnection, **fields: object) -> StateStoreHook:
    return StateStoreHook(state_conn_id=airflow_conn(**fields))


def pg_fields(pg_url: str, *, conn_type: str) -> dict[str, object]:
    """The Airflow connection fields of the local PostgreSQL test server."""
    url = sa.make_url(pg_url)
    fields: dict[str, object] = {
        "conn_type": conn_type,
        "host": url.host,
        "port": url.port,
        "schema": url.database,
        "login": url.username,
        "password": url.password,
    }
    if conn_type == "trident_state":
        fields["extra"] = {"dialect": "postgresql"}
    return fields


# ---------------------------------------------------------------- URLs (no database)


@pytest.mark.parametrize("conn_type", ["trident_state", "postgres", "postgresql"])
def test_postgres_url_from_connection(airflow_conn: SetConnection, conn_type: str) -> None:
    # Given a PostgreSQL connection of any accepted type, with a libpq option and a stray extra
    extra = {"sslmode": "prefer", "unrelated": "x"}
    if conn_type == "trident_state":
        extra["dialect"] = "postgresql"
    hook = hook_for(
        airflow_conn, conn_type=conn_type, host="db.local", port=5433, schema="trident",
        login="etl", password=PASSWORD, extra=extra,
    )  # fmt: skip
    # When its URL is built
    url = hook.get_url()
    # Then it names psycopg 3, carries the password only as a field, and hides it as text
    assert url == URL.create(
        "postgresql+psycopg", username="etl", password=PASSWORD, host="db.local", port=5433,
        database="trident", query={"sslmode": "prefer"},
    )  # fmt: skip
    assert str(url) == "postgresql+psycopg://etl:***@db.local:5433/trident?sslmode=prefer"
    assert PASSWORD not in repr(url)
    assert PASSWORD not in repr(hook)


@pytest.mark.parametrize(
    "fields",
    [
        {"conn_type": "sqlite", "host": "{path}"},  # Airflow's SQLite provider keeps it in host
        {"conn_type": "trident_state", "schema": "{path}", "extra": {"dialect": "sqlite"}},
        {"conn_type": "trident_state", "schema": "{path}", "extra": {"dialect": "SQLite"}},
    ],
)
def test_sqlite_url_from_connection(
    airflow_conn: SetConnection, tmp_path: Path, fields: dict[str, object]
) -> None:
    path = tmp_path / "state.db"
    filled = {k: (str(path) if v == "{path}" else v) for k, v in fields.items()}
    assert hook_for(airflow_conn, **filled).get_url() == URL.create("sqlite", database=str(path))


def test_sqlite_url_from_a_uri_connection(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A `sqlite:////abs/path` URI puts the path in schema, not host
    monkeypatch.setenv("AIRFLOW_CONN_STATE_URI", f"sqlite:///{tmp_path}/state.db")
    url = StateStoreHook(state_conn_id="state_uri").get_url()
    assert url.database == f"{tmp_path}/state.db"


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"conn_type": "trident_state", "host": "db"}, "'db' is not an absolute file path"),
        (
            {"conn_type": "trident_state", "extra": {"dialect": "mysql"}},
            "dialect 'mysql' is not supported; use 'sqlite' or 'postgresql'",
        ),
        ({"conn_type": "mysql", "host": "db"}, "has type 'mysql'; hint: use a 'trident_state'"),
        ({"conn_type": "sqlite"}, "gives no database file; hint"),
        ({"conn_type": "sqlite", "host": "/a.db", "schema": "/b.db"}, "gives two paths"),
    ],
)
def test_url_rejects_unusable_connections(
    airflow_conn: SetConnection, fields: dict[str, object], match: str
) -> None:
    hook = hook_for(airflow_conn, **fields)
    with pytest.raises(ConfigurationError, match=match) as info:
        hook.get_url()
    assert hook.state_conn_id in str(info.value)


def test_ui_relabels_schema_as_database() -> None:
    assert StateStoreHook.get_ui_field_behaviour()["relabeling"] == {"schema": "Database"}


# ---------------------------------------------------------------- SQLite (a real file)


def test_sqlite_engine_is_cached_and_runs_queries(
    airflow_conn: SetConnection, tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    with hook_for(airflow_conn, conn_type="sqlite", host=str(path)) as hook:
        engine = hook.get_engine()
        assert hook.get_engine() is engine
        assert hook.get_conn() is engine
        with engine.connect() as connection:
            assert connection.execute(sa.text("SELECT 1")).scalar_one() == 1
        assert path.exists()
        hook.close()
        assert hook.get_engine() is not engine


def test_sqlite_connection_test_does_not_create_the_file(
    airflow_conn: SetConnection, tmp_path: Path
) -> None:
    # Given a SQLite state store whose file does not exist yet
    path = tmp_path / "state.db"
    hook = hook_for(airflow_conn, conn_type="sqlite", host=str(path))
    # When it is tested
    ok, message = hook.test_connection()
    # Then the test passes, says so, and leaves no file behind
    assert (ok, message) == (True, f"SQLite state store {path} does not exist yet (created on use)")
    assert not path.exists()
    # And once the file exists, the test really queries it
    sa.create_engine(f"sqlite:///{path}").connect().close()
    assert hook.test_connection() == (True, f"Connected to the state store at sqlite:///{path}")


def test_sqlite_connection_test_fails_for_a_missing_directory(
    airflow_conn: SetConnection, tmp_path: Path
) -> None:
    path = tmp_path / "missing" / "state.db"
    ok, message = hook_for(airflow_conn, conn_type="sqlite", host=str(path)).test_connection()
    assert not ok
    assert message == f"SQLite state store {path}: directory {path.parent} does not exist"


# ---------------------------------------------------------------- real PostgreSQL


@pytest.mark.integration
@pytest.mark.parametrize("conn_type", ["trident_state", "postgres"])
def test_select_one_on_real_postgres(
    airflow_conn: SetConnection, pg_url: str, conn_type: str, all_output: Callable[[], str]
) -> None:
    # Given a connection to the local PostgreSQL
    fields = pg_fields(pg_url, conn_type=conn_type)
    # The local server's password is also its user and database name: look for it where a URL
    # would show it.
    shown_password = f":{fields['password']}@"
    with hook_for(airflow_conn, **fields) as hook:
        # When a query runs through the hook's engine
        with hook.get_engine().connect() as connection:
            one = connection.execute(sa.text("SELECT 1")).scalar_one()
            server = connection.execute(sa.text("SHOW server_version")).scalar_one()
        # Then it reaches the server, and the connection test agrees
        assert one == 1
        assert server.startswith("15")
        ok, message = hook.test_connection()
        assert ok, message
        assert message.startswith("Connected to the state store at postgresql+psycopg://")
    # And the password was never logged (the hook's own log line was)
    output = all_output()
    assert "State store engine for postgresql+psycopg://" in output
    assert shown_password not in output


@pytest.mark.integration
def test_connection_fails_clearly_on_a_closed_port(
    airflow_conn: SetConnection, closed_port: int
) -> None:
    hook = hook_for(
        airflow_conn, conn_type="postgres", host="127.0.0.1", port=closed_port, schema="trident",
        login="etl", password=PASSWORD, extra={"connect_timeout": 2},
    )  # fmt: skip
    ok, message = hook.test_connection()
    assert not ok
    assert message.startswith(
        f"Cannot reach the state store at postgresql+psycopg://etl:***@127.0.0.1:{closed_port}/"
    )
    assert "Connection refused" in message
    assert PASSWORD not in message


@pytest.mark.integration
def test_connection_fails_clearly_on_a_wrong_password(
    airflow_conn: SetConnection, pg_url: str
) -> None:
    fields = {**pg_fields(pg_url, conn_type="postgres"), "password": PASSWORD}
    ok, message = hook_for(airflow_conn, **fields).test_connection()
    assert not ok
    assert "password authentication failed" in message
    assert PASSWORD not in message
