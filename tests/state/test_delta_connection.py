"""Delta credentials from an Airflow connection (issue 20, finding 2): ``delta_state(...,
conn_id=...)`` reads the connection's storage options when the state commits (in the task, or
from the secret a Spark job inherits), never when the DAG file is parsed, and hands them to
delta-rs without logging them. Before, delta_state took credentials only as literal
``storage_options`` in the DAG file (``conn_id`` was a TypeError)."""

from __future__ import annotations

import json
import logging
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import deltalake
import pyarrow.parquet as pq
import pytest

from airflow_trident import connections
from airflow_trident.coordination.client import ZkConfig
from airflow_trident.errors import ConfigurationError
from airflow_trident.hooks.connections import install
from airflow_trident.hooks.spark import job_arguments, job_secrets
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.delta import delta_state

pytestmark = pytest.mark.integration

SECRET = "s3cr3t-lake-key"


@pytest.fixture
def lake(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A connection whose extra carries delta-rs storage options (``timeout`` is harmless on a
    local path; the secret must reach delta-rs and nothing else)."""
    monkeypatch.setenv("AIRFLOW_CONN_LAKE", json.dumps({
        "conn_type": "generic",
        "extra": {"storage_options": {"timeout": "7s", "AWS_SECRET_ACCESS_KEY": SECRET}},
    }))  # fmt: skip
    # the declarations of this test alone (a job ships every declared connection)
    saved = connections.declared()
    connections._DECLARED.clear()
    yield "lake"
    connections.install_resolver(None)
    connections._DECLARED.clear()
    connections._DECLARED.update(saved)


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any] | None]:
    """Record the storage options delta-rs receives (the real calls still run)."""
    seen: list[dict[str, Any] | None] = []
    write, is_table = deltalake.write_deltalake, deltalake.DeltaTable.is_deltatable

    def spy_write(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("storage_options"))
        return write(*args, **kwargs)

    def spy_is_table(path: str, storage_options: Any = None) -> bool:
        seen.append(storage_options)
        return bool(is_table(path, storage_options=storage_options))

    monkeypatch.setattr(deltalake, "write_deltalake", spy_write)
    monkeypatch.setattr(deltalake.DeltaTable, "is_deltatable", staticmethod(spy_is_table))
    return seen


def test_delta_storage_options_come_from_the_connection_at_commit(
    lake: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    path = str(tmp_path / "events")
    # Given a DAG file being parsed (no resolver): making the state looks nothing up
    connections.install_resolver(None)
    factory = delta_state(path, "lake_topology.events", conn_id=lake,
                          storage_options={"AWS_REGION": "eu-west-1"})  # fmt: skip
    assert SECRET not in repr(factory)
    with pytest.raises(ConfigurationError, match="'lake' cannot be resolved"):
        factory.resolved_options()
    # When the commit task (Airflow's resolver installed) commits, and replays, batches
    install()
    seen = _spy(monkeypatch)
    for txid in (1, 2, 2):
        state = factory.make_state()
        state.begin_commit(txid)
        state.write([{"word": "w", "n": txid}])
        state.commit(txid)
    # Then delta-rs got the connection's options (and the DAG's non-secret one) every time
    wanted = {"timeout": "7s", "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "eu-west-1"}
    assert seen
    assert seen == [wanted] * len(seen)
    table = pq.read_table(deltalake.DeltaTable(path).file_uris())
    assert sorted(table["n"].to_pylist()) == [1, 2]
    # and no log line carries the credential
    assert caplog.records
    assert SECRET not in caplog.text


def test_a_spark_job_resolves_delta_options_from_its_secret(lake: str, tmp_path: Path) -> None:
    # Given a task whose topology declared the Delta connection
    install()
    delta_state(str(tmp_path / "events"), "lake_topology.events", conn_id=lake)
    secrets = job_secrets(ZkConfig(hosts="127.0.0.1:2181"), None)
    args = job_arguments("pkg.mod:t", 1, "/stage", ZkConfig(hosts="127.0.0.1:2181"),
                         emit_wait_s=1.0, commit=True)  # fmt: skip
    assert SECRET not in " ".join(args)  # the job's command line
    # When a process without Airflow (the spark-submit driver or a local executor) commits
    code = (
        "from airflow_trident.state.delta import delta_state\n"
        f"f = delta_state({str(tmp_path / 'events')!r}, 'lake_topology.events', conn_id='lake')\n"
        "s = f.make_state(); s.begin_commit(1); s.write([{'n': 1}]); s.commit(1)\n"
        "print(f.resolved_options()['timeout'])\n"
    )
    env = {"PATH": "/usr/bin:/bin", **secrets}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=False)  # fmt: skip
    # Then it read the options from the inherited secret (no AIRFLOW_CONN_LAKE there)
    assert done.stdout.strip() == "7s", done.stderr[-2000:]
    assert SECRET not in done.stdout + done.stderr


def test_an_executor_without_the_job_environment_resolves_from_the_binding(
    lake: str, tmp_path: Path
) -> None:
    # Given a task whose topology declared the Delta connection, and the run's state binding
    # pickled into a Spark task closure (as the Spark commit and Spark Connect ship it)
    install()
    delta_state(str(tmp_path / "events"), "lake_topology.events", conn_id=lake)
    closure = pickle.dumps(StateBinding("sqlite://"))
    # When an executor with neither Airflow's resolver nor TRIDENT_CONNECTIONS (a cluster node,
    # a Spark Connect server) unpickles it and commits
    code = (
        "import pickle, sys\n"
        "from airflow_trident.state.delta import delta_state\n"
        "binding = pickle.loads(sys.stdin.buffer.read())\n"
        f"f = delta_state({str(tmp_path / 'events')!r}, 'lake_topology.events', conn_id='lake')\n"
        "s = binding.make_state(f); s.begin_commit(1); s.write([{'n': 1}]); s.commit(1)\n"
        "print(f.resolved_options()['timeout'], repr(binding))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env={"PATH": "/usr/bin:/bin"},
                          input=closure, capture_output=True, check=False)  # fmt: skip
    out, err = done.stdout.decode(), done.stderr.decode()
    # Then it read the options the closure carried; nothing printed them
    assert out.strip() == "7s StateBinding('sqlite://')", err[-2000:]
    assert SECRET not in out + err
