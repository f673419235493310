"""The main job: run the word-count DAG for several batches, as Airflow runs it, then query it.

It reads a real source: before each batch a small generator lands JSON-lines files (write, then
rename) in ``<work-dir>/data/landing``; the DAG ``trident_file_word_count``
(:mod:`airflow_trident.examples.file_log`) reads them with a ``FileLogSpout``, counts words into
SQLite state and appends every sentence to a Delta table; at the end it prints what each
committed txid read (files per partition) and wrote (keys, Delta rows).

Each batch is a real DAG run (``airflow dags test --use-executor``: the task in a process of its
own, with its log file for the UI) of the express layout: one task, ``batch.run``, waits for the
spouts, binds the run to a txid in ZooKeeper, processes the batch on one local Spark Connect
server (started here, on ``--connect-port``), commits the counts to SQLite state in txid order
and ends the batch. Then a run replaying an already committed txid (``--conf '{"txid": 1}'``)
shows the state does not change, and the DRPC stream ``words`` answers from the committed
counts. (The standard layout's separate tasks and ``spark-submit`` are the test command's.)

    python -m tests.harness.run_dag --batches 3

Needs ZooKeeper (``TRIDENT_ZK_HOSTS``, default 127.0.0.1:2181); ``bash scripts/main.sh`` starts it.
State, staging and the Airflow home live under ``--work-dir`` (default ``.work/main``). The home is
left complete for its UI (``bash scripts/ui.sh``, :mod:`tests.harness.main_ui`): its
``airflow.cfg``, a login, and the connections in its metadata database. Each
invocation starts the demo from txid 1 (its ZooKeeper nodes, state, staging and Airflow home are
reset) unless ``--keep-state``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kazoo.exceptions import NoNodeError

from airflow_trident.topology import TridentTopology
from tests.harness.airflow import (
    prepare_airflow_home,
    run_dag_test,
)
from tests.harness.connect import running_connect_server
from tests.harness.ui import (
    UI_PORT,
    free_port,
    server_env,
    serving_airflow,
    store_connections,
    write_ui_config,
)

__all__ = ["DAGS_FOLDER", "connections", "main", "trident_env"]

DAG_ID = "trident_file_word_count"  # reads JSON-lines files landing in <work>/data/landing
WORDS = "the cow moon candy apples"
ZK_ROOT = "/trident_main"
CONNECT_PORT = 15002  # Spark Connect's default port; the UI command serves the same URL
DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"


def trident_env(work: Path) -> dict[str, str]:
    """What the DAG files and tasks need beside the connections (also for the UI's servers)."""
    return {
        "TRIDENT_STAGING_ROOT": str(work / "staging"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "TRIDENT_DATA_DIR": str(work / "data"),  # the landing directory and the Delta table
    }


def connections(work: Path, connect_port: int = CONNECT_PORT) -> dict[str, dict[str, object]]:
    """The DAG's connections (``airflow connections import`` format), kept in the metadata DB
    so the UI's runs see them too."""
    zk_hosts = os.environ.get("TRIDENT_ZK_HOSTS", "127.0.0.1:2181")
    host, _, port = zk_hosts.partition(":")
    return {
        "spark_local": {"conn_type": "spark", "host": "local[2]"},
        "spark_connect_local": {"conn_type": "spark_connect", "host": "sc://127.0.0.1",
                                "port": connect_port},
        "trident_zookeeper_default": {"conn_type": "trident_zookeeper", "host": host,
                                      "port": int(port or 2181), "extra": {"root": ZK_ROOT}},
        "trident_state": {"conn_type": "trident_state", "host": str(work / "state.db"),
                          "extra": {"dialect": "sqlite"}},
    }  # fmt: skip


def _reset(work: Path) -> None:
    """Start the demo from txid 1: forget its ZooKeeper nodes, state and staging (a run killed
    half-way would otherwise leave a begun txid that the next batches wait behind)."""
    from airflow_trident.coordination.client import ZkConfig, connect

    client = connect(ZkConfig(hosts=os.environ.get("TRIDENT_ZK_HOSTS", "127.0.0.1:2181")))
    try:
        client.delete(ZK_ROOT, recursive=True)
    except NoNodeError:
        pass
    finally:
        client.stop()
        client.close()
    (work / "state.db").unlink(missing_ok=True)
    shutil.rmtree(work / "staging", ignore_errors=True)
    shutil.rmtree(work / "data", ignore_errors=True)
    # earlier runs' task instances would hold the new ones back (depends_on_past)
    shutil.rmtree(work / "airflow", ignore_errors=True)


def _query(state_url: str) -> list[tuple[object, ...]]:
    from airflow_trident.batch.runner import LocalRunner
    from airflow_trident.examples.file_log import file_word_count as word_count
    from airflow_trident.state.binding import StateBinding

    runner = LocalRunner(word_count, states=StateBinding(state_url))
    counts = runner.state("word_counts").multi_get([(w,) for w in WORDS.split()])
    for word, count in zip(WORDS.split(), counts, strict=True):
        print(f"  count({word}) = {count}")
    return _drpc_words(state_url, word_count)


def _drpc_words(state_url: str, word_count: TridentTopology) -> list[tuple[object, ...]]:
    """The DRPC stream ``words``, read at the txid the DAG runs committed in ZooKeeper."""
    from airflow_trident.coordination.client import ZkConfig, connect
    from airflow_trident.coordination.paths import CoordinatorPaths
    from airflow_trident.coordination.store import CoordinatorStore
    from airflow_trident.drpc import DRPCExecutor
    from airflow_trident.examples.file_log import file_word_count as word_count
    from airflow_trident.state.binding import StateBinding

    client = connect(ZkConfig(hosts=os.environ.get("TRIDENT_ZK_HOSTS", "127.0.0.1:2181")))
    try:
        store = CoordinatorStore(client, CoordinatorPaths(ZK_ROOT, word_count.name))
        drpc = DRPCExecutor(word_count, store=store, states=StateBinding(state_url))
        return drpc.execute("words", WORDS)
    finally:
        client.stop()
        client.close()


def _land(work: Path, batch: int) -> None:
    """A few JSON-lines files land (write, then rename) for the next batch to read."""
    from airflow_trident.examples.file_log import land_files

    root = work / "data" / "landing"
    landed = land_files(root, batch=batch)
    print(f"landed in {root}: {landed} records per partition (file {batch:06d}-*.jsonl)")


def _report(state_url: str) -> None:
    """What each committed batch read (files per partition, from the ledger's batch archive)
    and wrote (keys, Delta rows by txid)."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from airflow_trident.batch.ledger import CommitLedger
    from airflow_trident.examples.file_log import delta_path

    for row in CommitLedger(state_url).rows("file_word_count"):
        archive = json.loads(row["batch_meta"] or "{}")
        parts = archive.get("spouts", {}).get("sentences", {}).get("partitions", {})
        files = {p: [f["name"] for f in (m or {}).get("files", [])] for p, m in parts.items()}
        print(f"txid {row['txid']}: read {row['records_in']} records {files}; "
              f"wrote {row['keys_written']}")  # fmt: skip
    table = pq.read_table(DeltaTable(str(delta_path())).file_uris())
    txids = table["trident_txid"].to_pylist()
    print(f"Delta table {delta_path()}: {table.num_rows} rows, by txid "
          f"{dict(sorted((t, txids.count(t)) for t in set(txids)))}")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Run the batches; return 0 when every run succeeded and the replay changed nothing."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--work-dir", default=".work/main")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per DAG run")
    parser.add_argument(
        "--keep-state", action="store_true", help="continue the previous run's txids and counts"
    )
    parser.add_argument("--connect-port", type=int, default=CONNECT_PORT,
                        help="the local Spark Connect server's port")  # fmt: skip
    args = parser.parse_args(argv)
    work = Path(args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    state_url = f"sqlite:///{work / 'state.db'}"
    if not args.keep_state:
        _reset(work)
    os.environ.update(trident_env(work))  # before the topology module reads TRIDENT_DATA_DIR
    ok = True
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(1) as pool:
        # the Connect server's JVM starts while Airflow's metadata database is made (~20 s)
        connect = pool.submit(
            stack.enter_context, running_connect_server(work / "connect", port=args.connect_port)
        )
        home = prepare_airflow_home(work / "airflow", dags_folder=DAGS_FOLDER)
        write_ui_config(home, port=UI_PORT)
        store_connections(home, connections(work, args.connect_port))
        print(f"Airflow home {home.path}; DAG {DAG_ID}; state {state_url}")
        # the tasks' processes talk to an API server: a private one, on a free port
        port = free_port()
        env = {**trident_env(work), **server_env(port)}
        stack.enter_context(serving_airflow(home, port=port, components=("api-server",), env=env))
        connect_url = connect.result()
        print(f"Spark Connect server {connect_url} (logs in {work / 'connect'})")
        for i in range(1, args.batches + 1):
            _land(work, i)
            result = run_dag_test(
                DAG_ID, home=home, extra_env=env, timeout_s=args.timeout, use_executor=True
            )
            print(f"batch {i}: run {result.run_id} -> {result.run_state} {result.task_states}")
            ok = ok and result.ok
        print("counts after the batches:")
        before = _query(state_url)
        # the readiness sensor asks the spouts even for a replay: land the next batch's files
        _land(work, args.batches + 1)
        replay = run_dag_test(DAG_ID, home=home, extra_env=env, conf={"txid": 1},
                              timeout_s=args.timeout, use_executor=True)  # fmt: skip
        print(f"replay of txid 1: run {replay.run_id} -> {replay.run_state} {replay.task_states}")
    after = _query(state_url)
    print(f"DRPC words({WORDS!r}) -> {after}")
    _report(state_url)
    unchanged = before == after
    print("Look at the runs, their notes (txids) and task logs: bash scripts/ui.sh")
    print("OK: the replayed txid changed nothing" if unchanged else "MISMATCH after replay")
    return 0 if ok and replay.ok and unchanged else 1


if __name__ == "__main__":
    sys.exit(main())
