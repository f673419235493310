"""Every tool that takes a DAG id finds the DAG's Trident tasks in every layout of
``trident_dag(..., layout="standard"|"compact"|"express")``: the CLI's ``status``,
``backfill``, ``drpc`` and ``rebuild`` (run as a user runs them, in a child process of an
isolated Airflow home whose DAGs were serialized), the status view's app (the DAG's Trident
tab) and the DRPC HTTP endpoint (the plugin's app behind Airflow's real authentication, in this
process, parsing the DAGs folder).

Each layout's DAG has a topology of its own (:func:`tools_standard`, :func:`tools_compact`,
:func:`tools_express`; the express DAG processes on Spark Connect, which no tool needs),
with three batches committed into PostgreSQL through ZooKeeper, as the DAG's tasks commit them.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.batch.lifecycle import zookeeper_batch_steps
from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.operation import Count, Function, MapGet, Split
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentCollector, TridentTuple
from tests.harness.airflow import AirflowHome, prepare_airflow_home, run_airflow
from tests.harness.status import STATE_CONN_ID, ZOOKEEPER_CONN_ID, run_batches, status_env

pytestmark = pytest.mark.integration

LAYOUTS = ("standard", "compact", "express")


def layouts(first: int) -> list[Any]:
    """The three layouts, ``LAYOUTS[first % 3]`` in the test command and the other two in the long
    tier (``bash scripts/long-test.sh``): each tool takes its turn, so every layout's lookup
    still runs twice in the test command."""
    return [
        layout if i == first % len(LAYOUTS) else pytest.param(layout, marks=pytest.mark.long)
        for i, layout in enumerate(LAYOUTS)
    ]


NAME_ENV = "TRIDENT_TOOLS_TOPOLOGY"
LETTERS_ENV = "TRIDENT_TOOLS_LETTERS"
DATA = {"p0": [("the cow jumped",), ("over the moon",)] * 4,
        "p1": [("the man went",), ("to the store",)] * 4}  # fmt: skip
COMMITTED = 3


class FirstLetter(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((tuple_[0][0],))


def _topology(layout: str) -> TridentTopology:
    """Words counted per word (state ``counts``, DRPC stream ``counts``); with
    ``$TRIDENT_TOOLS_LETTERS`` set, also per first letter (``letters``: the v2 a rebuild
    fills from the archive)."""
    name = f"{os.environ.get(NAME_ENV, 'tools')}_{layout}"
    topology = TridentTopology(name)
    spout = MemoryTransactionalSpout(DATA, ["sentence"], take_per_batch=1)
    words = topology.new_stream("sentences", spout).each(["sentence"], Split(), ["word"])
    counts = words.group_by(["word"]).persistent_aggregate(
        sql_state(None, name, "transactional", key_fields=("word",), value_type="bigint"),
        Count(), ["count"], name="counts",
    )  # fmt: skip
    if os.environ.get(LETTERS_ENV):
        words.each(["word"], FirstLetter(), ["letter"]).group_by(["letter"]).persistent_aggregate(
            sql_state(None, f"{name}_letters", "transactional", key_fields=("letter",),
                      value_type="bigint"),
            Count(), ["count"], name="letters",
        )  # fmt: skip
    (
        topology.new_drpc_stream("counts")
        .each(["args"], Split(), ["word"])
        .state_query(counts, ["word"], MapGet(), ["count"])
        .project(["word", "count"])
    )
    return topology


def tools_standard() -> TridentTopology:
    """The standard layout DAG's topology (by reference)."""
    return _topology("standard")


def tools_compact() -> TridentTopology:
    """The compact layout DAG's topology (by reference)."""
    return _topology("compact")


def tools_express() -> TridentTopology:
    """The express layout DAG's topology (by reference)."""
    return _topology("express")


DAG_FILE = f"""
from airflow_trident.dag import trident_dag

for layout in {LAYOUTS!r}:
    globals()[f"dag_{{layout}}"] = trident_dag(
        f"tests.test_dag_tools:tools_{{layout}}",
        dag_id=f"tools_{{layout}}",
        schedule=None,
        zookeeper_conn_id={ZOOKEEPER_CONN_ID!r},
        state_conn_id={STATE_CONN_ID!r},
        layout=layout,
        **({{"process_mode": "connect"}} if layout == "express" else {{}}),
    )
"""


def _expected_counts(batches: int) -> Counter[str]:
    total: Counter[str] = Counter()
    for rows in DATA.values():
        for (sentence,) in rows[:batches]:
            total.update(sentence.split())
    return total


@dataclass(frozen=True)
class Tools:
    home: AirflowHome
    env: dict[str, str]
    name: str

    def cli(
        self, *args: str, extra: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        command = ["timeout", "-s", "KILL", "120", sys.executable, "-m", "airflow_trident.cli"]
        return subprocess.run(
            [*command, *args], env=self.home.env({**self.env, **(extra or {})}),
            cwd=self.home.path, capture_output=True, text=True, check=False,
        )  # fmt: skip

    def topology(self, layout: str) -> str:
        return f"{self.name}_{layout}"


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory, zk_hosts: str, pg_url: str) -> Iterator[Tools]:
    root = tmp_path_factory.mktemp("dag_tools")
    dags = root / "dags"
    dags.mkdir()
    (dags / "tools_dags.py").write_text(DAG_FILE)
    zk = ZkConfig(hosts=zk_hosts, root="/trident_test_tools", timeout=5.0)
    name = f"tools_{uuid.uuid4().hex[:8]}"
    env = status_env(dag_id="unused", topology=name, zk=zk, state_url=pg_url,
                     staging_root=str(root / "staging"))  # fmt: skip
    env[NAME_ENV] = name
    env.pop("TRIDENT_STATE_URL", None)
    home = prepare_airflow_home(root / "airflow", dags_folder=dags)
    done = run_airflow(home, "dags", "reserialize", timeout_s=180, extra_env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    # Given three committed batches of each layout's topology (as the DAG's tasks commit them)
    client = connect(zk)
    saved = os.environ.get(NAME_ENV)
    os.environ[NAME_ENV] = name
    try:
        for layout in LAYOUTS:
            steps = zookeeper_batch_steps(
                _topology(layout), client, root=zk.root, staging_root=str(root / "staging"),
                state_url=pg_url,
            )  # fmt: skip
            steps.store.delete_all()
            run_batches(steps, committed=COMMITTED)
        yield Tools(home, env, name)
    finally:
        if saved is None:
            os.environ.pop(NAME_ENV, None)
        else:
            os.environ[NAME_ENV] = saved
        for layout in LAYOUTS:
            CoordinatorStore(client, CoordinatorPaths(zk.root, f"{name}_{layout}")).delete_all()
        client.stop()
        client.close()
        with sa.create_engine(pg_url).begin() as conn:
            for layout in LAYOUTS:
                for table in (f"{name}_{layout}", f"{name}_{layout}_letters"):
                    conn.execute(sa.text(f'DROP TABLE IF EXISTS "{table}"'))


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


# -- the command line -----------------------------------------------------------------------------


@pytest.mark.parametrize("layout", layouts(0))
def test_status_finds_the_dags_topology(tools: Tools, layout: str) -> None:
    # When a user asks for the status of the DAG
    out = _ok(tools.cli("status", f"tools_{layout}"))
    # Then it reports the DAG's own topology
    assert out.splitlines()[0].startswith(
        f"topology {tools.topology(layout)} (DAG tools_{layout}): committed txid {COMMITTED}"
    ), out


@pytest.mark.parametrize("layout", layouts(1))
def test_backfill_plans_the_dags_txids(tools: Tools, layout: str) -> None:
    # When a user plans a backfill of txids 2..4 (dry run: nothing is bound or created)
    out = _ok(tools.cli("backfill", f"tools_{layout}", "--from-txid", "2", "--to-txid", "4",
                        "--dry-run"))  # fmt: skip
    # Then the plan replays the committed txids and begins the next one
    assert out.splitlines()[0] == (
        f"DAG tools_{layout}, topology {tools.topology(layout)}: last allocated txid "
        f"{COMMITTED}, last committed txid {COMMITTED}"
    ), out
    assert "would create trident_replay__txid_2" in out
    assert "would create trident_new__txid_4" in out


@pytest.mark.parametrize("layout", layouts(2))
def test_drpc_answers_from_the_dags_committed_state(tools: Tools, layout: str) -> None:
    # When a user asks the DAG's DRPC function
    out = _ok(tools.cli("drpc", f"tools_{layout}", "counts", "the cow"))
    # Then the answer is the committed counts
    counts = _expected_counts(COMMITTED)
    expected = json.dumps([["the", counts["the"]], ["cow", counts["cow"]]], separators=(",", ":"))
    assert expected in out.splitlines(), out


@pytest.mark.parametrize("layout", layouts(3))
def test_rebuild_by_dag_id_fills_a_new_state_from_the_archive(tools: Tools, layout: str) -> None:
    # Given the DAG's topology got a new state (v2), When it is rebuilt by the DAG's id (its
    # topology and state connection come from the DAG)
    out = _ok(tools.cli("rebuild", f"tools_{layout}", "--state", "letters",
                        extra={LETTERS_ENV: "1"}))  # fmt: skip
    # Then every committed txid was applied to it
    assert f"txids 1..{COMMITTED}" in out, out
    assert f"done: {COMMITTED} txids applied" in out, out


# -- the Airflow API server's apps (in this process) ----------------------------------------------


@pytest.fixture(scope="module")
def served(tools: Tools) -> Iterator[tuple[Any, Any, dict[str, str]]]:
    """TestClients of the status view's app and of the DRPC plugin's app (as the API server
    mounts it), finding the DAGs in this process's DAGs folder; an admin's headers."""
    import airflow.settings
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.configuration import conf
    from airflow.utils.db import initdb
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from airflow_trident.plugins.drpc import TridentDRPCPlugin
    from airflow_trident.plugins.status_app import create_app

    if len(conf.get("api_auth", "jwt_secret", fallback="")) < 64:
        conf.set("api_auth", "jwt_secret", secrets.token_hex(32))
    initdb()
    dag_file = Path(airflow.settings.DAGS_FOLDER) / "tools_dags.py"
    dag_file.parent.mkdir(parents=True, exist_ok=True)
    dag_file.write_text(DAG_FILE)
    parent = FastAPI()
    manager = init_auth_manager(parent)
    for spec in TridentDRPCPlugin.fastapi_apps:
        parent.mount(spec["url_prefix"], spec["app"])
    admin = manager.generate_jwt(SimpleAuthManagerUser(username="admin", role="admin"))
    try:
        with pytest.MonkeyPatch.context() as mp:
            for key, value in tools.env.items():
                mp.setenv(key, value)
            mp.delenv("TRIDENT_STATE_URL", raising=False)
            status = TestClient(create_app(list_dags=lambda user: []))
            with TestClient(parent) as drpc:
                yield status, drpc, {"Authorization": f"Bearer {admin}"}
    finally:
        dag_file.unlink(missing_ok=True)  # other tests parse this folder


@pytest.mark.parametrize("layout", layouts(4))
def test_the_trident_tab_shows_the_dags_topology(
    served: tuple[Any, Any, dict[str, str]], tools: Tools, layout: str
) -> None:
    status, _, admin = served
    # When the DAG's Trident tab (the view's JSON twin) is opened
    got = status.get(f"/api/dags/tools_{layout}", headers=admin)
    # Then it shows the DAG's topology and its committed txid
    assert got.status_code == 200, got.text
    data = got.json()
    assert (data["topology"], data["committed_txid"]) == (tools.topology(layout), COMMITTED)
    page = status.get(f"/dags/tools_{layout}", headers=admin)
    assert page.status_code == 200, page.text
    assert f'data-fact="committed_txid">{COMMITTED}<' in page.text


@pytest.mark.parametrize("layout", layouts(5))
def test_drpc_over_http_answers_for_the_dag(
    served: tuple[Any, Any, dict[str, str]], layout: str
) -> None:
    _, drpc, admin = served
    # When the DAG's DRPC function is asked over HTTP
    got = drpc.get(f"/trident/drpc/dags/tools_{layout}/functions/counts",
                   params={"args": "moon"}, headers=admin)  # fmt: skip
    # Then the answer is the committed count
    assert (got.status_code, got.text) == (
        200, json.dumps([["moon", _expected_counts(COMMITTED)["moon"]]], separators=(",", ":"))
    )  # fmt: skip
