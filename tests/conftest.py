"""Shared fixtures: real ZooKeeper, PostgreSQL and a Kafka broker started by
``scripts/services.sh``; the session-wide Spark and Spark Connect server with the connector
jars of ``jvm/pom.xml`` (docs/jvm.md).

Integration tests read ``TRIDENT_ZK_HOSTS`` and ``TRIDENT_PG_URL`` (``scripts/test.sh`` exports
both); without them they are skipped with a message saying how to start the services. The
Kafka tests' :func:`kafka_bootstrap` starts the broker itself when it does not answer.

The project root goes on ``PYTHONPATH`` first thing: tests ship topologies of
:mod:`tests.harness` by reference (``tests.harness.topologies:e2e_word_count``) to processes that
import them — Airflow tasks, ``spark-submit`` and Spark's Python workers, the scheduler's
components, the Spark Connect server — and ``tests`` is not installed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Airflow reads AIRFLOW_HOME when first imported: isolate it before any test imports airflow.
# Each xdist worker gets a home of its own: workers inherit the controller's environment, and two
# workers calling ``initdb()`` on one SQLite file at once race on ``alembic_version``'s stamp.
os.environ["AIRFLOW_HOME"] = (
    tempfile.mkdtemp(prefix=f"trident-airflow-home-{os.environ['PYTEST_XDIST_WORKER']}-")
    if "PYTEST_XDIST_WORKER" in os.environ
    else os.environ.get("AIRFLOW_HOME") or tempfile.mkdtemp(prefix="trident-airflow-home-")
)
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
def _own_connection_declarations() -> Iterator[None]:
    """Each test sees only the source/sink connections it declares: a job ships every declared
    connection, so one test's ``conn_id`` must not reach another test's Spark job."""
    from airflow_trident import connections

    saved = connections.declared()
    connections._DECLARED.clear()
    yield
    connections._DECLARED.clear()
    connections._DECLARED.update(saved)


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


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """The shared single Kafka broker's bootstrap servers (``TRIDENT_KAFKA_BOOTSTRAP``),
    started with ``scripts/services.sh start kafka`` if it does not answer; tests use topics of
    their own (``tests.harness.kafka.unique_topic``) and never stop it."""
    from tests.harness.kafka import ensure_broker

    return ensure_broker()


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


# -- Spark: one SparkSession for every Spark test, in any folder (local[2], 4 shuffle partitions,
#    UI off, Arrow on). Spark's Python workers import the operations tests define (``tests...``),
#    so the repository root goes on their PYTHONPATH. Without Java the Spark tests are skipped.


# -- Tiers: tests of a marker below run only when their flag is 1 (their own command sets it;
#    .ci/run runs each after the test command). The test command runs every mode at least once;
#    a tier repeats a mode at length or needs a whole Airflow (docs/testing.md, "Tiers").
_GATES = {
    "scheduler": ("TRIDENT_SCHEDULER", "bash scripts/scheduler-test.sh"),
    "long": ("TRIDENT_LONG", "bash scripts/long-test.sh"),
}


def _in_long_params(item: pytest.Item) -> bool:
    """Whether ``item``'s parameters (fixtures' too) match one of its module's ``LONG_PARAMS``
    (a list of ``{name: value}``): a combination that repeats modes the test command runs in
    other combinations goes to the long tier, e.g. ``[{"seed": 12}]`` or
    ``[{"state_url": "postgresql", "process": "spark_tasks"}]``."""
    callspec = getattr(item, "callspec", None)
    combinations = getattr(getattr(item, "module", None), "LONG_PARAMS", ())
    if callspec is None:
        return False
    missing = object()
    return any(
        all(callspec.params.get(name, missing) == value for name, value in combination.items())
        for combination in combinations
    )


# -- Beside the fault run: in-process tests of the states, the coordinator, DRPC, the sensors and
#    the spouts (no Spark session, no Airflow subprocess, no verdict that waits on time) carry the
#    marker ``beside``. scripts/test.sh runs them, with the type check, on the core the
#    real-scheduler fault run leaves idle, instead of on the three workers that keep both busy.
_BESIDE_THE_FAULT_RUN = (
    "tests/state/", "tests/coordination/", "tests/drpc/", "tests/sensors/", "tests/spout/",
)  # fmt: skip
_NOT_BESIDE = (
    "tests/state/test_delta_connection.py",  # Airflow CLI subprocesses
    "tests/spout/test_database_table_changes.py",  # the shared Spark session
)


def _beside_the_fault_run(item: pytest.Item) -> bool:
    nodeid = item.nodeid
    return nodeid.startswith(_BESIDE_THE_FAULT_RUN) and not nodeid.startswith(_NOT_BESIDE)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _in_long_params(item):
            item.add_marker(pytest.mark.long)
        if _beside_the_fault_run(item):
            item.add_marker(pytest.mark.beside)
    for marker, (flag, command) in _GATES.items():
        if os.environ.get(flag) == "1":
            continue
        skip = pytest.mark.skip(reason=f"its own command: {command}")
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)


def _database_of_this_worker() -> None:
    """Under pytest-xdist (``scripts/test.sh`` runs the tests without DAG runs on two workers)
    each worker gets a PostgreSQL database of its own, made anew: tests of two files at once
    must not share tables (fixed names such as ``trident_commit_ledger``, which a test empties).
    ``TRIDENT_PG_URL`` names it for the worker and every process it starts."""
    worker, url = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("TRIDENT_PG_URL")
    if not worker or not url:
        return
    import psycopg
    import sqlalchemy as sa

    base = sa.make_url(url)
    name = f"{base.database}_{worker}"
    with psycopg.connect(
        host=base.host, port=base.port, user=base.username, password=base.password,
        dbname=base.database, autocommit=True,
    ) as admin:  # fmt: skip
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    os.environ["TRIDENT_PG_URL"] = base.set(database=name).render_as_string(hide_password=False)


# the directory of the run's one Spark Connect server under pytest-xdist: made by the controller
# before its workers start (they inherit it), the server stopped at the controller's end
_SHARED_CONNECT = "TRIDENT_TEST_SHARED_CONNECT"
_TRAINING: list[subprocess.Popen[bytes]] = []  # the class archive's, started by this process


def _controller_of_workers(config: pytest.Config) -> bool:
    """Whether this process is pytest-xdist's controller of workers (``-n N``, N > 0)."""
    return not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", 0))


def pytest_configure(config: pytest.Config) -> None:
    _database_of_this_worker()
    # every JVM spark-submit starts for a test (the shared local session, the DAG runs' Spark
    # jobs, Connect servers): its JIT C1 only (tests/harness/jvm.py) and Spark's classes mapped
    # from a CDS archive (tests/harness/class_archive.py), made in the background by the first
    # pytest process of a checkout (xdist's workers inherit the controller's options)
    if "SPARK_SUBMIT_OPTS" not in os.environ:
        from tests.harness.class_archive import archive_options, archive_path, start_training
        from tests.harness.jvm import QUICK_JIT

        archive = archive_path()
        if archive is not None:
            _TRAINING.extend(filter(None, [start_training(archive, jvm_options=QUICK_JIT)]))
        os.environ["SPARK_SUBMIT_OPTS"] = f"{QUICK_JIT} {archive_options(archive)}".strip()
    if _controller_of_workers(config):
        os.environ[_SHARED_CONNECT] = tempfile.mkdtemp(prefix="trident-connect-")
    # pyspark 4.3 warns about pandas 3 on every Arrow UDF; the runtime does not use pandas
    config.addinivalue_line(
        "filterwarnings", "ignore:PySpark does not yet fully support pandas:FutureWarning"
    )


@pytest.fixture(scope="session")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The session-wide Spark Connect server (``local[2]``, the connector jars on its
    ``spark.jars``), started at first use; tests that end sessions or servers start their own
    (``tests.harness.connect.running_connect_server``). Clients run in child processes: a
    Connect session cannot share a process with the classic :func:`spark`."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Java is not installed: a Spark Connect server needs a JVM")
    from tests.harness.connect import running_connect_server, shared_connect_server

    shared = os.environ.get(_SHARED_CONNECT)
    if shared:  # pytest-xdist: one server for every worker, stopped by the controller
        yield shared_connect_server(Path(shared))
        return
    with running_connect_server(tmp_path_factory.mktemp("connect_server")) as url:
        yield url


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The session-wide local SparkSession, with the ``spark`` jars of ``jvm/pom.xml``."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Java is not installed: the Spark runtime tests need a JVM")
    pytest.importorskip("pyspark")
    root = str(Path(__file__).resolve().parents[1])
    paths = [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from airflow_trident.runtime.spark.session import local_session
    from tests.harness.jars import spark_jars_conf

    # the project's connector jars (Kafka, PostgreSQL JDBC: jvm/pom.xml, docs/jvm.md)
    # (its JIT is C1 only through SPARK_SUBMIT_OPTS, set in pytest_configure)
    session = local_session(
        "local[2]", shuffle_partitions=4, app_name="airflow-trident-tests", conf=spark_jars_conf()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def pytest_unconfigure(config: pytest.Config) -> None:
    for training in _TRAINING:  # the class archive's training run ends before pytest does
        try:
            training.wait(timeout=600)
        except subprocess.TimeoutExpired:
            os.killpg(training.pid, signal.SIGKILL)
    shared = os.environ.get(_SHARED_CONNECT)
    if shared and _controller_of_workers(config):
        from tests.harness.connect import stop_shared_connect_server

        stop_shared_connect_server(Path(shared))
        shutil.rmtree(shared, ignore_errors=True)
