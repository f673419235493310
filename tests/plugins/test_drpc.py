"""DRPC through Airflow: the client and the CLI of ``hooks/drpc.py``, and the HTTP endpoint of
``plugins/drpc.py`` through FastAPI's TestClient and through a real ``airflow api-server``.

One deployment serves them all (the plugin keeps one client per DAG for the process's life): a
Trident DAG over ``e2e_word_count`` whose state connection is this run's PostgreSQL, two batches
committed through ZooKeeper, and a second DAG whose state database does not answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.batch.runner import LocalRunner
from airflow_trident.coordination.client import ZkConfig
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.runtime.reference import load_topology
from airflow_trident.state.binding import StateBinding
from tests.harness.airflow import prepare_airflow_home
from tests.harness.ports import free_port as _free_port

pytestmark = pytest.mark.integration

TOPOLOGY = "tests.harness.topologies:e2e_word_count"
DAG_ID = "drpc_word_count"
DEAD_DAG_ID = "drpc_unreachable"
DAG_FILE = f"""
from airflow_trident.dag import trident_dag

dag = trident_dag({TOPOLOGY!r}, dag_id={DAG_ID!r}, schedule=None, state_conn_id="drpc_state")
dead = trident_dag({TOPOLOGY!r}, dag_id={DEAD_DAG_ID!r}, schedule=None,
                   state_conn_id="drpc_dead")
"""
WORDS = ["the", "cow", "moon", "zebra"]


@dataclass
class Deployment:
    env: dict[str, str]
    counts: dict[str, int | None]

    def expected(self, words: list[str]) -> str:
        return json.dumps([[w, self.counts[w]] for w in words], separators=(",", ":"))


def _state_conn(url: str) -> dict[str, Any]:
    u = sa.make_url(url)
    return {
        "conn_type": "trident_state", "host": u.host, "port": u.port, "schema": u.database,
        "login": u.username, "password": u.password, "extra": {"dialect": "postgresql"},
    }  # fmt: skip


@pytest.fixture(scope="module")
def deployment(zk_hosts: str, pg_url: str) -> Iterator[Deployment]:
    import airflow.settings

    name = f"t_drpc_{os.getpid()}_{int(time.time()) % 100000}"
    host, _, port = zk_hosts.partition(":")
    config = ZkConfig(hosts=zk_hosts, root="/trident_test_drpc", timeout=5.0)
    dead = {**_state_conn(pg_url), "host": "127.0.0.1", "port": 1,
            "extra": {"dialect": "postgresql", "connect_timeout": 2}}  # fmt: skip
    env = {
        "TRIDENT_TEST_TOPOLOGY": name,
        "AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT": json.dumps({
            "conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
            "extra": {"root": config.root},
        }),
        "AIRFLOW_CONN_DRPC_STATE": json.dumps(_state_conn(pg_url)),
        "AIRFLOW_CONN_DRPC_DEAD": json.dumps(dead),
    }  # fmt: skip
    dags = Path(airflow.settings.DAGS_FOLDER)
    dags.mkdir(parents=True, exist_ok=True)
    (dags / "drpc_dags.py").write_text(DAG_FILE)
    # the in-process metadata database (Airflow's authorization reads DAGs' teams from it)
    migrate = [sys.executable, "-m", "airflow", "db", "migrate"]
    done = subprocess.run(migrate, env=os.environ, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        mp.delenv("TRIDENT_STATE_URL", raising=False)
        # Given two batches of the topology committed through ZooKeeper into PostgreSQL
        from airflow_trident.coordination.client import connect

        client = connect(config)
        store = CoordinatorStore(client, CoordinatorPaths(config.root, name))
        runner = LocalRunner(load_topology(TOPOLOGY), store=store, states=StateBinding(pg_url))
        runner.run(2)
        values = runner.state("counts").multi_get([(w,) for w in WORDS])
        counts = dict(zip(WORDS, values, strict=True))
        assert counts["the"]
        assert counts["zebra"] is None
        try:
            yield Deployment(env, counts)
        finally:
            store.delete_all()
            client.stop()
            client.close()
            (dags / "drpc_dags.py").unlink(missing_ok=True)  # other tests parse this folder


# -- the client and the CLI (hooks/drpc.py) --------------------------------------------------


def test_the_client_answers_from_the_dags_connections(deployment: Deployment) -> None:
    from airflow_trident.errors import DRPCUnknownFunctionError
    from airflow_trident.hooks.drpc import DRPCClient

    # Given a client of the Trident DAG (its topology and connections come from the DAG)
    with DRPCClient(DAG_ID) as client:
        # When it asks for words, Then the JSON list holds the committed counts
        assert client.execute("counts", "the cow zebra") == deployment.expected(
            ["the", "cow", "zebra"]
        )
        # and an unknown function is an error naming the functions
        with pytest.raises(DRPCUnknownFunctionError, match=r"no DRPC function 'count'.*counts"):
            client.execute("count", "the")
    # and a DAG that does not exist is an error naming it
    with pytest.raises(DRPCUnknownFunctionError, match="DAG 'no_such_dag' is not in the DAGs"):
        DRPCClient("no_such_dag").execute("counts", "the")


def _cli(deployment: Deployment, *args: str) -> subprocess.CompletedProcess[str]:
    command = ["timeout", "-s", "KILL", "120", sys.executable, "-m", "airflow_trident.cli"]
    env = {**os.environ, **deployment.env}
    env.pop("TRIDENT_STATE_URL", None)
    return subprocess.run(
        [*command, "drpc", *args], env=env, capture_output=True, text=True, check=False
    )


def test_the_cli_prints_the_json_list_or_one_line_errors(deployment: Deployment) -> None:
    # When `airflow-trident drpc DAG_ID FUNCTION ARGS` runs, Then it prints Trident's JSON
    done = _cli(deployment, DAG_ID, "counts", "the moon")
    assert done.returncode == 0, done.stderr[-3000:]
    # (Airflow's own log lines go to stdout too: the result is one line of its own)
    assert deployment.expected(["the", "moon"]) in done.stdout.splitlines(), done.stdout
    # and an unknown function exits 2 with one line saying so
    done = _cli(deployment, DAG_ID, "nope", "the")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("airflow-trident:")]
    assert len(errors) == 1, done.stderr[-2000:]
    assert "no DRPC function 'nope'" in errors[0]


# -- HTTP, through FastAPI's TestClient (plugins/drpc.py) -------------------------------------


@pytest.fixture(scope="module")
def http(deployment: Deployment) -> Iterator[tuple[Any, dict[str, str], dict[str, str]]]:
    """A TestClient of an app that mounts the plugin's app as the API server does, with
    Airflow's auth manager; headers of an admin and of a user without a role."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from airflow_trident.plugins.drpc import URL_PREFIX, TridentDRPCPlugin

    parent = FastAPI()
    manager = init_auth_manager(parent)
    for spec in TridentDRPCPlugin.fastapi_apps:
        parent.mount(spec["url_prefix"], spec["app"])
    assert TridentDRPCPlugin.fastapi_apps[0]["url_prefix"] == URL_PREFIX
    admin = manager.generate_jwt(SimpleAuthManagerUser(username="admin", role="admin"))
    nobody = manager.generate_jwt(SimpleAuthManagerUser(username="nobody", role=None))
    with pytest.MonkeyPatch.context() as mp:
        for key, value in deployment.env.items():
            mp.setenv(key, value)
        mp.delenv("TRIDENT_STATE_URL", raising=False)
        with TestClient(parent) as client:
            yield (
                client,
                {"Authorization": f"Bearer {admin}"},
                {"Authorization": f"Bearer {nobody}"},
            )


def _url(dag_id: str, function: str) -> str:
    return f"/trident/drpc/dags/{dag_id}/functions/{function}"


def test_http_answers_get_and_post_with_trident_json(
    http: tuple[Any, dict[str, str], dict[str, str]], deployment: Deployment
) -> None:
    client, admin, _ = http
    # When an authenticated caller asks by GET or POST, Then the body is the JSON list
    got = client.get(_url(DAG_ID, "counts"), params={"args": "the zebra"}, headers=admin)
    assert (got.status_code, got.text) == (200, deployment.expected(["the", "zebra"]))
    posted = client.post(_url(DAG_ID, "counts"), json={"args": "cow"}, headers=admin)
    assert (posted.status_code, posted.text) == (200, deployment.expected(["cow"]))


@pytest.mark.parametrize(
    ("dag_id", "function", "body", "status", "error", "detail"),
    [
        (DAG_ID, "nope", {"args": "the"}, 404, "DRPCUnknownFunctionError", "no DRPC function"),
        ("no_dag", "counts", {"args": "a"}, 404, "DRPCUnknownFunctionError", "'no_dag' is not"),
        (DAG_ID, "counts", {"args": 7}, 400, "DRPCArgumentsError", "must be one string"),
        (DAG_ID, "counts", {}, 400, "DRPCArgumentsError", "no arguments"),
        (DEAD_DAG_ID, "counts", {"args": "a"}, 503, "StateStoreUnavailableError", "127.0.0.1"),
    ],
    ids=["unknown-function", "unknown-dag", "args-not-a-string", "no-args", "state-unreachable"],
)
def test_http_errors_have_their_status_and_say_why(
    http: tuple[Any, dict[str, str], dict[str, str]],
    dag_id: str,
    function: str,
    body: dict[str, Any],
    status: int,
    error: str,
    detail: str,
) -> None:
    client, admin, _ = http
    # When a request cannot be answered, Then its status and JSON error say why
    got = client.post(_url(dag_id, function), json=body, headers=admin)
    assert got.status_code == status, got.text
    assert got.json()["error"] == error
    assert detail in got.json()["detail"]
    assert (got.headers.get("retry-after") == "1") == (status == 503)


def test_http_is_behind_airflows_authentication(
    http: tuple[Any, dict[str, str], dict[str, str]],
) -> None:
    client, _, nobody = http
    # When no token is sent, Then 401; a token whose user may not read the DAG, 403
    assert client.get(_url(DAG_ID, "counts"), params={"args": "the"}).status_code == 401
    got = client.get(_url(DAG_ID, "counts"), params={"args": "the"}, headers=nobody)
    assert got.status_code == 403


# -- HTTP, through a real `airflow api-server` -------------------------------------------------



def _request(url: str, *, data: bytes | None = None, token: str | None = None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_real_api_server_serves_drpc_behind_its_login(
    deployment: Deployment, tmp_path: Path
) -> None:
    # Given `airflow api-server` on a loopback port, with the DRPC plugin (entry point) and a
    # simple-auth-manager user
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "drpc_dags.py").write_text(DAG_FILE)
    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps({"admin": "drpc-secret"}))
    home = prepare_airflow_home(tmp_path / "home", dags_folder=dags)
    port = _free_port()
    env = home.env({
        **deployment.env,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": "False",
    })  # fmt: skip
    env.pop("TRIDENT_STATE_URL", None)
    command = [sys.executable, "-m", "airflow", "api-server", "--host", "127.0.0.1",
               "--port", str(port), "--workers", "1"]  # fmt: skip
    log = (tmp_path / "api-server.log").open("w")
    server = subprocess.Popen(
        command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        token = None
        for _ in range(240):  # the server starts in ~10-30 s
            if server.poll() is not None:
                break
            try:
                code, text = _request(
                    f"{base}/auth/token",
                    data=json.dumps({"username": "admin", "password": "drpc-secret"}).encode(),
                )
            except OSError:
                time.sleep(0.5)
                continue
            if code == 201:
                token = json.loads(text)["access_token"]
                break
            time.sleep(0.5)
        assert token, (tmp_path / "api-server.log").read_text()[-4000:]
        url = f"{base}/trident/drpc/dags/{DAG_ID}/functions/counts?args=the%20cow"
        # When a request comes without a token, Then 401
        assert _request(url)[0] == 401
        # When it comes with the login's token, Then the committed counts as Trident's JSON
        assert _request(url, token=token) == (200, deployment.expected(["the", "cow"]))
        # and an unknown function is a 404 saying so
        code, text = _request(url.replace("/counts?", "/count?"), token=token)
        assert code == 404, text
        assert "no DRPC function 'count'" in json.loads(text)["detail"]
    finally:
        os.killpg(server.pid, 15)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait(10)
        log.close()
