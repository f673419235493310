"""Operating a topology as an Airflow user: a batch's metrics reach a StatsD listener through
Airflow's ``Stats``, a committed txid is an asset event, and a processing job that fails says
why in the task's own failure. Real ``airflow dags test`` runs with real ``spark-submit``."""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from tests.e2e.test_dag_runs import Deployment, expected
from tests.harness.topologies import POISON_WORD_ENV

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


class StatsdListener:
    """A UDP socket where Airflow's StatsD client sends its datagrams."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.setblocking(False)
        self.port = self.socket.getsockname()[1]

    def received(self) -> list[str]:
        """Every metric line received since the last call."""
        lines: list[str] = []
        while True:
            try:
                data = self.socket.recv(65536)
            except BlockingIOError:
                return lines
            lines += data.decode().splitlines()


@pytest.fixture(scope="module")
def statsd() -> Iterator[StatsdListener]:
    listener = StatsdListener()
    yield listener
    listener.socket.close()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, statsd: StatsdListener) -> Deployment:
    hosts = os.environ.get("TRIDENT_ZK_HOSTS")
    if not hosts:
        pytest.skip("TRIDENT_ZK_HOSTS unset: run `bash scripts/test.sh`")
    deployment = Deployment(tmp_path_factory.mktemp("e2e_ops"), hosts)
    deployment.env.update({
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
        "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
    })  # fmt: skip
    return deployment


def metrics(lines: list[str], prefix: str) -> dict[str, list[str]]:
    """``name -> [value|type, ...]`` of the lines whose name starts with ``prefix``."""
    found: dict[str, list[str]] = {}
    for line in lines:
        name, _, value = line.partition(":")
        if name.startswith(prefix):
            found.setdefault(name, []).append(value)
    return found


def asset_events(home: Path) -> list[dict[str, object]]:
    with closing(sqlite3.connect(f"file:{home / 'airflow.db'}?mode=ro", uri=True)) as db:
        rows = db.execute(
            "SELECT a.uri, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "ORDER BY e.id"
        ).fetchall()
    return [{"uri": uri, **json.loads(extra)} for uri, extra in rows]


def task_failure(output: str) -> str:
    """The exception a task failed with last: the first line after the last frame (``  File
    ...``) of the traceback that follows Airflow's last ``Task failed with exception``."""
    lines = output.rsplit("Task failed with exception", 1)[-1].splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith('  File "')]
    after = lines[frames[-1] + 1 :] if frames else []
    return next((line for line in after if not line.startswith("    ")), "no traceback")


@pytest.mark.long  # asset events under a scheduler: test_first_commits_scheduler.py
def test_a_committed_batch_emits_its_metrics_and_one_asset_event(
    deployment: Deployment, statsd: StatsdListener
) -> None:
    # Given Airflow configured to send metrics to a StatsD listener
    statsd.received()
    # When one batch runs
    result = deployment.run()
    assert result.ok, result.describe()
    # Then the process and commit tasks sent the batch's figures under their documented names
    topology = deployment.topology
    sent = metrics(statsd.received(), "airflow.trident.")
    words = len(expected(1))
    assert sent[f"airflow.trident.process.records_in.{topology}"] == ["4|c"]
    assert sent[f"airflow.trident.commit.records_in.{topology}"] == ["4|c"]
    assert sent[f"airflow.trident.commit.keys_written.{topology}"] == [f"{words}|c"]
    assert sent[f"airflow.trident.commit.keys_written.{topology}.counts"] == [f"{words}|c"]
    assert sent[f"airflow.trident.commit.txid.{topology}"] == ["1|g"]
    for timer in ("process.duration", "commit.duration", "commit.wait"):
        (value,) = sent[f"airflow.trident.{timer}.{topology}"]
        assert value.endswith("|ms")
        assert float(value.split("|")[0]) >= 0
    # and the commit added one event of the topology's asset, naming topology and txid
    events = asset_events(deployment.home.path)
    assert [(e["uri"], e["topology"], e["txid"]) for e in events] == [
        (f"trident://{topology}/", topology, 1)
    ]


@pytest.mark.long  # with its module's first test
def test_a_replayed_committed_txid_emits_no_commit_metrics_and_no_asset_event(
    deployment: Deployment, statsd: StatsdListener
) -> None:
    # Given txid 1 committed (previous test)
    statsd.received()
    # When txid 1 is replayed
    result = deployment.run(conf={"txid": 1})
    assert result.ok, result.describe()
    # Then nothing is counted twice: no commit metrics, no second asset event
    assert metrics(statsd.received(), "airflow.trident.commit.") == {}
    assert [e["txid"] for e in asset_events(deployment.home.path)] == [1]


@pytest.mark.long  # the job's own error stays in the test command: tests/operators, tests/runtime
def test_a_failing_processing_job_fails_its_task_with_the_jobs_own_error(
    deployment: Deployment,
) -> None:
    # Given a topology whose filter raises on the word "apples"
    env = {POISON_WORD_ENV: "apples"}
    # When a batch runs through spark-submit
    result = deployment.run(env=env)
    # Then the process task failed with the job's error: step, txid and record, as its last
    # ERROR line, not behind spark-submit's exit code
    assert result.task_states["batch.process"] == "failed", result.describe()
    output = result.process.stdout + result.process.stderr
    failure = task_failure(output)
    assert re.fullmatch(
        r"airflow_trident\.errors\.BatchFailedError: step 'RejectWord' failed in batch txid 2 on "
        r"record \(.*'apples'\): ValueError: the word 'apples' is not allowed; .*"
        r"\(the Spark job of the process step of txid 2 failed\)",
        failure,
    ), failure
