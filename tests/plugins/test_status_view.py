"""The status view's FastAPI app with FastAPI's TestClient, behind Airflow's real authentication
(the simple auth manager's JWTs, Airflow's ``requires_access_dag``), over real batches in
ZooKeeper and PostgreSQL; and the plugin as Airflow's plugin manager loads it."""

from __future__ import annotations

import json
import os
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.coordination.client import ZkConfig
from tests.harness.status import (
    STATE_CONN_ID,
    ZOOKEEPER_CONN_ID,
    run_batches,
    status_env,
    topology_steps,
)

pytestmark = pytest.mark.integration

DAG_ID = "trident_status_view"


@dataclass(frozen=True)
class View:
    client: Any
    tokens: dict[str, str]
    topology: str
    pg_url: str


@pytest.fixture(scope="module")
def auth_manager() -> Any:
    """Airflow's configured auth manager (the simple one), over the session's metadata DB."""
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.configuration import conf
    from airflow.utils.db import initdb

    if len(conf.get("api_auth", "jwt_secret", fallback="")) < 64:
        conf.set("api_auth", "jwt_secret", secrets.token_hex(32))  # an HS512 key of full length
    initdb()  # requires_access_dag reads the DAG's team from the metadata database
    manager = create_auth_manager()
    manager.init()
    return manager


@pytest.fixture(scope="module")
def view(
    tmp_path_factory: pytest.TempPathFactory, zk_hosts: str, pg_url: str, auth_manager: Any
) -> Iterator[View]:
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    from airflow_trident.plugins.status_app import create_app
    from airflow_trident.status import DagTopology

    root = tmp_path_factory.mktemp("status_view")
    zk = ZkConfig(hosts=zk_hosts, root="/trident_test_status", timeout=5.0)
    topology = f"view_{uuid.uuid4().hex[:10]}"
    env = status_env(dag_id=DAG_ID, topology=topology, zk=zk, state_url=pg_url,
                     staging_root=str(root / "staging"))  # fmt: skip
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the connections, as the api-server's environment holds them
    with topology_steps(env, zk, pg_url) as steps:
        run_batches(steps, committed=3, processed=1, begun=1)
        store = steps.store
    target = DagTopology(
        dag_id=DAG_ID, topology="tests.harness.topologies:e2e_word_count",
        zookeeper_conn_id=ZOOKEEPER_CONN_ID, state_conn_id=STATE_CONN_ID,
        staging_root=env["TRIDENT_STAGING_ROOT"],
    )  # fmt: skip

    def resolve(dag_id: str) -> DagTopology:
        if dag_id != DAG_ID:
            msg = f"DAG {dag_id!r} is not in the DAGs folder"
            raise LookupError(msg)
        return target

    app = create_app(resolve=resolve, list_dags=lambda user: [DAG_ID])
    tokens = {
        role or "none": auth_manager.generate_jwt(SimpleAuthManagerUser(username=f"u_{role}",
                                                                        role=role))
        for role in ("viewer", None)
    }  # fmt: skip
    yield View(TestClient(app), tokens, topology, pg_url)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    from airflow_trident.coordination.client import connect
    from airflow_trident.coordination.paths import CoordinatorPaths
    from airflow_trident.coordination.store import CoordinatorStore

    client = connect(zk)
    CoordinatorStore(client, CoordinatorPaths(zk.root, store.paths.topology)).delete_all()
    client.stop()
    with sa.create_engine(pg_url).begin() as conn:
        conn.execute(sa.text(f'DROP TABLE IF EXISTS "{topology}"'))


def _bearer(view: View, role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {view.tokens[role]}"}


def test_json_route_gives_the_facts_of_the_ledger_and_zookeeper(view: View) -> None:
    # When a user who may read the DAG asks for its facts
    response = view.client.get(f"/api/dags/{DAG_ID}", headers=_bearer(view, "viewer"))
    # Then they are the ledger's commits and ZooKeeper's txids
    assert response.status_code == 200, response.text
    data = response.json()
    rows = CommitLedger(view.pg_url).rows(view.topology)
    assert [(c["txid"], c["records_in"], c["keys_written"]) for c in data["commits"]] == [
        (r["txid"], r["records_in"], json.loads(r["keys_written"])) for r in rows
    ]
    assert (data["dag_id"], data["committed_txid"], data["allocated_txid"]) == (DAG_ID, 3, 5)
    assert [(b["txid"], b["phase"]) for b in data["in_flight"]] == [(4, "processed"), (5, "begun")]


def test_page_shows_facts_a_timeline_and_a_row_per_txid(view: View) -> None:
    # When the page is opened with the UI's session cookie
    view.client.cookies.set("_token", view.tokens["viewer"])
    try:
        response = view.client.get(f"/dags/{DAG_ID}")
    finally:
        view.client.cookies.clear()
    # Then it renders the facts, one timeline row and one table row per txid
    assert response.status_code == 200, response.text
    html = response.text
    assert '<div class="value" data-fact="committed_txid">3</div>' in html
    assert '<div class="value" data-fact="allocated_txid">5</div>' in html
    assert '<div class="value" data-fact="in_flight">2</div>' in html
    for txid in range(1, 6):
        assert html.count(f'data-txid="{txid}"') == 2  # a timeline row and a table row
    assert html.count('<rect class="commit"') == 3
    assert html.count('<rect class="process"') == 4  # txid 5 was only begun
    assert '<tr data-partition="sentences/p0">' in html


@pytest.mark.parametrize(
    ("path", "role", "status"),
    [
        (f"/api/dags/{DAG_ID}", None, 401),  # no credentials
        (f"/dags/{DAG_ID}", None, 401),
        ("/", None, 401),
        (f"/api/dags/{DAG_ID}", "garbage", 403),  # a token Airflow did not sign
        (f"/api/dags/{DAG_ID}", "none", 403),  # a user without a role: may not read DAGs
        (f"/dags/{DAG_ID}", "none", 403),
    ],
)
def test_requests_airflow_does_not_authorize_are_rejected(
    view: View, path: str, role: str | None, status: int
) -> None:
    # Given no credentials, a forged token or a user without access
    headers = {}
    if role == "garbage":
        headers = {"Authorization": "Bearer not.a.jwt"}
    elif role is not None:
        headers = _bearer(view, role)
    # When the view is asked
    response = view.client.get(path, headers=headers)
    # Then Airflow's authentication refuses, and no fact leaks
    assert response.status_code == status, response.text
    assert "committed_txid" not in response.text


def test_a_run_shows_its_txid_and_phase_from_the_moment_its_begin_bound_it(view: View) -> None:
    # Given run_2 committed txid 2, run_4 processed txid 4, run_5 only begun txid 5 (in flight)
    # When each run's facts are asked, and those of a run whose begin has not run
    facts = {
        run: view.client.get(f"/api/dags/{DAG_ID}/runs/{run}", headers=_bearer(view, "viewer"))
        for run in ("run_2", "run_4", "run_5", "manual__not_begun")
    }
    # Then each run bound in ZooKeeper shows its txid and its batch's phase and attempt
    assert all(r.status_code == 200 for r in facts.values()), {k: r.text for k, r in facts.items()}
    data = {run: r.json() for run, r in facts.items()}
    assert [(data[r]["txid"], data[r]["batch"]["phase"], data[r]["batch"]["attempt_id"])
            for r in ("run_2", "run_4", "run_5")] == [
        (2, "committed", 1), (4, "processed", 1), (5, "begun", None)]  # fmt: skip
    assert data["run_5"]["summary"] == "txid 5 · begun"
    assert data["run_2"]["batch"]["run_id"] == "run_2"  # it committed it: no replay
    assert (data["run_2"]["replay"], data["run_2"]["committed_txid"]) == (False, 3)
    # And a run not bound yet says so, with no txid
    assert (data["manual__not_begun"]["txid"], data["manual__not_begun"]["summary"]) == (
        None, "not bound to a txid yet: its begin has not run")  # fmt: skip


def test_a_runs_page_shows_its_txid_and_refuses_whom_airflow_does(view: View) -> None:
    # When a run's page (its Trident tab) is opened with the UI's session cookie
    view.client.cookies.set("_token", view.tokens["viewer"])
    try:
        page = view.client.get(f"/dags/{DAG_ID}/runs/run_4")
    finally:
        view.client.cookies.clear()
    # Then it names the run's txid and phase
    assert page.status_code == 200, page.text
    assert '<span data-fact="run_txid">4</span>' in page.text
    assert '<strong data-fact="run_summary">txid 4 · processed · attempt 1</strong>' in page.text
    # And without credentials, or as a user who may not read the DAG, nothing is shown
    for headers, status in (({}, 401), (_bearer(view, "none"), 403)):
        denied = view.client.get(f"/api/dags/{DAG_ID}/runs/run_4", headers=headers)
        assert (denied.status_code, "run_txid" in denied.text) == (status, False)
    # And an unknown DAG is a 404 naming it
    missing = view.client.get("/api/dags/nope/runs/run_4", headers=_bearer(view, "viewer"))
    assert missing.status_code == 404
    assert "DAG 'nope'" in missing.json()["detail"]


def test_an_unknown_dag_is_a_404_naming_it(view: View) -> None:
    response = view.client.get("/api/dags/nope", headers=_bearer(view, "viewer"))
    assert response.status_code == 404
    assert "DAG 'nope' is not in the DAGs folder" in response.json()["detail"]


def test_index_links_each_trident_dag(view: View) -> None:
    response = view.client.get("/", headers=_bearer(view, "viewer"))
    assert response.status_code == 200
    assert f'href="/trident-status/dags/{DAG_ID}"' in response.text


def test_airflow_loads_the_plugin_with_its_app_and_ui_entries(auth_manager: Any) -> None:
    # When Airflow's plugin manager collects the installed plugins
    from airflow import plugins_manager
    from airflow.api_fastapi.core_api.datamodels.plugins import ExternalViewResponse

    apps, _ = plugins_manager.get_fastapi_plugins()
    views, _ = plugins_manager._get_ui_plugins()
    # Then the view's app is mounted under /trident-status, with a DAG tab and a nav entry that
    # Airflow's own response model accepts
    assert [a["url_prefix"] for a in apps if a["name"] == "Trident status"] == ["/trident-status"]
    ours = {v["url_route"]: ExternalViewResponse(**v) for v in views
            if str(v.get("url_route", "")).startswith("trident-")}  # fmt: skip
    assert ours["trident-status"].destination == "dag"
    assert ours["trident-status"].href == "/trident-status/dags/{DAG_ID}"
    assert ours["trident-topologies"].destination == "nav"
    # And every run's page has a Trident tab of its own (its txid while it runs)
    assert ours["trident-run"].destination == "dag_run"
    assert ours["trident-run"].href == "/trident-status/dags/{DAG_ID}/runs/{RUN_ID}"


def test_the_page_module_needs_no_file_outside_itself() -> None:
    # The page is one HTML document: no CDN, no script or stylesheet fetched from elsewhere
    from airflow_trident.plugins import status_page

    source = Path(status_page.__file__).read_text()
    assert "<script src" not in source
    assert "<link" not in source
    assert "https://" not in source
