"""``airflow-trident status DAG_ID [--json]``, run as a user runs it: a child process in an
isolated Airflow home whose DAGs folder holds a Trident DAG, after real batches of that DAG's
topology (committed ones, one processed, one begun) in the real ZooKeeper and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from airflow_trident import __version__
from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from tests.harness.airflow import AirflowHome, prepare_airflow_home, run_airflow
from tests.harness.status import (
    STATUS_DAG_FILE,
    run_batches,
    status_env,
    topology_steps,
)

pytestmark = pytest.mark.integration

DAG_ID = "trident_status_cli"


@dataclass(frozen=True)
class StatusHome:
    home: AirflowHome
    env: dict[str, str]
    topology: str
    pg_url: str

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = ["timeout", "-s", "KILL", "120", sys.executable, "-m", "airflow_trident.cli"]
        return subprocess.run(
            [*command, "status", *args], env=self.home.env(self.env), cwd=self.home.path,
            capture_output=True, text=True, check=False,
        )  # fmt: skip


@pytest.fixture(scope="module")
def status_home(
    tmp_path_factory: pytest.TempPathFactory, zk_hosts: str, pg_url: str
) -> Iterator[StatusHome]:
    root = tmp_path_factory.mktemp("status_cli")
    (root / "dags").mkdir()
    (root / "dags" / "status_dags.py").write_text(STATUS_DAG_FILE)
    home = prepare_airflow_home(root / "airflow", dags_folder=root / "dags", migrate=False)
    zk = ZkConfig(hosts=zk_hosts, root="/trident_test_status", timeout=5.0)
    topology = f"status_{uuid.uuid4().hex[:10]}"
    env = status_env(dag_id=DAG_ID, topology=topology, zk=zk, state_url=pg_url,
                     staging_root=str(root / "staging"))  # fmt: skip
    with topology_steps(env, zk, pg_url) as steps:
        steps.store.delete_all()
        run_batches(steps, committed=3, processed=1, begun=1)
    yield StatusHome(home, env, topology, pg_url)
    client = connect(zk)
    CoordinatorStore(client, CoordinatorPaths(zk.root, topology)).delete_all()
    client.stop()
    with sa.create_engine(pg_url).begin() as conn:
        conn.execute(sa.text(f'DROP TABLE IF EXISTS "{topology}"'))


def test_status_prints_txids_batches_in_flight_commits_and_lag(status_home: StatusHome) -> None:
    # When a user asks for the DAG's status
    done = status_home.run(DAG_ID)
    # Then it exits 0 and prints the report on stdout
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == (f"topology {status_home.topology} (DAG {DAG_ID}): committed txid 3, "
                        f"allocated txid 5, 2 batches in flight")  # fmt: skip
    assert any(line.startswith("  txid 4  attempt 1  processed  since ") for line in lines)
    assert any(line.startswith("  txid 5  attempt -  begun  since ") and line.endswith(
        "run run_5") for line in lines)  # fmt: skip
    commits = [line for line in lines if "records in" in line]
    assert [c.split()[1] for c in commits] == ["3", "2", "1"]  # newest first
    assert all("records in 4  keys written counts=" in c for c in commits)
    assert "  sentences/p0: 12 after txid 4" in lines
    assert "  sentences/p1: 12 after txid 4" in lines


def test_status_json_matches_the_ledger(status_home: StatusHome) -> None:
    # When the status is asked for as JSON
    done = status_home.run(DAG_ID, "--json")
    # Then stdout is only the JSON document, and its commits are the ledger's rows
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)
    rows = CommitLedger(status_home.pg_url).rows(status_home.topology)
    assert [(c["txid"], c["attempt_id"], c["records_in"], c["keys_written"])
            for c in data["commits"]] == [
        (r["txid"], r["attempt_id"], r["records_in"], json.loads(r["keys_written"])) for r in rows
    ]  # fmt: skip
    assert (data["committed_txid"], data["allocated_txid"]) == (3, 5)
    assert [(b["txid"], b["phase"]) for b in data["in_flight"]] == [(4, "processed"), (5, "begun")]
    assert all(c["process_seconds"] is not None and c["commit_seconds"] is not None
               for c in data["commits"])  # fmt: skip


def test_airflow_trident_status_is_the_same_command(status_home: StatusHome) -> None:
    # Given the provider's `cli` entry (get_provider_info), When a user runs the command
    # through Airflow's own CLI, in the same home
    done = run_airflow(status_home.home, "trident", "status", DAG_ID, "--json", timeout_s=120,
                       extra_env=status_home.env)  # fmt: skip
    # Then it prints the same report as airflow-trident, with the provider's version beside it
    assert done.returncode == 0, done.stderr[-3000:]
    alias = status_home.run(DAG_ID, "--json")
    got, expected = json.loads(done.stdout), json.loads(alias.stdout)
    assert {**got, "collected_at": None} == {**expected, "collected_at": None}
    version = run_airflow(status_home.home, "trident", "version", timeout_s=120)
    assert version.stdout.strip() == __version__, version.stderr[-3000:]
    command = [sys.executable, "-m", "airflow_trident.cli", "--version"]
    alias_version = subprocess.run(command, capture_output=True, text=True, check=False)
    assert alias_version.stdout.strip() == f"airflow-trident {__version__}"


def test_a_missing_connection_is_one_line_and_exit_2(status_home: StatusHome) -> None:
    # When the DAG's ZooKeeper connection is not defined
    done = status_home.run("trident_status_no_connection")
    # Then the command exits 2 with one line naming it and a hint, without a traceback
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("airflow-trident:")]
    assert len(errors) == 1, done.stderr[-3000:]
    assert "trident_status_undefined" in errors[0]
    assert "Hint:" in errors[0]
    assert done.stdout == ""


def test_an_unknown_dag_is_refused_with_a_hint() -> None:
    # Given a DAG id neither the metadata database nor the DAGs folder knows
    from airflow_trident.status import dag_topology

    # When its topology is looked up, Then the error names it and says where DAGs are read
    with pytest.raises(LookupError, match=r"DAG 'no_such_dag' is not in the DAGs folder\. Hint"):
        dag_topology("no_such_dag")


def test_connections_stored_in_the_metadata_database_are_found(
    status_home: StatusHome, tmp_path: Path
) -> None:
    # Given a home whose connections live in its metadata database only (as the main job and
    # the UI leave them), no AIRFLOW_CONN_* variables
    from tests.harness.ui import store_connections

    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "status_dags.py").write_text(STATUS_DAG_FILE)
    home = prepare_airflow_home(tmp_path / "airflow", dags_folder=tmp_path / "dags")
    prefix = "AIRFLOW_CONN_"
    stored = {k[len(prefix):].lower(): json.loads(v)
              for k, v in status_home.env.items() if k.startswith(prefix)}  # fmt: skip
    store_connections(home, stored)
    env = {k: v for k, v in status_home.env.items() if not k.startswith(prefix)}
    command = ["timeout", "-s", "KILL", "120", sys.executable, "-m", "airflow_trident.cli"]
    # When a user asks for the status
    done = subprocess.run(
        [*command, "status", DAG_ID], env=home.env(env), cwd=home.path,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    # Then the stored connections are used (Airflow 3.3 reads only AIRFLOW_CONN_* outside a
    # task unless told it runs beside the metadata database)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"topology {status_home.topology} (DAG {DAG_ID}): committed")


def test_a_committed_txid_names_the_run_that_committed_it_and_its_replay(
    tmp_path: Path, zk_hosts: str, pg_url: str
) -> None:
    """A replay of a committed txid binds a later run: the row still names the committing run
    (from the ledger), the replay is shown as a replay, and the batch keeps its process time."""
    from airflow_trident.batch.status import StatusCollector
    from airflow_trident.plugins.status_page import render_page

    zk = ZkConfig(hosts=zk_hosts, root="/trident_test_status", timeout=5.0)
    topology = f"status_replay_{uuid.uuid4().hex[:10]}"
    env = status_env(dag_id=DAG_ID, topology=topology, zk=zk, state_url=pg_url,
                     staging_root=str(tmp_path / "staging"))  # fmt: skip
    engine = sa.create_engine(pg_url)
    try:
        with topology_steps(env, zk, pg_url) as steps:
            run_batches(steps, committed=2)
            steps.begin("manual__replay_of_1", 1)  # a replay asked for by dag_run.conf
            assert steps.commit(1)["applied"] is False
            status = StatusCollector(steps.store, ledger=CommitLedger(engine),
                                     topology=steps.topology, staging=steps.staging).collect()
            steps.store.delete_all()
        first = status.commits[0]
        assert (first.txid, first.run_id, first.replay_run_id) == (
            1, "run_1", "manual__replay_of_1")
        assert (status.commits[1].run_id, status.commits[1].replay_run_id) == ("run_2", None)
        assert "run run_1  replayed by manual__replay_of_1" in status.format_text()
        page = render_page(status)
        assert 'data-field="run_id">run_1<' in page
        assert "replayed by manual__replay_of_1" in page
        rows = CommitLedger(engine).recent(topology, 10)
        assert [r["run_id"] for r in rows] == ["run_1", "run_2"]
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP TABLE IF EXISTS "{topology}"'))
            conn.execute(sa.text("DELETE FROM trident_commit_ledger WHERE topology = :t"),
                         {"t": topology})  # fmt: skip
        engine.dispose()


@pytest.mark.parametrize("source", ["file_log", "table_sqlite", "table_postgres"])
def test_lag_of_a_file_log_and_a_table_source_while_records_wait(
    source: str, tmp_path: Path, zk_hosts: str, pg_url: str
) -> None:
    """After one batch, the records that landed since are the lag: files and bytes behind for
    the file log, rows beyond the mark for the table source (was: no spout tells its lag)."""
    from airflow_trident.batch.lifecycle import zookeeper_batch_steps
    from airflow_trident.batch.status import StatusCollector
    from airflow_trident.operation import Count
    from airflow_trident.plugins.status_page import render_page
    from airflow_trident.spout.database_table import DatabaseTableSpout
    from airflow_trident.spout.file_log import FileLogSpout
    from airflow_trident.state.sql import sql_state
    from airflow_trident.topology import TridentTopology

    name = f"status_lag_{uuid.uuid4().hex[:10]}"
    source_url = pg_url if source == "table_postgres" else f"sqlite:///{tmp_path / 'src.db'}"
    source_engine = sa.create_engine(source_url)
    table = f"{name}_src"

    def land(first: int, count: int) -> None:
        if source == "file_log":
            (tmp_path / "log" / "p0").mkdir(parents=True, exist_ok=True)
            lines = "".join(f'{{"word": "w{i}"}}\n' for i in range(first, first + count))
            (tmp_path / "log" / "p0" / f"{first:06d}.json").write_text(lines)
            return
        with source_engine.begin() as conn:
            conn.execute(sa.text(f'CREATE TABLE IF NOT EXISTS "{table}" (id BIGINT, word TEXT)'))
            for i in range(first, first + count):
                conn.execute(sa.text(f'INSERT INTO "{table}" VALUES (:i, :w)'),
                             {"i": i, "w": f"w{i}"})  # fmt: skip

    land(0, 3)
    spout = (
        FileLogSpout(tmp_path / "log", ["word"], max_files=1)
        if source == "file_log"
        else DatabaseTableSpout(source_url, table, ["word"], order_column="id",
                                max_rows_per_batch=3)
    )
    topology = TridentTopology(name)
    topology.new_stream("words", spout).group_by(["word"]).persistent_aggregate(
        sql_state(None, name, "transactional", key_fields=("word",), value_type="bigint"),
        Count(), ["count"], name="counts",
    )  # fmt: skip
    zk = ZkConfig(hosts=zk_hosts, root="/trident_test_status", timeout=5.0)
    client = connect(zk)
    engine = sa.create_engine(pg_url)
    try:
        steps = zookeeper_batch_steps(topology, client, root=zk.root,
                                      staging_root=str(tmp_path / "staging"), state_url=pg_url)
        steps.run_batch("run_1")
        land(3, 5)  # 80 records would wait the same way: these 5 wait
        land(8, 2)
        status = StatusCollector(steps.store, ledger=CommitLedger(engine), topology=topology,
                                 staging=steps.staging).collect()
        steps.store.delete_all()
    finally:
        client.stop()
        client.close()
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP TABLE IF EXISTS "{name}"'))
            conn.execute(sa.text("DELETE FROM trident_commit_ledger WHERE topology = :t"),
                         {"t": name})  # fmt: skip
        with source_engine.begin() as conn:
            conn.execute(sa.text(f'DROP TABLE IF EXISTS "{table}"'))
        engine.dispose()
        source_engine.dispose()
    partitions = [(g.partition, g.as_of_txid, g.pending, g.unit) for g in status.lag]
    if source == "file_log":
        size = sum(f.stat().st_size for f in (tmp_path / "log" / "p0").iterdir()) - len(
            "".join(f'{{"word": "w{i}"}}\n' for i in range(3)))
        assert partitions == [("p0", 1, 2, "files")]
        assert status.lag[0].detail == f"{size:,} bytes"
        assert f"words/p0: 2 files ({size:,} bytes) after txid 1" in status.format_text()
    else:
        assert partitions == [("all", 1, 7, "tuples")]
        assert "words/all: 7 after txid 1" in status.format_text()
    assert "no spout of this topology tells its lag" not in render_page(status)
