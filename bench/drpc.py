"""Benchmark: single-key DRPC query latency against PostgreSQL state holding 1,000,000 keys.

Usage::

    eval "$(bash scripts/services.sh env)"
    .venv/bin/python bench/drpc.py [--keys 1000000] [--queries 2000] [--no-http]

The state is the opaque table of :func:`topology` (``word -> count``), bulk-loaded with COPY as
txid 1, and the topology's committed txid in ZooKeeper is 1. Each query asks the DRPC function
``count`` for one random key (``state_query(MapGet)``: ``[["word00000042",42]]``):

* *client*: :class:`~airflow_trident.hooks.drpc.DRPCClient` in this process, reaching ZooKeeper
  and PostgreSQL through Airflow connections (what ``airflow-trident drpc`` and the API server
  run per request: read the committed txid, read the key, run the stream);
* *http*: ``GET /trident/drpc/dags/bench_drpc/functions/count?args=...`` on a real
  ``airflow api-server`` (loopback, one worker, the DRPC plugin, a simple-auth-manager login's
  JWT), over one keep-alive connection.

Prints p50/p99 (ms) of each after a warm-up; the target is p99 <= 20 ms through the client.
The last line is ``client_p99_ms=<p99>``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests/
from tests.harness import export_project_path

export_project_path()  # Airflow tasks and Spark's Python workers load tests.harness's topologies

BENCH_DIR = Path(__file__).resolve().parent
TABLE_ENV = "BENCH_DRPC_TABLE"
ZK_ROOT = "/trident_bench_drpc"
DAG_ID = "bench_drpc"
REFERENCE = "drpc:topology"  # this file, with bench/ on the path (the API server imports it)


def topology() -> object:
    """Words counted into opaque state (the table named by ``BENCH_DRPC_TABLE``), and the DRPC
    function ``count`` reading one word's count."""
    from airflow_trident.operation import Count, MapGet
    from airflow_trident.spout.memory import MemoryTransactionalSpout
    from airflow_trident.state.sql import sql_state
    from airflow_trident.topology import TridentTopology

    table = os.environ.get(TABLE_ENV, "bench_drpc")
    t = TridentTopology("bench_drpc")
    counts = (
        t.new_stream("words", MemoryTransactionalSpout({"p0": []}, ["word"], take_per_batch=1))
        .group_by(["word"])
        .persistent_aggregate(
            sql_state(None, table, "opaque", key_fields=("word",), value_type="bigint"),
            Count(),
            ["count"],
            name="counts",
        )
    )
    t.new_drpc_stream("count").state_query(counts, ["args"], MapGet(), ["count"])
    return t


def key(i: int) -> str:
    return f"word{i:08d}"


def load(pg_url: str, table: str, n: int) -> float:
    """Create the state table, COPY ``n`` keys into it as txid 1; return the seconds taken."""
    import psycopg
    import sqlalchemy as sa

    from airflow_trident.state.sql import sql_state

    sql_state(pg_url, table, "opaque", key_fields=("word",), value_type="bigint").make_state()
    started = time.perf_counter()
    dsn = sa.make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"TRUNCATE {table}")
        with cur.copy(f"COPY {table} (word, txid, val, prev) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["text", "int8", "int8", "int8"])
            for i in range(n):
                copy.write_row((key(i), 1, i % 1000, None))
        cur.execute(f"ANALYZE {table}")
    return time.perf_counter() - started


def commit_txid_1(zk_hosts: str) -> None:
    """The topology's coordinator at committed txid 1 (fresh)."""
    from airflow_trident.coordination.client import ZkConfig, connect
    from airflow_trident.coordination.paths import CoordinatorPaths
    from airflow_trident.coordination.store import CoordinatorStore

    client = connect(ZkConfig(hosts=zk_hosts, root=ZK_ROOT))
    try:
        store = CoordinatorStore(client, CoordinatorPaths(ZK_ROOT, "bench_drpc"))
        store.delete_all()
        store.runs.bind_run("bench_load")
        store.commits.commit(1)
    finally:
        client.stop()
        client.close()


def connections(zk_hosts: str, pg_url: str) -> dict[str, str]:
    import sqlalchemy as sa

    host, _, port = zk_hosts.partition(":")
    u = sa.make_url(pg_url)
    return {
        "AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT": json.dumps({
            "conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
            "extra": {"root": ZK_ROOT},
        }),
        "AIRFLOW_CONN_BENCH_DRPC_STATE": json.dumps({
            "conn_type": "trident_state", "host": u.host, "port": u.port, "schema": u.database,
            "login": u.username, "password": u.password, "extra": {"dialect": "postgresql"},
        }),
    }  # fmt: skip


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 in milliseconds."""
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[49] * 1000, cuts[98] * 1000


def timed(call: Callable[[str], str], n_keys: int, queries: int, rng: random.Random) -> list[float]:
    samples = []
    for _ in range(queries):
        i = rng.randrange(n_keys)
        started = time.perf_counter()
        answer = call(key(i))
        samples.append(time.perf_counter() - started)
        expected = f'[["{key(i)}",{i % 1000}]]'
        if answer != expected:
            msg = f"query {key(i)} answered {answer!r}, expected {expected!r}"
            raise AssertionError(msg)
    return samples


def bench_client(n_keys: int, queries: int, rng: random.Random) -> tuple[float, float]:
    from airflow_trident.hooks.drpc import DRPCClient

    with DRPCClient(topology=REFERENCE, state_conn_id="bench_drpc_state") as client:
        timed(lambda k: client.execute("count", k), n_keys, 50, rng)  # warm-up
        return percentiles(timed(lambda k: client.execute("count", k), n_keys, queries, rng))


DAG_FILE = f"""
from airflow_trident.dag import trident_dag

dag = trident_dag({REFERENCE!r}, dag_id={DAG_ID!r}, schedule=None,
                  state_conn_id="bench_drpc_state")
"""


def bench_http(
    env: dict[str, str], work: Path, n_keys: int, queries: int, rng: random.Random
) -> tuple[float, float]:
    from tests.harness.airflow import prepare_airflow_home

    dags = work / "dags"
    dags.mkdir()
    (dags / "bench_drpc_dag.py").write_text(DAG_FILE)
    (work / "passwords.json").write_text(json.dumps({"admin": "bench"}))
    home = prepare_airflow_home(work / "home", dags_folder=dags)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server_env = home.env({
        **env,
        "PYTHONPATH": os.pathsep.join([str(BENCH_DIR), os.environ.get("PYTHONPATH", "")]),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(work / "passwords.json"),
    })  # fmt: skip
    log = (work / "api-server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "airflow", "api-server", "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        env=server_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        token = _login(port, server)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"Authorization": f"Bearer {token}"}

        def ask(k: str) -> str:
            conn.request(
                "GET", f"/trident/drpc/dags/{DAG_ID}/functions/count?args={k}", headers=headers
            )
            resp = conn.getresponse()
            body = resp.read().decode()
            if resp.status != 200:
                msg = f"HTTP {resp.status}: {body[:500]}"
                raise AssertionError(msg)
            return body

        timed(ask, n_keys, 50, rng)  # warm-up (the first request parses the DAG file)
        return percentiles(timed(ask, n_keys, queries, rng))
    finally:
        os.killpg(server.pid, 15)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
        log.close()


def _login(port: int, server: subprocess.Popen[bytes]) -> str:
    body = json.dumps({"username": "admin", "password": "bench"})
    for _ in range(240):
        if server.poll() is not None:
            break
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("POST", "/auth/token", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            text = resp.read().decode()
            conn.close()
        except OSError:
            time.sleep(0.5)
            continue
        if resp.status == 201:
            token: str = json.loads(text)["access_token"]
            return token
        time.sleep(0.5)
    msg = "the API server did not start (see api-server.log)"
    raise RuntimeError(msg)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--no-http", action="store_true", help="skip the API server")
    parser.add_argument("--table", default="bench_drpc")
    args = parser.parse_args(argv)
    pg_url, zk_hosts = os.environ.get("TRIDENT_PG_URL"), os.environ.get("TRIDENT_ZK_HOSTS")
    if not pg_url or not zk_hosts:
        print('needs TRIDENT_PG_URL and TRIDENT_ZK_HOSTS: eval "$(bash scripts/services.sh env)"')
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-drpc-"))
    env = {**connections(zk_hosts, pg_url), TABLE_ENV: args.table}
    os.environ.update(env)
    os.environ.setdefault("AIRFLOW_HOME", str(work / "client_home"))
    os.environ.pop("TRIDENT_STATE_URL", None)
    sys.path.insert(0, str(BENCH_DIR))
    rng = random.Random(7)
    seconds = load(pg_url, args.table, args.keys)
    print(f"loaded {args.keys} keys into {args.table} with COPY in {seconds:.1f} s")
    commit_txid_1(zk_hosts)
    p50, p99 = bench_client(args.keys, args.queries, rng)
    print(f"client: {args.queries} single-key queries: p50={p50:.2f} ms p99={p99:.2f} ms "
          f"(target p99 <= 20 ms: {'met' if p99 <= 20 else 'NOT met'})")  # fmt: skip
    if not args.no_http:
        h50, h99 = bench_http(env, work, args.keys, args.queries, rng)
        print(f"http:   {args.queries} single-key queries: p50={h50:.2f} ms p99={h99:.2f} ms")
    print(f"client_p99_ms={p99:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
