"""Fixtures of the hook tests: Airflow connections from ``AIRFLOW_CONN_*``, an isolated Airflow
home for CLI runs, and a capture of everything logged or printed.

Outside a task, a hook's ``self.log`` is a structlog logger that prints to stdout, not a stdlib
logger: ``caplog`` misses it, so :func:`all_output` reads both ``caplog`` and the captured fds.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.harness.airflow import AirflowHome, prepare_airflow_home

# In-process Airflow reads AIRFLOW_HOME once, at import: keep it off ~/airflow unless the caller
# chose one. (This belongs in tests/conftest.py once Airflow tests exist elsewhere.)
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="trident-airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

SetConnection = Callable[..., str]


@pytest.fixture
def airflow_conn(monkeypatch: pytest.MonkeyPatch) -> SetConnection:
    """Define an Airflow connection for this test; returns its (fresh) id.

    Call as ``airflow_conn(conn_type="trident_zookeeper", host=..., extra={...})``. Ids are unique
    per call, so no lookup cache can hand one test another test's connection.
    """

    def set_connection(**fields: Any) -> str:
        conn_id = f"test_{uuid.uuid4().hex[:10]}"
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))
        return conn_id

    return set_connection


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> AirflowHome:
    """An isolated Airflow home without metadata DB (enough for ``providers`` and ``connections``
    commands with env-var connections)."""
    return prepare_airflow_home(tmp_path_factory.mktemp("airflow_home"), migrate=False)


@pytest.fixture
def all_output(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> Callable[[], str]:
    """Capture stdlib logs from DEBUG up plus stdout/stderr; call the result to read them all."""
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []

    def read() -> str:
        out, err = capfd.readouterr()
        seen.extend([out, err])
        records = [
            f"{r.name} {r.getMessage()} {r.args!r} {r.exc_text or ''}" for r in caplog.records
        ]
        return "\n".join([*records, *seen])

    return read


@pytest.fixture
def closed_port() -> int:
    """A local TCP port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
