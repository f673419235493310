"""``airflow-trident backfill``: the runs it plans, and (integration) the runs it creates in a
real Airflow metadata database (SQLite) with their txids bound in the real ZooKeeper.

The integration tests run the command as a user does, in a child process of an isolated Airflow
home whose DAGs were serialized (``airflow dags reserialize``); executing the runs is
``tests/e2e/test_backfill.py``'s job.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from airflow_trident.cli import main, plan_backfill
from airflow_trident.coordination.client import ZkConfig
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import ConfigurationError
from tests.harness.airflow import AirflowHome, prepare_airflow_home, run_airflow

# -- the plan (no I/O) ----------------------------------------------------------------------------


def test_plan_names_replays_and_new_txids_by_their_txids_and_pins_each_in_conf() -> None:
    # Given txids 1..3 allocated When txids 2..5 are backfilled
    runs = plan_backfill(2, 5, allocated=3)
    # Then 2 and 3 are replays, 4 and 5 new, and every run's conf names its txid
    assert [(r.run_id, r.txid, r.new) for r in runs] == [
        ("trident_replay__txid_2", 2, False),
        ("trident_replay__txid_3", 3, False),
        ("trident_new__txid_4", 4, True),
        ("trident_new__txid_5", 5, True),
    ]
    assert [r.conf for r in runs] == [{"txid": t} for t in (2, 3, 4, 5)]


def test_plan_gives_a_repeated_range_new_distinct_run_ids() -> None:
    # Given runs of txids 1..2 exist already, txid 1 twice
    taken = {"trident_replay__txid_1", "trident_replay__txid_1__2", "trident_new__txid_2"}
    # When the range is planned again
    runs = plan_backfill(1, 2, allocated=2, taken=taken)
    # Then each run id is new, and says which earlier run it repeats
    assert [(r.run_id, r.txid, r.again) for r in runs] == [
        ("trident_replay__txid_1__3", 1, "trident_replay__txid_1"),
        ("trident_replay__txid_2", 2, None),
    ]


@pytest.mark.parametrize(
    ("from_txid", "to_txid", "allocated", "message"),
    [
        (6, 7, 4, r"txids 6..7 .* beyond the next txid, 5"),
        (0, 2, 4, r"txid range 0..2 .* starts below 1"),
        (3, 2, 4, r"txid range 3..2 .* empty"),
    ],
)
def test_plan_refuses_a_gap_or_an_empty_range(
    from_txid: int, to_txid: int, allocated: int, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        plan_backfill(from_txid, to_txid, allocated=allocated)


# -- the command against a real Airflow metadata database and ZooKeeper -----------------------

DAG_IDS = ("cli_repeat", "cli_gap", "cli_dry")
DAG_FILE = f"""
from airflow_trident.dag import trident_dag

for dag_id in {DAG_IDS!r}:
    globals()[dag_id] = trident_dag(
        "tests.harness.topologies:e2e_word_count", dag_id=dag_id,
        spark_conn_id="spark_local",
    )
"""


class Backfiller:
    """An Airflow home whose DAGs are in its metadata database, and the command run in it."""

    def __init__(self, home: AirflowHome, zk_config: ZkConfig, env: dict[str, str]) -> None:
        self.home = home
        self.zk_config = zk_config
        self.env = env

    def run(self, dag_id: str, topology: str, *args: str) -> subprocess.CompletedProcess[str]:
        """``airflow-trident backfill DAG_ID ARGS`` for the topology named ``topology``."""
        command = ["timeout", "-s", "KILL", "120", sys.executable, "-m", "airflow_trident.cli"]
        return subprocess.run(
            [*command, "backfill", dag_id, *args],
            env=self.home.env({**self.env, "TRIDENT_TEST_TOPOLOGY": topology}),
            cwd=self.home.path,
            capture_output=True,
            text=True,
            check=False,
        )

    def runs(self, dag_id: str) -> dict[str, dict[str, object]]:
        """run id -> conf of every run of ``dag_id`` in the metadata database."""
        with closing(sqlite3.connect(f"file:{self.home.metadata_db}?mode=ro", uri=True)) as db:
            rows = db.execute("SELECT run_id, conf FROM dag_run WHERE dag_id = ?", (dag_id,))
            return {run_id: _conf(conf) for run_id, conf in rows.fetchall()}


def _conf(value: object) -> dict[str, object]:
    if isinstance(value, bytes | str) and value:
        loaded = json.loads(value)
        return dict(loaded) if isinstance(loaded, dict) else {}
    return {}


@pytest.fixture(scope="module")
def backfiller(tmp_path_factory: pytest.TempPathFactory, zk_hosts: str) -> Backfiller:
    root = tmp_path_factory.mktemp("cli")
    dags = root / "dags"
    dags.mkdir()
    (dags / "cli_dags.py").write_text(DAG_FILE)
    host, _, port = zk_hosts.partition(":")
    config = ZkConfig(hosts=zk_hosts, root="/trident_test_cli", timeout=5.0)
    env = {
        "AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT": json.dumps({
            "conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
            "extra": {"root": config.root},
        }),
        "TRIDENT_STATE_URL": f"sqlite:///{root / 'state.db'}",
        "TRIDENT_STAGING_ROOT": str(root / "staging"),
    }  # fmt: skip
    home = prepare_airflow_home(root / "airflow", dags_folder=dags)
    done = run_airflow(home, "dags", "reserialize", timeout_s=120, extra_env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return Backfiller(home, config, env)


@pytest.fixture
def topology_store(
    backfiller: Backfiller, zk_client: KazooClient, unique_name: str
) -> Iterator[CoordinatorStore]:
    """The coordinator store of a fresh topology (named ``unique_name``) under the DAGs' root."""
    store = CoordinatorStore(zk_client, CoordinatorPaths(backfiller.zk_config.root, unique_name))
    yield store
    store.delete_all()


def _one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The command's error: exit 2, one line on stderr starting ``airflow-trident:``, no
    traceback (Airflow's own log lines, if any, are not the error)."""
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("airflow-trident:")]
    assert len(lines) == 1, done.stderr[-3000:]
    return lines[0]


@pytest.mark.integration
def test_backfill_twice_binds_new_txids_to_their_names_and_repeats_with_new_run_ids(
    backfiller: Backfiller, topology_store: CoordinatorStore, unique_name: str
) -> None:
    # Given txids 1..2 allocated by two earlier runs
    topology_store.runs.bind_run("scheduled__1")
    topology_store.runs.bind_run("scheduled__2")
    # When txids 1..4 are backfilled
    first = backfiller.run("cli_repeat", unique_name, "--from-txid", "1", "--to-txid", "4")
    # Then four runs exist, each pinned to its txid by conf
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    expected_first = {
        "trident_replay__txid_1": {"txid": 1},
        "trident_replay__txid_2": {"txid": 2},
        "trident_new__txid_3": {"txid": 3},
        "trident_new__txid_4": {"txid": 4},
    }
    assert backfiller.runs("cli_repeat") == expected_first
    # And the new txids were allocated and bound to the runs named after them, before any begin
    assert topology_store.runs.current_txid() == 4
    assert topology_store.runs.txid_for_run("trident_new__txid_3") == 3
    assert topology_store.runs.txid_for_run("trident_new__txid_4") == 4
    # When the same range is backfilled again
    second = backfiller.run("cli_repeat", unique_name, "--from-txid", "1", "--to-txid", "4")
    # Then it succeeds with four more, distinct runs replaying the same txids, and says so
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    assert backfiller.runs("cli_repeat") == {
        **expected_first,
        "trident_replay__txid_1__2": {"txid": 1},
        "trident_replay__txid_2__2": {"txid": 2},
        "trident_replay__txid_3": {"txid": 3},
        "trident_replay__txid_4": {"txid": 4},
    }
    assert "replays txid 1 again (trident_replay__txid_1 exists)" in second.stdout
    # And no txid was allocated by the repeat
    assert topology_store.runs.current_txid() == 4


@pytest.mark.integration
def test_backfill_beyond_a_gap_is_refused_in_one_line_and_creates_nothing(
    backfiller: Backfiller, topology_store: CoordinatorStore, unique_name: str
) -> None:
    # Given txids 1..4 allocated
    for i in range(1, 5):
        topology_store.runs.bind_run(f"scheduled__{i}")
    # When txids 6..7 are backfilled (txid 5 would be skipped)
    done = backfiller.run("cli_gap", unique_name, "--from-txid", "6", "--to-txid", "7")
    # Then the command exits 2 with one line naming the next txid, and nothing happened
    line = _one_line_error(done)
    assert "beyond the next txid, 5" in line, line
    assert backfiller.runs("cli_gap") == {}
    assert topology_store.runs.current_txid() == 4


@pytest.mark.integration
def test_dry_run_binds_and_creates_nothing(
    backfiller: Backfiller, topology_store: CoordinatorStore, unique_name: str
) -> None:
    # Given txid 1 allocated When txids 1..2 are backfilled with --dry-run
    topology_store.runs.bind_run("scheduled__1")
    done = backfiller.run("cli_dry", unique_name, "--from-txid", "1", "--to-txid", "2", "--dry-run")
    # Then it prints both runs and creates or binds nothing
    assert done.returncode == 0, done.stderr[-3000:]
    assert "would create trident_new__txid_2" in done.stdout
    assert backfiller.runs("cli_dry") == {}
    assert topology_store.runs.current_txid() == 1


@pytest.mark.integration
def test_an_unknown_dag_is_refused_in_one_line(backfiller: Backfiller, unique_name: str) -> None:
    done = backfiller.run("no_such_dag", unique_name, "--from-txid", "1", "--to-txid", "1")
    assert "DAG 'no_such_dag' is not in the DAGs folder" in _one_line_error(done)


def test_cli_module_runs_as_a_script() -> None:
    # `python -m airflow_trident.cli --help` is what the tests above (and users) run
    done = subprocess.run(
        [sys.executable, "-m", "airflow_trident.cli", "backfill", "--help"],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).parent,
    )
    assert done.returncode == 0, done.stderr
    assert "--from-txid" in done.stdout


# -- usage: help, streams, missing connections ----------------------------------------------------

_REST = re.compile(r"``|:(mod|class|func|meth|attr|data|exc):`")


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """The command's parser ("") and each subcommand's, as ``main`` builds them."""
    built: list[argparse.ArgumentParser] = []

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        built.append(self)
        raise SystemExit(0)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", capture)
        with pytest.raises(SystemExit):
            main([])
    (root,) = built
    (commands,) = [a for a in root._actions if isinstance(a, argparse._SubParsersAction)]
    return {"": root, **commands.choices}


def test_every_subcommand_and_option_has_help_text() -> None:
    # Given the command's parsers, When each argument is inspected
    parsers = _parsers()
    assert {"backfill", "rebuild"} <= set(parsers)
    # Then every positional and option has help text
    missing = [
        f"{name or 'airflow-trident'} {action.dest}"
        for name, parser in parsers.items()
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction) and not (action.help or "").strip()
    ]
    assert missing == []


@pytest.mark.parametrize("command", ["", "backfill", "rebuild", "drpc", "status"])
def test_help_has_no_rest_markup(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    # When --help is asked of the command or a subcommand
    with pytest.raises(SystemExit) as done:
        main([command, "--help"] if command else ["--help"])
    out = capsys.readouterr().out
    # Then it prints plain text: no ``literal`` or :mod:`x` from the docstrings
    assert done.value.code == 0
    assert "usage: airflow-trident" in out
    assert _REST.search(out) is None, out


def test_a_missing_connection_is_one_line_with_a_hint(tmp_path: Path) -> None:
    # Given no connection "nope" When a command needs it
    home = prepare_airflow_home(tmp_path / "airflow", migrate=False)
    done = subprocess.run(
        [sys.executable, "-m", "airflow_trident.cli", "rebuild",
         "airflow_trident.examples.topologies:word_count", "--state", "word_counts",
         "--state-conn-id", "nope"],
        env=home.env(), cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    # Then it exits 2 with one line naming the connection and how to create it
    line = _one_line_error(done)
    assert "`nope`" in line
    assert "AIRFLOW_CONN_" in line


@pytest.mark.integration
def test_results_go_to_stdout_and_log_lines_to_stderr(
    backfiller: Backfiller, topology_store: CoordinatorStore, unique_name: str
) -> None:
    # Given a command that connects to ZooKeeper (which logs) and prints its plan
    topology_store.runs.bind_run("scheduled__1")
    done = backfiller.run("cli_dry", unique_name, "--from-txid", "1", "--to-txid", "1", "--dry-run")
    assert done.returncode == 0, done.stderr[-3000:]
    # Then stdout holds only the results, and the log lines are on stderr
    assert done.stdout.splitlines()[0].startswith("DAG cli_dry, topology ")
    assert all(line.startswith(("DAG ", "  would create")) for line in done.stdout.splitlines())
    assert "Connecting to ZooKeeper" in done.stderr
