"""The main job: run the word-count DAG for several batches, as Airflow runs it, then query it.

Each batch is a real DAG run (``airflow dags test``): the readiness sensor, ``begin`` binding the
run to a txid in ZooKeeper, ``process`` as a real ``spark-submit`` (Spark local), ``commit``
applying the counts to SQLite state in txid order, and ``success``. Then a run replaying an
already committed txid (``--conf '{"txid": 1}'``) shows the state does not change, and the
DRPC stream ``words`` answers from the committed counts.

    python -m airflow_trident.examples.run_dag --batches 3

Needs ZooKeeper (``TRIDENT_ZK_HOSTS``, default 127.0.0.1:2181); ``bash scripts/main.sh`` starts it.
State, staging and the Airflow home live under ``--work-dir`` (default ``.work/main``). Each
invocation starts the demo from txid 1 (its ZooKeeper nodes, state, staging and Airflow home are
reset) unless ``--keep-state``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from kazoo.exceptions import NoNodeError

from airflow_trident.testing.airflow import prepare_airflow_home, run_dag_test

__all__ = ["main"]

DAG_ID = "trident_word_count"
WORDS = "the cow moon candy apples"
ZK_ROOT = "/trident_main"


def _env(work: Path) -> dict[str, str]:
    zk_hosts = os.environ.get("TRIDENT_ZK_HOSTS", "127.0.0.1:2181")
    host, _, port = zk_hosts.partition(":")
    return {
        "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT": json.dumps(
            {"conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
             "extra": {"root": ZK_ROOT}}
        ),
        "TRIDENT_STATE_URL": f"sqlite:///{work / 'state.db'}",
        "TRIDENT_STAGING_ROOT": str(work / "staging"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "AIRFLOW__CORE__DAGS_FOLDER": str(Path(__file__).resolve().parents[2] / "dags"),
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
    # earlier runs' task instances would hold the new ones back (depends_on_past)
    shutil.rmtree(work / "airflow", ignore_errors=True)


def _query(env: dict[str, str]) -> list[tuple[object, ...]]:
    from airflow_trident.examples.topologies import word_count
    from airflow_trident.runtime.runner import LocalRunner
    from airflow_trident.state.binding import StateBinding

    runner = LocalRunner(word_count, states=StateBinding(env["TRIDENT_STATE_URL"]))
    counts = runner.state("word_counts").multi_get([(w,) for w in WORDS.split()])
    for word, count in zip(WORDS.split(), counts, strict=True):
        print(f"  count({word}) = {count}")
    return runner.drpc("words", WORDS)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the batches; return 0 when every run succeeded and the replay changed nothing."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--work-dir", default=".work/main")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per DAG run")
    parser.add_argument(
        "--keep-state", action="store_true", help="continue the previous run's txids and counts"
    )
    args = parser.parse_args(argv)
    work = Path(args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = _env(work)
    if not args.keep_state:
        _reset(work)
    home = prepare_airflow_home(
        work / "airflow", dags_folder=Path(env["AIRFLOW__CORE__DAGS_FOLDER"])
    )
    print(f"Airflow home {home.path}; DAG {DAG_ID}; state {env['TRIDENT_STATE_URL']}")
    ok = True
    for i in range(1, args.batches + 1):
        result = run_dag_test(DAG_ID, home=home, extra_env=env, timeout_s=args.timeout)
        print(f"batch {i}: run {result.run_id} -> {result.run_state} {result.task_states}")
        ok = ok and result.ok
    print("counts after the batches:")
    before = _query(env)
    replay = run_dag_test(DAG_ID, home=home, extra_env=env, conf={"txid": 1},
                          timeout_s=args.timeout)  # fmt: skip
    print(f"replay of txid 1: {replay.run_state} {replay.task_states}")
    after = _query(env)
    print(f"DRPC words({WORDS!r}) -> {after}")
    unchanged = before == after
    print("OK: the replayed txid changed nothing" if unchanged else "MISMATCH after replay")
    return 0 if ok and replay.ok and unchanged else 1


if __name__ == "__main__":
    sys.exit(main())
