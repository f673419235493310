"""An Iceberg sink's catalog connection travels to Spark executors as Delta's, Kafka's and the
databases' connections do (issue 53, item 6): the task that makes the batch resolves
``iceberg_conn_id`` through Airflow and the state binding in the Spark task closure carries the
catalog; an executor resolves it from there, never from an Airflow of its own nor by parsing
``AIRFLOW_CONN_*`` by hand. Before, the executor read ``AIRFLOW_CONN_<ID>`` from its own
environment (a hand parser), so a catalog defined anywhere else — a secrets backend, the
metadata database, or simply not on the executor's machine — failed the commit there.

The catalog is a real pyiceberg SQL catalog (SQLite); the Spark test commits on a real local
Spark, whose Python workers never saw the connection's variable (it is set after the session
started)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_trident import connections
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.client import ZkConfig
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.hooks.connections import install
from airflow_trident.hooks.spark import job_secrets
from airflow_trident.runtime.reference import load_topology
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.iceberg import iceberg_state
from tests.harness.iceberg_connection import CONN_ID, REFERENCE, TABLE
from tests.harness.iceberg_sinks import expected_words, table_rows

pytestmark = pytest.mark.integration

SECRET = "s3cr3t-catalog-token"


@pytest.fixture
def catalog_conn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The catalog connection (Iceberg provider's shape: Host the catalog's full URI), defined
    in this process's Airflow only; the Airflow resolver installed, as a Trident task does."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps({
        "conn_type": "iceberg", "host": f"sqlite:///{tmp_path}/catalog.db",
        "extra": {"type": "sql", "warehouse": f"file://{tmp_path}/warehouse",
                  "secret.unused": SECRET},
    }))  # fmt: skip
    install()
    yield CONN_ID
    connections.install_resolver(None)


def test_the_task_closure_carries_the_catalog_to_an_executor(
    catalog_conn: str, tmp_path: Path
) -> None:
    # Given a task whose topology names the catalog by connection, and the run's state binding
    # pickled into a Spark task closure
    iceberg_state(TABLE, "shipped.events", iceberg_conn_id=catalog_conn)
    closure = pickle.dumps(StateBinding("sqlite://"))
    # When an executor without Airflow or the connection's variable unpickles it and commits
    code = (
        "import pickle, sys\n"
        "from airflow_trident.state.iceberg import iceberg_state\n"
        "binding = pickle.loads(sys.stdin.buffer.read())\n"
        f"f = iceberg_state({TABLE!r}, 'shipped.events', iceberg_conn_id={catalog_conn!r})\n"
        "s = binding.make_state(f); s.begin_commit(1); s.write([{'n': 1}]); s.commit(1)\n"
        "print(sorted(r['n'] for r in f.load_table().scan().to_arrow().to_pylist()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env={"PATH": "/usr/bin:/bin"},
                          input=closure, capture_output=True, check=False)  # fmt: skip
    out, err = done.stdout.decode(), done.stderr.decode()
    # Then it committed into the connection's catalog, which the task's process reads back
    assert out.strip() == "[1]", err[-2000:]
    factory = iceberg_state(TABLE, "shipped.events", iceberg_conn_id=catalog_conn)
    assert [r["n"] for r in table_rows(factory)] == [1]
    assert SECRET not in out + err


def test_a_spark_submit_job_gets_the_catalog_as_a_secret(catalog_conn: str) -> None:
    # Given a task whose topology declared the catalog connection
    iceberg_state(TABLE, "shipped.events", iceberg_conn_id=catalog_conn)
    secrets = job_secrets(ZkConfig(hosts="127.0.0.1:2181"), None)
    # Then the job's secret environment carries the catalog's properties
    shipped = json.loads(secrets[connections.CONNECTIONS_ENV])[catalog_conn]["iceberg_catalog"]
    assert shipped["properties"]["uri"].startswith("sqlite:///")
    assert shipped["properties"]["type"] == "sql"


def test_spark_tasks_commit_with_the_shipped_catalog(
    spark: Any, catalog_conn: str, tmp_path: Path
) -> None:
    # Given the topology loaded by reference (its sink names the catalog by connection) and a
    # run whose batches are processed on Spark
    from airflow_trident.batch.on_spark import commit_on_spark, process_on_spark

    binding = StateBinding(f"sqlite:///{tmp_path}/state.db")
    topology = load_topology(REFERENCE)
    store = MemoryCoordinatorStore(topology.name)
    steps = BatchSteps(
        topology, store, StagingArea(str(tmp_path / "staging"), topology.name), states=binding
    )
    # When two batches' partitions are committed by Spark tasks, on executors that never saw
    # the connection (its variable was set after the Spark session started)
    for run in ("r1", "r2"):
        txid = int(steps.begin(run)["txid"])
        process_on_spark(steps, spark, txid, 0.0)
        assert commit_on_spark(steps, spark, REFERENCE, txid, 0.0)["applied"]
    # Then every word is in the connection's catalog once per batch, written by Spark tasks
    factory = iceberg_state(TABLE, "iceberg_by_connection.events", iceberg_conn_id=catalog_conn)
    assert Counter(r["word"] for r in table_rows(factory)) == expected_words(2)
    summaries = [s.summary.additional_properties for s in factory.load_table().metadata.snapshots]
    assert {s["trident.partition"].split("/")[1] for s in summaries} != {"1"}  # several tasks
    assert (tmp_path / "catalog.db").is_file()
