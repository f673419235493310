"""Shared fixtures: real ZooKeeper and PostgreSQL started by ``scripts/services.sh``.

Integration tests read ``TRIDENT_ZK_HOSTS`` and ``TRIDENT_PG_URL`` (``scripts/test.sh`` exports
both); without them they are skipped with a message saying how to start the services.

The project root goes on ``PYTHONPATH`` first thing: tests ship topologies of
:mod:`tests.harness` by reference (``tests.harness.topologies:e2e_word_count``) to processes that
import them — Airflow tasks, ``spark-submit`` and Spark's Python workers, the scheduler's
components, the Spark Connect server — and ``tests`` is not installed.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator

# Airflow reads AIRFLOW_HOME when first imported: isolate it before any test imports airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="trident-airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

import pytest
from kazoo.client import KazooClient

from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.state.map.backing import reset_memory_stores
from tests.harness import export_project_path

export_project_path()  # before any test starts a process that imports tests.harness


@pytest.fixture(autouse=True)
def _fresh_memory_stores() -> Iterator[None]:
    reset_memory_stores()
    yield
    reset_memory_stores()


@pytest.fixture(scope="session")
def zk_hosts() -> str:
    hosts = os.environ.get("TRIDENT_ZK_HOSTS")
    if not hosts:
        pytest.skip("TRIDENT_ZK_HOSTS unset: run `bash scripts/test.sh` (starts ZooKeeper)")
    return hosts


@pytest.fixture(scope="session")
def pg_url() -> str:
    url = os.environ.get("TRIDENT_PG_URL")
    if not url:
        pytest.skip("TRIDENT_PG_URL unset: run `bash scripts/test.sh` (starts PostgreSQL)")
    return url


@pytest.fixture
def unique_name() -> str:
    """A fresh valid name (topology, table) so tests never share data."""
    return f"t_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def zk_config(zk_hosts: str) -> ZkConfig:
    return ZkConfig(hosts=zk_hosts, root="/trident_test", timeout=5.0)


@pytest.fixture
def zk_client(zk_config: ZkConfig) -> Iterator[KazooClient]:
    client = connect(zk_config)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def zk_store(
    zk_client: KazooClient, zk_config: ZkConfig, unique_name: str
) -> Iterator[CoordinatorStore]:
    """A coordinator store of a fresh topology on the real ZooKeeper, deleted afterwards."""
    store = CoordinatorStore(zk_client, CoordinatorPaths(zk_config.root, unique_name))
    yield store
    if zk_client.connected:
        store.delete_all()
