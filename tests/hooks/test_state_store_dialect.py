"""A ``trident_state`` connection without a dialect: SQLite, as its form's default says, when it
gives a SQLite file; else a clear refusal, also from the connection test (the UI's "Test")."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL

from airflow_trident.errors import ConfigurationError
from airflow_trident.get_provider_info import connection_type_info
from airflow_trident.hooks.state_store import StateStoreHook
from tests.hooks.conftest import SetConnection


def test_the_form_defaults_the_dialect_to_sqlite() -> None:
    dialect = connection_type_info("trident_state")["conn-fields"]["dialect"]
    assert dialect["schema"]["default"] == "sqlite"


@pytest.mark.parametrize("field", ["schema", "host"])
def test_no_dialect_and_a_file_path_is_sqlite(
    airflow_conn: SetConnection, tmp_path: Path, field: str
) -> None:
    # Given a trident_state connection with only a SQLite file path, no dialect
    path = tmp_path / "state.db"
    conn_id = airflow_conn(conn_type="trident_state", **{field: str(path)})
    hook = StateStoreHook(state_conn_id=conn_id)
    # When its URL is built and the connection tested
    url = hook.get_url()
    ok, message = hook.test_connection()
    # Then it is that SQLite file, as the form's default dialect says, and the test passes
    assert url == URL.create("sqlite", database=str(path))
    assert (ok, message) == (True, f"SQLite state store {path} does not exist yet (created on use)")
    with hook.get_engine().connect() as connection:
        assert connection.execute(sa.text("SELECT 1")).scalar_one() == 1
    assert path.exists()


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        (
            {"host": "db.example.com", "port": 5432, "schema": "trident", "login": "etl"},
            "has no dialect, so it is SQLite .the form's default., but it sets port, login",
        ),
        ({"host": "db.example.com"}, "'db.example.com' is not an absolute file path"),
        ({}, "gives no database file"),
    ],
)
def test_no_dialect_and_server_fields_fails_clearly(
    airflow_conn: SetConnection, fields: dict[str, object], match: str
) -> None:
    # Given a dialect-less trident_state connection that does not describe a SQLite file
    hook = StateStoreHook(state_conn_id=airflow_conn(conn_type="trident_state", **fields))
    # When it is used, or tested from the UI
    with pytest.raises(ConfigurationError, match=match) as info:
        hook.get_url()
    ok, message = hook.test_connection()
    # Then both say what is wrong, on which connection, and what to set
    assert hook.state_conn_id in str(info.value)
    assert not ok
    assert message == str(info.value)
    if fields:
        assert "hint: set Dialect to 'postgresql'" in message
