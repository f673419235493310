"""Sources take Airflow connection ids (issue 20, finding 2): DatabaseTableSpout(conn_id=...)
reads the connection when it first touches the database, never when it is made (a DAG file
parse), through Airflow in a task and from the shipped secret in a Spark job. Before, the
spout took only a URL (with its password in the DAG file)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import sqlalchemy as sa

from airflow_trident import connections
from airflow_trident.coordination.client import ZkConfig
from airflow_trident.errors import ConfigurationError, MissingConnectionError
from airflow_trident.hooks.connections import AirflowConnections, install
from airflow_trident.hooks.spark import job_secrets
from airflow_trident.spout.base import ListCollector
from airflow_trident.spout.database_table import DatabaseTableSpout

pytestmark = pytest.mark.integration


@pytest.fixture
def events(pg_url: str, unique_name: str, monkeypatch: pytest.MonkeyPatch) -> str:
    with sa.create_engine(pg_url).begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE {unique_name} (id INTEGER PRIMARY KEY, word TEXT)"))
        conn.execute(sa.text(f"INSERT INTO {unique_name} VALUES (1, 'a'), (2, 'b')"))
    url = sa.make_url(pg_url)
    monkeypatch.setenv("AIRFLOW_CONN_ANALYTICS_PG", json.dumps({
        "conn_type": "postgres", "host": url.host, "port": url.port, "login": url.username,
        "password": url.password, "schema": url.database,
        "extra": {"application_name": "trident_test"},
    }))  # fmt: skip
    yield unique_name
    with sa.create_engine(pg_url).begin() as conn:
        conn.execute(sa.text(f"DROP TABLE {unique_name}"))


def test_a_table_source_reads_by_connection_id(events: str) -> None:
    # Given no resolver yet (a DAG file being parsed): making the spout does no lookup
    connections.install_resolver(None)
    spout = DatabaseTableSpout(conn_id="analytics_pg", table=events, fields=["id", "word"])
    assert repr(spout).startswith("DatabaseTableSpout(conn_id='analytics_pg'")
    with pytest.raises(ConfigurationError, match="'analytics_pg' cannot be resolved"):
        _ = spout.url
    # When a task installs the Airflow resolver and the spout emits
    install()
    collector = ListCollector()
    meta = spout.get_partitioned_emitter().emit_partition_batch_new(None, collector, "all", None)
    # Then it read the table through the connection (libpq extras kept)
    assert (meta["high"], collector.tuples) == (2, [(1, "a"), (2, "b")])
    assert sa.make_url(spout.url).query["application_name"] == "trident_test"
    assert spout.spark_native  # PostgreSQL: Spark reads it through JDBC


def test_a_spark_job_gets_the_connection_as_a_secret(events: str) -> None:
    # Given a task whose topology declared the connection
    install()
    DatabaseTableSpout(conn_id="analytics_pg", table=events, fields=["id", "word"])
    secrets = job_secrets(ZkConfig(hosts="127.0.0.1:2181"), None)
    # When a process without Airflow's resolver (the spark-submit driver) reads the spout
    code = (
        "from airflow_trident.spout.database_table import DatabaseTableSpout\n"
        f"s = DatabaseTableSpout(conn_id='analytics_pg', table={events!r}, fields=['id'])\n"
        "print(s.plan('all', None).count)\n"
    )
    env = {"PATH": "/usr/bin:/bin", **secrets}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=False)  # fmt: skip
    # Then it resolves from the inherited secret, not from its command line
    assert done.stdout.strip() == "2", done.stderr[-2000:]
    assert connections.CONNECTIONS_ENV in secrets


def test_an_undefined_connection_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_NOWHERE", raising=False)
    with pytest.raises(MissingConnectionError, match="'nowhere' of a source or sink"):
        AirflowConnections().database_url("nowhere")


def test_url_or_conn_id_exactly_one() -> None:
    with pytest.raises(ConfigurationError, match=r"give conn_id .* or url, exactly one"):
        DatabaseTableSpout(table="t", fields=["id"])
