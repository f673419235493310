"""The compact DAG layout (``layout="compact"``: ``begin >> process >> commit``) end to end, in
the modes it runs in: ``spark-submit`` processing with SQLite state, and Spark Connect
processing with PostgreSQL state through the state connection (worker commit, then a Spark
commit through the Connect server). Real ``airflow dags test``, ZooKeeper, spark-submit,
Connect server and PostgreSQL.

Each mode: consecutive runs give exact counts; a failed process is retried with the same
txid; a replay of a committed txid changes nothing; the commit task did the success step (old
metadata rotated away).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.e2e.test_dag_runs import (
    PG_DAG,
    Deployment,
    PostgresDeployment,
    _connect_to,
    expected,
)
from tests.harness.connect import running_connect_server

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

COMPACT_DAG = """
from datetime import timedelta
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.topologies:e2e_word_count",
    dag_id="e2e_compact",
    spark_conn_id="spark_local",
    layout="compact",
    keep_txids=1,
    retries=1,
    retry_delay=timedelta(seconds=1),
)
"""


def _attempt_txids(deployment: Deployment) -> set[int]:
    """The txids whose attempt ZooKeeper still holds for the deployment's topology (the
    success step deletes those older than ``keep_txids``)."""
    zk = KazooClient(hosts=os.environ["TRIDENT_ZK_HOSTS"])
    zk.start(timeout=10)
    try:
        base = f"/trident_e2e/{deployment.topology}/coordinator/attempts"
        return {int(txid) for txid in zk.get_children(base) if txid.isdigit()}
    finally:
        zk.stop()
        zk.close()


def _assert_compact(result: object) -> None:
    states = result.task_states  # type: ignore[attr-defined]
    assert set(states) == {"batch.begin", "batch.process", "batch.commit"}, states


@pytest.fixture(scope="module")
def compact(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    hosts = os.environ.get("TRIDENT_ZK_HOSTS")
    if not hosts:
        pytest.skip("TRIDENT_ZK_HOSTS unset: run `bash scripts/test.sh`")
    root = tmp_path_factory.mktemp("e2e_compact")
    return Deployment(root, hosts, dag_id="e2e_compact", dag_file=COMPACT_DAG)


@pytest.mark.long  # the compact layout stays in the test command: Connect mode, PostgreSQL
def test_compact_layout_submit_mode_sqlite(compact: Deployment, tmp_path: Path) -> None:
    # Given the compact layout, spark-submit processing and SQLite state
    result = compact.run()
    assert result.ok, result.describe()
    _assert_compact(result)
    assert compact.counts() == expected(1)
    # When txid 2's process fails once, Then its retry keeps txid 2 and counts stay exact
    marker = tmp_path / "failed-once"
    result = compact.run(env={"TRIDENT_FAIL_ONCE_MARKER": str(marker)})
    assert marker.exists()
    assert result.ok, result.describe()
    _assert_compact(result)
    assert compact.counts() == expected(2)
    assert max(compact.txids()) == 2
    # and the commit task did the success step: attempts older than keep_txids are gone
    output = result.process.stdout + result.process.stderr
    assert "txid 2 success:" in output
    assert _attempt_txids(compact) == {2}
    # When a committed txid is replayed, Then nothing changes
    before = compact.counts()
    replay = compact.run(conf={"txid": 1})
    assert replay.ok, replay.describe()
    assert compact.counts() == before
    assert "replays txid 1: no wait for new data" in replay.process.stdout + replay.process.stderr


SERVER_TOPOLOGY = f"e2e_{uuid.uuid4().hex[:8]}"
"""The topology name in the Connect server's environment: a Spark commit's executors load the
topology by reference there and write the state that name makes."""


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not os.environ.get("TRIDENT_ZK_HOSTS"):
        pytest.skip("TRIDENT_ZK_HOSTS unset: run `bash scripts/test.sh`")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRIDENT_TEST_TOPOLOGY", SERVER_TOPOLOGY)
        with running_connect_server(tmp_path_factory.mktemp("compact_connect")) as url:
            yield url


def test_compact_layout_connect_mode_postgres_spark_commit(
    tmp_path_factory: pytest.TempPathFactory, connect_server: str
) -> None:
    hosts, pg_url = os.environ.get("TRIDENT_ZK_HOSTS"), os.environ.get("TRIDENT_PG_URL")
    if not hosts or not pg_url:
        pytest.skip("TRIDENT_ZK_HOSTS / TRIDENT_PG_URL unset: run `bash scripts/test.sh`")
    # Given the compact layout, Connect processing, a Spark commit through the Connect server
    # and PostgreSQL state reached through the state connection
    dag_id = "e2e_compact_connect"
    extra = (
        '\n    process_mode="connect",\n    spark_connect_conn_id="e2e_connect",'
        '\n    commit_mode="spark",\n    layout="compact",\n    keep_txids=1,'
    )
    deployment = PostgresDeployment(
        tmp_path_factory.mktemp(dag_id), hosts, pg_url,
        dag_id=dag_id, dag_file=PG_DAG.format(dag_id=dag_id, extra=extra),
    )  # fmt: skip
    _connect_to(deployment, connect_server)
    deployment.topology = deployment.env["TRIDENT_TEST_TOPOLOGY"] = SERVER_TOPOLOGY
    for i in (1, 2):
        result = deployment.run()
        assert result.ok, result.describe()
        _assert_compact(result)
        output = result.process.stdout + result.process.stderr
        assert "spark-submit" not in output
        assert f"committing txid {i} of " in output  # on Spark, through the Connect server
        assert f"txid {i} success:" in output
        assert deployment.counts() == expected(i)
    assert _attempt_txids(deployment) == {2}  # the success steps rotated txid 1's away
    # When a committed txid is replayed, Then nothing changes
    before = deployment.counts()
    replay = deployment.run(conf={"txid": 1})
    assert replay.ok, replay.describe()
    assert deployment.counts() == before
    assert deployment.fallback_tables() == []
