"""Fixtures of the browser tests: a headless Chromium, and a real Airflow UI over a home where a
short Trident DAG run happened (reuse them for any page: a Trident UI plugin view, say).

``browser`` is a Selenium driver of Debian's Chromium (:func:`tests.harness.ui.chromium`);
``trident_ui`` is an API server on a free loopback port over a temporary home (``airflow.cfg``,
login and connections as the main job leaves them) in which one batch of a word-count DAG ran
with ``airflow dags test --use-executor`` (real task logs); ``ui_artifacts`` is where screenshots
go (``.work/artifacts/ui``, kept after the run).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness.airflow import (
    AirflowHome,
    DagTestResult,
    prepare_airflow_home,
    run_dag_test,
)
from tests.harness.ui import (
    UiLogin,
    chromium,
    free_port,
    server_env,
    serving_airflow,
    store_connections,
    write_ui_config,
)

ROOT = Path(__file__).resolve().parents[2]
DAG_ID = "browser_word_count"
DAG_FILE = f'''
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "airflow_trident.examples.topologies:word_count",
    dag_id="{DAG_ID}",
    schedule=None,
    spark_conn_id="spark_local",
    zookeeper_conn_id="trident_zookeeper_default",
    state_conn_id="trident_state",
    max_active_batches=1,
)
'''


@dataclass(frozen=True)
class TridentUi:
    """A served home with one finished Trident run.

    Attributes
    ----------
    url, login:
        The UI's base URL and its user.
    home:
        The Airflow home.
    dag_id, run:
        The DAG and its finished run (``run.run_id``, ``run.task_states``).
    """

    url: str
    login: UiLogin
    home: AirflowHome
    dag_id: str
    run: DagTestResult


@pytest.fixture(scope="session")
def ui_artifacts() -> Path:
    """Where the browser tests keep their screenshots (``.work/artifacts/ui``)."""
    path = ROOT / ".work" / "artifacts" / "ui"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium (Selenium WebDriver) with a profile of its own, removed after."""
    with chromium() as driver:
        yield driver


@pytest.fixture(scope="session")
def trident_ui(tmp_path_factory: pytest.TempPathFactory, zk_hosts: str) -> Iterator[TridentUi]:
    """An API server on a free loopback port over a home where one Trident batch ran."""
    root = tmp_path_factory.mktemp("trident_ui")
    (root / "dags").mkdir()
    (root / "dags" / f"{DAG_ID}.py").write_text(DAG_FILE)
    home = prepare_airflow_home(root / "airflow", dags_folder=root / "dags")
    port = free_port()
    login = write_ui_config(home, port=port, parallelism=2)
    host, _, zk_port = zk_hosts.partition(":")
    store_connections(home, {
        "spark_local": {"conn_type": "spark", "host": "local[2]"},
        "trident_zookeeper_default": {"conn_type": "trident_zookeeper", "host": host,
                                      "port": int(zk_port or 2181),
                                      "extra": {"root": f"/browser_{uuid.uuid4().hex[:8]}"}},
        "trident_state": {"conn_type": "trident_state", "host": str(root / "state.db"),
                          "extra": {"dialect": "sqlite"}},
    })  # fmt: skip
    env = {"TRIDENT_STAGING_ROOT": str(root / "staging"), "SPARK_LOCAL_IP": "127.0.0.1"}
    with serving_airflow(home, port=port, components=("api-server",), env=env) as servers:
        run = run_dag_test(DAG_ID, home=home, extra_env={**env, **server_env(port)},
                           timeout_s=180, use_executor=True)  # fmt: skip
        assert run.ok, run.describe()
        yield TridentUi(url=servers.url, login=login, home=home, dag_id=DAG_ID, run=run)
