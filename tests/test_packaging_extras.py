"""A user's ``pip install 'airflow-trident[...]'`` gets one owner of ``pyspark/`` by itself.

Two distributions ship the ``pyspark`` package: ``pyspark`` (with its JVM) and
``pyspark-client`` (Connect only, required by the Spark provider's 6.x line). The ``spark``
extra chooses pyspark with the provider's 5.x line, the ``connect`` extra pyspark-client with
6.x (docs/installation.md). The short test asks pip's resolver what each extra would install
(``pip install --dry-run --report``, no install); the slow one, with its own command, installs
Airflow into a fresh virtualenv, then the wheel, and parses a DAG::

    TRIDENT_PACKAGING=1 .venv/bin/pytest -m packaging tests/test_packaging_extras.py
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.harness.connect import running_connect_server
from tests.harness.ports import free_port as _free_port

ROOT = Path(__file__).resolve().parents[1]
AIRFLOW = "apache-airflow==3.3.2"


def _tree_copy(tmp_path: Path) -> Path:
    """A copy of the source tree to build from: pip's metadata step and ``pip wheel`` write
    ``airflow_trident.egg-info`` and ``build/`` into the tree they build, and an egg-info at the
    root, on the tests' ``PYTHONPATH``, is a second copy of the package's metadata: Airflow then
    registers each plugin twice (a UI test beside this one on the long tier's other worker saw
    "3 Plugin Import Errors")."""
    src = tmp_path / "src"
    skip = shutil.ignore_patterns(
        ".venv", ".work", ".git", "*.egg-info", "build", "__pycache__", ".*_cache"
    )
    if not src.exists():
        shutil.copytree(ROOT, src, ignore=skip)
    return src


def _resolve(tmp_path: Path, extra: str) -> dict[str, str]:
    """What ``pip install '<tree>[extra]'`` into an empty environment would install."""
    report = tmp_path / f"{extra}.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q",
         "--report", str(report), f"{_tree_copy(tmp_path)}[{extra}]", AIRFLOW],
        capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path,
    )  # fmt: skip
    if done.returncode != 0 and "Could not find a version" in done.stderr:
        pytest.skip(f"PyPI unreachable: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    items = json.loads(report.read_text())["install"]
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in items}


@pytest.mark.parametrize(
    ("extra", "owner", "absent"), [("spark", "pyspark", "pyspark-client"),
                                   ("connect", "pyspark-client", "pyspark")],
)  # fmt: skip
@pytest.mark.long  # resolves both extras into fresh venvs: ~40 s
def test_each_spark_extra_installs_one_owner_of_pyspark(
    tmp_path: Path, extra: str, owner: str, absent: str
) -> None:
    # When pip resolves the extra with Airflow 3.3
    resolved = _resolve(tmp_path, extra)
    # Then exactly one distribution owns pyspark/
    assert owner in resolved, sorted(resolved)
    assert absent not in resolved, (absent, resolved.get(absent))
    # and pyarrow is at least pyspark's floor
    assert int(resolved["pyarrow"].split(".")[0]) >= 18


@pytest.mark.packaging
@pytest.mark.timeout(1800)  # pip installs from PyPI
@pytest.mark.skipif(not os.environ.get("TRIDENT_PACKAGING"), reason="slow: TRIDENT_PACKAGING=1")
def test_the_wheel_installs_into_an_existing_airflow(tmp_path: Path) -> None:
    # Given a fresh virtualenv with Airflow installed first, as a team's own
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    clean.update(AIRFLOW_HOME=str(tmp_path / "home"), AIRFLOW__CORE__LOAD_EXAMPLES="False")

    def run(*args: str) -> str:
        done = subprocess.run([python, *args], capture_output=True, text=True, env=clean,
                              timeout=1800, check=False, cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done.stdout

    run("-m", "pip", "install", "-q", AIRFLOW)
    # When the wheel is installed with the spark extra
    wheel_dir = tmp_path / "dist"
    run("-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheel_dir), str(_tree_copy(tmp_path)))
    wheel = next(wheel_dir.glob("airflow_trident-*.whl"))
    run("-m", "pip", "install", "-q", f"{wheel}[spark,postgres]")
    # Then pip is content, one pyspark owns the files, and a DAG parses
    run("-m", "pip", "check")
    versions = run("-c", "import pyspark, importlib.metadata as m; "
                         "print(pyspark.__version__, m.version('pyspark'))").split()  # fmt: skip
    assert versions[0] == versions[1], versions
    parsed = run("-c", "from airflow_trident.dag import trident_dag; "
                       "d = trident_dag('airflow_trident.examples.topologies:word_count', "
                       "dag_id='wc'); print(sorted(d.task_ids))")  # fmt: skip
    assert "process" in parsed, parsed


# -- A team's own Airflow: constraints, the wheel, a compact DAG over a table, the UI, DRPC -----

PY = f"py{sys.version_info[0]}.{sys.version_info[1]}"
CONSTRAINTS = ROOT / ".work" / "packaging" / f"constraints-{AIRFLOW.replace('==', '-')}-{PY}.txt"
"""Airflow's own constraints file is not reachable from every machine: this one is made the way
a team pins its Airflow, from a first resolution (``pip freeze`` of an Airflow-only venv), and
reused by later runs."""

TOPOLOGY_MODULE = '''
"""A team's topology: the amount spent per customer, read from the shop's orders table by
connection id (no URL, no password here), and the DRPC function ``totals``."""
from airflow_trident.operation import MapGet, Split, Sum
from airflow_trident.spout.database_table import DatabaseTableSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology

orders = TridentTopology("{name}")
source = DatabaseTableSpout(
    conn_id="shop_pg", table="{table}", fields=["customer", "amount"],
    partitions=2, max_rows_per_batch=3,
)
totals = (
    orders.new_stream("orders", source)
    .group_by(["customer"])
    .persistent_aggregate(
        sql_state(None, "{name}_totals", "transactional", key_fields=("customer",),
                  value_type="bigint"),
        ["amount"], Sum(), ["total"], name="totals",
    )
)
(
    orders.new_drpc_stream("totals")
    .each(["args"], Split(), ["customer"])
    .group_by(["customer"])
    .state_query(totals, ["customer"], MapGet(), ["total"])
    .project(["customer", "total"])  # without it each answer also carries "args"
)
'''

SHOP_DAG = """
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "shop_flows.orders:orders",
    dag_id="shop_orders",
    layout="compact",
    process_mode="connect",
    spark_connect_conn_id="shop_connect",
    state_conn_id="shop_state",
)
"""

ORDERS = [("alice", 5), ("bob", 7), ("alice", 11), ("carol", 13), ("bob", 17), ("alice", 19),
          ("carol", 23), ("bob", 29)]  # fmt: skip
LATER_ORDERS = [("alice", 31), ("dave", 37)]


@contextlib.contextmanager
def _heavy_lock() -> Iterator[None]:
    """The machine's lock for Spark and Airflow work (``TRIDENT_HEAVY_LOCK``, a file path), held
    only around that part: the pip installs before it are network and disk bound."""
    path = os.environ.get("TRIDENT_HEAVY_LOCK")
    if not path:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _user_env(env_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a process of the team's venv: nothing of this project's (its
    source tree, venv, Airflow and Trident settings), the venv's ``bin`` first on PATH."""
    drop = ("AIRFLOW", "TRIDENT_", "PYTHON", "VIRTUAL_ENV", "SPARK_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and ".venv" not in p]
    env["PATH"] = os.pathsep.join([str(env_dir / "bin"), *path])
    return {**env, **extra}


def _existing_airflow(tmp_path: Path) -> Path:
    """A fresh venv with Airflow installed from constraints (generated once, then cached), then
    the wheel with ``[connect,postgres]`` under the same constraints; its directory."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    env = _user_env(env_dir)

    def pip(*args: str) -> str:
        done = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", *args],
                              capture_output=True, text=True, env=env, timeout=1800,
                              check=False, cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, f"pip {' '.join(args)}:\n" + done.stderr[-3000:]
        return done.stdout

    if CONSTRAINTS.exists():
        pip("install", "-q", AIRFLOW, "-c", str(CONSTRAINTS))
    else:  # the first resolution: Airflow alone, frozen
        pip("install", "-q", AIRFLOW)
        CONSTRAINTS.parent.mkdir(parents=True, exist_ok=True)
        frozen = pip("freeze", "--exclude", "pip", "--exclude", "setuptools")
        CONSTRAINTS.write_text(f"# pip freeze after `pip install {AIRFLOW}`\n{frozen}")
    src = _tree_copy(tmp_path)  # building in place would leave build/ in the tree
    pip("wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(src))
    wheel = next((tmp_path / "dist").glob("airflow_trident-*.whl"))
    pip("install", "-q", f"{wheel}[connect,postgres]", "-c", str(CONSTRAINTS))
    pip("check")
    return env_dir


def _totals(rows: list[tuple[str, int]]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for customer, amount in rows:
        totals[customer] = totals.get(customer, 0) + amount
    return totals


def _bearer_token(base: str, password: str, server: subprocess.Popen[bytes], log: Path) -> str:
    body = json.dumps({"username": "admin", "password": password}).encode()
    for _ in range(360):  # the server starts in ~10-30 s
        if server.poll() is not None:
            break
        try:
            code, text = _http(f"{base}/auth/token", data=body)
        except OSError:
            time.sleep(0.5)
            continue
        if code == 201:
            token: str = json.loads(text)["access_token"]
            return token
        time.sleep(0.5)
    pytest.fail(f"`airflow api-server` gave no token:\n{log.read_text()[-4000:]}")


def _http(url: str, *, data: bytes | None = None, token: str | None = None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.packaging
@pytest.mark.e2e
@pytest.mark.timeout(2400)  # pip installs, then waiting for TRIDENT_HEAVY_LOCK, then Spark
@pytest.mark.skipif(not os.environ.get("TRIDENT_PACKAGING"), reason="slow: TRIDENT_PACKAGING=1")
def test_a_team_runs_a_compact_table_dag_in_its_own_airflow(tmp_path: Path) -> None:
    hosts, pg_url = os.environ.get("TRIDENT_ZK_HOSTS"), os.environ.get("TRIDENT_PG_URL")
    if not hosts or not pg_url:
        pytest.skip("TRIDENT_ZK_HOSTS / TRIDENT_PG_URL unset: source scripts/env.sh")
    # Given the team's Airflow venv (Airflow from constraints), then the provider's wheel
    env_dir = _existing_airflow(tmp_path)
    # and its own code: a topology package, a DAG file, an orders table in its database
    suffix = uuid.uuid4().hex[:8]
    name, table = f"shop_{suffix}", f"orders_{suffix}"
    code = tmp_path / "code" / "shop_flows"
    code.mkdir(parents=True)
    (code / "__init__.py").write_text("")
    (code / "orders.py").write_text(TOPOLOGY_MODULE.format(name=name, table=table))
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "shop_orders.py").write_text(SHOP_DAG)
    engine = sa.create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE {table} (id SERIAL PRIMARY KEY, "
                             "customer TEXT NOT NULL, amount BIGINT NOT NULL)"))  # fmt: skip
        for customer, amount in ORDERS:
            conn.execute(sa.text(f"INSERT INTO {table} (customer, amount) VALUES (:c, :a)"),
                         {"c": customer, "a": amount})  # fmt: skip
    url = sa.make_url(pg_url)
    database = {"conn_type": "postgres", "host": url.host, "port": url.port,
                "login": url.username, "password": url.password,
                "schema": url.database}  # fmt: skip
    zk_host, _, zk_port = hosts.partition(":")
    zookeeper = {"conn_type": "trident_zookeeper", "host": zk_host, "port": int(zk_port),
                 "extra": {"root": "/trident_packaging"}}  # fmt: skip
    home = tmp_path / "airflow"
    password = uuid.uuid4().hex
    (tmp_path / "passwords.json").write_text(json.dumps({"admin": password}))
    # its connections and settings in the environment of its Airflow processes (never on a
    # command line); the topology package on their PYTHONPATH
    env = _user_env(
        env_dir,
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(tmp_path / "passwords.json"),
        AIRFLOW__TRIDENT__STAGING_ROOT=str(tmp_path / "staging"),
        AIRFLOW_CONN_SHOP_PG=json.dumps(database),
        AIRFLOW_CONN_SHOP_STATE=json.dumps(database),
        AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT=json.dumps(zookeeper),
        PYTHONPATH=str(code.parent),
    )
    airflow = str(env_dir / "bin" / "airflow")

    def run(*args: str, timeout_s: int = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["timeout", "-s", "KILL", str(timeout_s), airflow, *args],
                              capture_output=True, text=True, env=env, check=False,
                              cwd=tmp_path)  # fmt: skip

    def counts() -> dict[str, int]:
        with engine.connect() as conn:
            rows = conn.execute(sa.text(f'SELECT customer, val FROM "{name}_totals"')).all()
        return {r[0]: int(r[1]) for r in rows}

    migrated = run("db", "migrate")
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    try:
        # The Spark Connect server is the team's Spark cluster: started from this project's
        # venv (the team's venv has no JVM), with airflow-trident and the topology package
        with _heavy_lock(), pytest.MonkeyPatch.context() as mp:
            mp.setenv("PYTHONPATH", f"{code.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
            with running_connect_server(tmp_path / "connect") as sc:
                host, _, port = sc.rpartition(":")
                connect = {"conn_type": "spark_connect", "host": host, "port": int(port)}
                env["AIRFLOW_CONN_SHOP_CONNECT"] = json.dumps(connect)
                # When the DAG runs twice, new orders arriving between the runs
                first = run("dags", "test", "shop_orders")
                assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-5000:]
                assert counts() == _totals(ORDERS[:6]), first.stderr[-5000:]
                with engine.begin() as conn:
                    for customer, amount in LATER_ORDERS:
                        conn.execute(
                            sa.text(f"INSERT INTO {table} (customer, amount) VALUES (:c, :a)"),
                            {"c": customer, "a": amount})  # fmt: skip
                second = run("dags", "test", "shop_orders")
                assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-5000:]
                output = first.stdout + first.stderr + second.stdout + second.stderr
                # Then each ran as one compact batch on Spark Connect, and the counts are exact
                assert "on Spark Connect" in output
                assert "spark-submit" not in output
                assert counts() == _totals(ORDERS + LATER_ORDERS)
            # and the API server of the team's venv shows it in the Trident tab and answers DRPC
            _check_api_server(env, airflow, tmp_path, password, ORDERS + LATER_ORDERS)
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
        engine.dispose()


def _check_api_server(env: dict[str, str], airflow: str, tmp_path: Path, password: str,
                      rows: list[tuple[str, int]]) -> None:  # fmt: skip
    port = _free_port()
    log = tmp_path / "api-server.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [airflow, "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        token = _bearer_token(base, password, server, log)
        # the DAG's Trident tab is registered ...
        code, text = _http(f"{base}/api/v2/plugins", token=token)
        assert code == 200, text
        views = [v for p in json.loads(text)["plugins"] for v in p.get("external_views", [])]
        assert any(v.get("url_route") == "trident-status" for v in views), views
        # ... and renders the committed batches of the compact DAG
        code, page = _http(f"{base}/trident-status/dags/shop_orders", token=token)
        assert code == 200, page
        code, text = _http(f"{base}/trident-status/api/dags/shop_orders", token=token)
        assert code == 200, text
        facts = json.loads(text)
        assert facts["committed_txid"] == 2, facts
        # DRPC over HTTP answers from the committed totals
        totals = _totals(rows)
        code, text = _http(f"{base}/trident/drpc/dags/shop_orders/functions/totals"
                           "?args=alice%20dave%20nobody", token=token)  # fmt: skip
        assert code == 200, text + log.read_text()[-3000:]
        assert json.loads(text) == [["alice", totals["alice"]], ["dave", totals["dave"]],
                                    ["nobody", None]]  # fmt: skip
        assert _http(f"{base}/trident/drpc/dags/shop_orders/functions/totals?args=bob")[0] == 401
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)

