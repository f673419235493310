"""A Trident DAG run end to end: real Airflow task execution (``airflow dags test``), real
``spark-submit`` (Spark local), real ZooKeeper, SQLite state. Slow: ~15 s per run."""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.harness.airflow import AirflowHome, prepare_airflow_home, run_dag_test
from tests.harness.commit_faults import commit_fault_marker
from tests.harness.connect import running_connect_server
from tests.harness.topologies import E2E_DATA, INLINED_ENV
from tests.harness.topologies import e2e_expected_counts as expected

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

DAG_ID = "e2e_word_count"
DAG_FILE = """
from datetime import timedelta
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.topologies:e2e_word_count",
    dag_id="e2e_word_count",
    spark_conn_id="spark_local",
    retries=1,
    retry_delay=timedelta(seconds=1),
)
"""


SPARK_COMMIT_DAG_ID = "e2e_word_count_spark_commit"
SPARK_COMMIT_DAG_FILE = """
from datetime import timedelta
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.topologies:e2e_word_count",
    dag_id="e2e_word_count_spark_commit",
    spark_conn_id="spark_local",
    state_conn_id="e2e_state_pg",
    commit_mode="spark",
    retries=1,
    retry_delay=timedelta(seconds=1),
)
"""


class Deployment:
    """An isolated Airflow home, DAG folder, topology name, state and staging."""

    def __init__(
        self, root: Path, zk_hosts: str, *, dag_id: str = DAG_ID, dag_file: str = DAG_FILE
    ) -> None:
        self.root = root
        self.dag_id = dag_id
        self.topology = f"e2e_{uuid.uuid4().hex[:8]}"
        dags = root / "dags"
        dags.mkdir()
        (dags / f"{dag_id}.py").write_text(dag_file)
        host, _, port = zk_hosts.partition(":")
        self.state_db = root / "state.db"
        self.env = {
            "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT": json.dumps({
                "conn_type": "trident_zookeeper", "host": host, "port": int(port),
                "extra": {"root": "/trident_e2e"},
            }),
            "TRIDENT_STATE_URL": f"sqlite:///{self.state_db}",
            "TRIDENT_STAGING_ROOT": str(root / "staging"),
            "TRIDENT_TEST_TOPOLOGY": self.topology,
            "SPARK_LOCAL_IP": "127.0.0.1",
        }  # fmt: skip
        self.home: AirflowHome = prepare_airflow_home(root / "airflow", dags_folder=dags)

    def run(self, **kwargs: Any) -> Any:
        env = {**self.env, **kwargs.pop("env", {})}
        result = run_dag_test(self.dag_id, home=self.home, extra_env=env, timeout_s=300, **kwargs)
        assert not result.timed_out, result.describe()
        return result

    def counts(self) -> dict[str, int]:
        with sqlite3.connect(self.state_db) as db:
            rows = db.execute(f'SELECT word, val FROM "{self.topology}"').fetchall()
        return dict(rows)

    def txids(self) -> tuple[int, ...]:
        """The txids the state's keys hold (none before the first commit made the table)."""
        with sqlite3.connect(self.state_db) as db:
            try:
                rows = db.execute(f'SELECT DISTINCT txid FROM "{self.topology}"').fetchall()
            except sqlite3.OperationalError:  # no such table
                return ()
        return tuple(r[0] for r in rows)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    hosts = os.environ.get("TRIDENT_ZK_HOSTS")
    if not hosts:
        pytest.skip("TRIDENT_ZK_HOSTS unset: run `bash scripts/test.sh`")
    return Deployment(tmp_path_factory.mktemp("e2e"), hosts)


INLINED_CALLERS = {"<listcomp>", "is_keep_inlined"}  # the comprehension (Python 3.11, 3.12+)


@pytest.mark.timeout(600)  # five DAG runs with a spark-submit each: 207-245 s on 2 idle cores
@pytest.mark.long  # the test command's DAG runs of spark-submit: the real-scheduler fault run
def test_five_consecutive_runs_give_exact_counts(deployment: Deployment, tmp_path: Path) -> None:
    marker = tmp_path / "callers"
    for i in range(1, 6):
        # runs 4 and 5 add a function and a filter that Spark's workers inline (no count
        # changes): the spark-submit driver reads their source and ships it
        result = deployment.run(env={INLINED_ENV: str(marker)} if i > 3 else {})
        assert result.ok, result.describe()
        assert deployment.counts() == expected(i)
    assert INLINED_CALLERS & set(marker.read_text().split()), marker.read_text()


@pytest.mark.long  # the test command's spark-submit runs: the fault run's
def test_failed_process_retried_keeps_its_txid_and_exact_counts(
    deployment: Deployment, tmp_path: Path
) -> None:
    # the next txid: 6 after the five consecutive runs (their own tier), else 1
    txid = max(deployment.txids(), default=0) + 1
    marker = tmp_path / "failed-once"
    result = deployment.run(env={"TRIDENT_FAIL_ONCE_MARKER": str(marker)})
    assert marker.exists()  # the first process attempt failed ...
    assert result.ok, result.describe()  # ... and its retry succeeded
    assert deployment.counts() == expected(txid)
    assert max(deployment.txids()) == txid


@pytest.mark.long  # replays stay in the test command: the express and compact layouts'
def test_replaying_a_committed_txid_changes_nothing(deployment: Deployment) -> None:
    before = deployment.counts()
    result = deployment.run(conf={"txid": min(3, max(deployment.txids()))})
    assert result.ok, result.describe()
    assert deployment.counts() == before


class PostgresDeployment(Deployment):
    """A DAG whose state is in PostgreSQL, reached only through the Airflow connection
    ``e2e_state_pg`` (the URL travels to spark-submit and its executors as a secret). Nothing
    points at a local database: a state made anywhere but the connection's lands in the
    fallback SQLite file under ``TRIDENT_HOME``, which the tests check stays without it."""

    def __init__(
        self,
        root: Path,
        zk_hosts: str,
        pg_url: str,
        *,
        dag_id: str = SPARK_COMMIT_DAG_ID,
        dag_file: str = SPARK_COMMIT_DAG_FILE,
    ) -> None:
        super().__init__(root, zk_hosts, dag_id=dag_id, dag_file=dag_file)
        url = sa.make_url(pg_url)
        self.pg_url = pg_url
        del self.env["TRIDENT_STATE_URL"]
        self.env["TRIDENT_HOME"] = str(root / "trident_home")
        self.env["AIRFLOW_CONN_E2E_STATE_PG"] = json.dumps({
            "conn_type": "postgres", "host": url.host, "port": url.port, "login": url.username,
            "password": url.password, "schema": url.database,
        })  # fmt: skip

    def fallback_tables(self) -> list[str]:
        """Tables of this topology in the fallback SQLite database (there must be none)."""
        fallback = self.root / "trident_home" / "state.db"
        if not fallback.exists():
            return []
        with sqlite3.connect(fallback) as db:
            names = [r[0] for r in db.execute("SELECT name FROM sqlite_master")]
        return [n for n in names if self.topology in n]

    def counts(self) -> dict[str, int]:
        engine = sa.create_engine(self.pg_url)
        with engine.connect() as conn:
            rows = conn.execute(sa.text(f'SELECT word, val FROM "{self.topology}"')).all()
        engine.dispose()
        return {r[0]: int(r[1]) for r in rows}


@pytest.fixture(scope="module")
def pg_deployment(tmp_path_factory: pytest.TempPathFactory) -> PostgresDeployment:
    hosts, pg_url = os.environ.get("TRIDENT_ZK_HOSTS"), os.environ.get("TRIDENT_PG_URL")
    if not hosts or not pg_url:
        pytest.skip("TRIDENT_ZK_HOSTS / TRIDENT_PG_URL unset: run `bash scripts/test.sh`")
    return PostgresDeployment(tmp_path_factory.mktemp("e2e_pg"), hosts, pg_url)


@pytest.mark.long  # Spark commit stays in the test command: Connect mode, compact layout
def test_spark_commit_runs_give_exact_counts_and_a_replay_changes_nothing(
    pg_deployment: PostgresDeployment,
) -> None:
    for i in (1, 2, 3):
        result = pg_deployment.run()
        assert result.ok, result.describe()
        assert pg_deployment.counts() == expected(i)
    # each commit ran as a Spark job: its driver wrote the summary beside the staged batch
    for txid in (1, 2, 3):
        report = json.loads(
            (
                pg_deployment.root / "staging" / pg_deployment.topology / str(txid) / "_commit.json"
            ).read_text()
        )
        batch_words = {w for rows in E2E_DATA.values()
                       for (s,) in rows[2 * txid - 2 : 2 * txid] for w in s.split()}  # fmt: skip
        assert report["applied"] is True
        assert report["keys_written"] == {"counts": len(batch_words)}
    before = pg_deployment.counts()
    replay = pg_deployment.run(conf={"txid": 2})
    assert replay.ok, replay.describe()
    assert pg_deployment.counts() == before
    assert pg_deployment.fallback_tables() == []


PG_DAG = """
from datetime import timedelta
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.topologies:e2e_word_count",
    dag_id="{dag_id}",
    spark_conn_id="spark_local",
    state_conn_id="e2e_state_pg",
    retries=1,
    retry_delay=timedelta(seconds=1),{extra}
)
"""


@pytest.fixture(scope="module")
def pg_worker_deployment(tmp_path_factory: pytest.TempPathFactory) -> PostgresDeployment:
    hosts, pg_url = os.environ.get("TRIDENT_ZK_HOSTS"), os.environ.get("TRIDENT_PG_URL")
    if not hosts or not pg_url:
        pytest.skip("TRIDENT_ZK_HOSTS / TRIDENT_PG_URL unset: run `bash scripts/test.sh`")
    dag_id = "e2e_word_count_pg_worker"
    return PostgresDeployment(
        tmp_path_factory.mktemp("e2e_pg_worker"), hosts, pg_url,
        dag_id=dag_id, dag_file=PG_DAG.format(dag_id=dag_id, extra=""),
    )  # fmt: skip


@pytest.mark.long  # state_conn_id stays in the test command: the compact layout's PostgreSQL state
def test_worker_commit_writes_state_through_the_state_connection(
    pg_worker_deployment: PostgresDeployment,
) -> None:
    # Given a DAG with state_conn_id (PostgreSQL) and the default worker commit
    for i in (1, 2):
        result = pg_worker_deployment.run()
        assert result.ok, result.describe()
        # Then the counts are in the connection's database, not in a local SQLite file
        assert pg_worker_deployment.counts() == expected(i)
    assert pg_worker_deployment.fallback_tables() == []
    before = pg_worker_deployment.counts()
    assert pg_worker_deployment.run(conf={"txid": 1}).ok
    assert pg_worker_deployment.counts() == before
    # and DRPC, asked through the same connection, answers from it
    from airflow_trident.hooks.trident import TridentHook

    env = {k: v for k, v in pg_worker_deployment.env.items() if k.startswith("AIRFLOW_CONN_")}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        mp.setenv("TRIDENT_TEST_TOPOLOGY", pg_worker_deployment.topology)
        mp.delenv("TRIDENT_STATE_URL", raising=False)
        hook = TridentHook(state_conn_id="e2e_state_pg")
        answer = hook.drpc("tests.harness.topologies:e2e_word_count", "counts", "the cow")
    assert answer == [("the", before["the"]), ("cow", before["cow"])]


CONNECT_DAG_ID = "e2e_word_count_connect"
CONNECT_DAG_FILE = """
from datetime import timedelta
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.topologies:e2e_word_count",
    dag_id="e2e_word_count_connect",
    process_mode="connect",
    spark_connect_conn_id="e2e_connect",
    retries=1,
    retry_delay=timedelta(seconds=1),
)
"""


COMMIT_FAULT_TOPOLOGY = "tests.harness.commit_faults:commit_fault_word_count"
CONNECT_TOPOLOGY = f"e2e_{uuid.uuid4().hex[:8]}"
"""The topology name in the Connect server's environment: its executors load the topology by
reference there (a Spark commit's tasks write the state that name makes)."""


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server for this module's Connect-mode DAGs; its ``sc://`` URL."""
    if not os.environ.get("TRIDENT_ZK_HOSTS"):
        pytest.skip("TRIDENT_ZK_HOSTS unset: run `bash scripts/test.sh`")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRIDENT_TEST_TOPOLOGY", CONNECT_TOPOLOGY)
        # several staged partitions even for a small batch: several commit tasks
        conf = {"spark.sql.adaptive.coalescePartitions.enabled": "false"}
        with running_connect_server(tmp_path_factory.mktemp("connect_server"), conf=conf) as url:
            yield url


def _connect_to(deployment: Deployment, url: str) -> Deployment:
    host, _, port = url.rpartition(":")
    deployment.env["AIRFLOW_CONN_E2E_CONNECT"] = json.dumps(
        {"conn_type": "spark_connect", "host": host, "port": int(port)}
    )
    return deployment


@pytest.fixture(scope="module")
def connect_deployment(tmp_path_factory: pytest.TempPathFactory, connect_server: str) -> Deployment:
    hosts = os.environ["TRIDENT_ZK_HOSTS"]
    root = tmp_path_factory.mktemp("e2e_connect")
    deployment = Deployment(root, hosts, dag_id=CONNECT_DAG_ID, dag_file=CONNECT_DAG_FILE)
    return _connect_to(deployment, connect_server)


@pytest.mark.long  # Connect processing stays in the test command: compact and express layouts
def test_connect_process_mode_runs_give_exact_counts_and_a_replay_changes_nothing(
    connect_deployment: Deployment, tmp_path: Path
) -> None:
    marker = tmp_path / "callers"
    for i in (1, 2, 3):
        # runs 2 and 3 add a function and a filter that the Connect server's workers inline
        result = connect_deployment.run(env={INLINED_ENV: str(marker)} if i > 1 else {})
        assert result.ok, result.describe()
        assert connect_deployment.counts() == expected(i)
    assert INLINED_CALLERS & set(marker.read_text().split()), marker.read_text()
    # no spark-submit ran: the process task talked to the Connect server
    assert "spark-submit" not in result.process.stdout + result.process.stderr
    assert "on Spark Connect" in result.process.stdout + result.process.stderr
    before = connect_deployment.counts()
    replay = connect_deployment.run(conf={"txid": 2})
    assert replay.ok, replay.describe()
    assert connect_deployment.counts() == before


@pytest.mark.long  # the Spark commit on Connect stays in the test command: compact layout
def test_connect_process_and_spark_commit_use_the_state_connection(
    tmp_path_factory: pytest.TempPathFactory, connect_server: str
) -> None:
    """Spark Connect processing + a Spark commit through the same server (no spark-submit),
    state through ``state_conn_id`` only; a commit that failed part-way and is retried (a
    cleared commit) applies every partition once."""
    hosts, pg_url = os.environ.get("TRIDENT_ZK_HOSTS"), os.environ.get("TRIDENT_PG_URL")
    if not hosts or not pg_url:
        pytest.skip("TRIDENT_ZK_HOSTS / TRIDENT_PG_URL unset: run `bash scripts/test.sh`")
    dag_id = "e2e_word_count_pg_connect"
    extra = (
        '\n    process_mode="connect",\n    spark_connect_conn_id="e2e_connect",'
        '\n    commit_mode="spark",'
    )
    dag_file = PG_DAG.format(dag_id=dag_id, extra=extra).replace(
        "tests.harness.topologies:e2e_word_count", COMMIT_FAULT_TOPOLOGY
    )
    deployment = PostgresDeployment(
        tmp_path_factory.mktemp("e2e_pg_connect"), hosts, pg_url, dag_id=dag_id, dag_file=dag_file
    )
    _connect_to(deployment, connect_server)
    deployment.topology = deployment.env["TRIDENT_TEST_TOPOLOGY"] = CONNECT_TOPOLOGY
    marker = commit_fault_marker(CONNECT_TOPOLOGY)
    marker.unlink(missing_ok=True)
    # Given txid 1 committed through the Connect server
    first = deployment.run()
    assert first.ok, first.describe()
    assert deployment.counts() == expected(1)
    # When txid 2's Spark commit fails on partition 1 (others may have applied theirs) and the
    # commit task runs again (Airflow's retry, as a clear would)
    marker.touch()
    result = deployment.run()
    # Then it commits exactly: each partition applied once, the state equals the reference
    assert result.ok, result.describe()
    output = result.process.stdout + result.process.stderr
    assert not marker.exists()  # the failure happened, in a Spark task
    assert "partition 1 is unreachable" in output
    assert deployment.counts() == expected(2)
    assert "on Spark Connect" in output
    # and the commit ran through the Connect server: no spark-submit, its summary written
    assert "spark-submit" not in output
    assert f"committing txid 2 of {COMMIT_FAULT_TOPOLOGY} on Spark Connect" in output
    summary = deployment.root / "staging" / deployment.topology / "2" / "_commit.json"
    assert json.loads(summary.read_text())["applied"] is True
    assert deployment.fallback_tables() == []
    before = deployment.counts()
    # a commit run again for a committed txid (a replay) applies nothing
    replay = deployment.run(conf={"txid": 2})
    assert replay.ok, replay.describe()
    assert deployment.counts() == before
    assert "txid 2 was already committed" in replay.process.stdout + replay.process.stderr
