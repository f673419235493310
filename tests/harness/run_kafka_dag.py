"""The Kafka demo: run the Kafka word-count DAG for several batches as Airflow runs it, replay a
txid, and check the counts against what was produced, exactly.

Before each batch :func:`~airflow_trident.examples.kafka.produce_sentences` produces
``--records`` JSON records ``{"sentence": ...}`` into the topic (2 partitions, created if
missing); each batch is a real DAG run of ``trident_kafka_word_count``
(:mod:`airflow_trident.examples.kafka`; ``airflow dags test --use-executor``, the express
layout: one task, ``batch.run``, on one local Spark Connect server started here on
``--connect-port``). Its ``KafkaSpout`` reads the broker through the Airflow ``kafka``
connection ``trident_kafka`` (``{"bootstrap.servers": ...}`` in its extra, stored in the home's
metadata database with the others, as :mod:`tests.harness.run_dag` stores them), fixing each
txid's offsets of each partition in ZooKeeper. Then a run replaying txid 1 (``--conf
'{"txid": 1}'``, after more records are produced, which the replay must not read) must leave
the counts unchanged. At the end
it prints what each txid read (offsets per partition) and the counts of every word against the
words of the sentences the batches were given: exit 0 only if every run succeeded, the replay
changed nothing, each txid read exactly its batch's records and every count is equal.

    python -m tests.harness.run_kafka_dag --batches 3 --connect-port 15012

Needs ZooKeeper (``TRIDENT_ZK_HOSTS``) and a Kafka broker (``--bootstrap``, default
``TRIDENT_KAFKA_BOOTSTRAP``, else ``127.0.0.1:39092``); ``bash scripts/kafka-demo.sh`` starts
both. Each invocation starts from txid 1: its ZooKeeper nodes, state, staging, Airflow home
(under ``--work-dir``, default ``.work/kafka-demo``) and its topic are deleted first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kazoo.exceptions import NoNodeError

from tests.harness.airflow import prepare_airflow_home, run_dag_test
from tests.harness.connect import running_connect_server
from tests.harness.run_dag import CONNECT_PORT, DAGS_FOLDER, connections, trident_env
from tests.harness.ui import (
    UI_PORT,
    free_port,
    server_env,
    serving_airflow,
    store_connections,
    write_ui_config,
)

__all__ = ["DAG_ID", "kafka_connections", "main"]

DAG_ID = "trident_kafka_word_count"
TOPOLOGY = "kafka_word_count"
ZK_ROOT = "/trident_kafka_demo"
DEFAULT_BOOTSTRAP = "127.0.0.1:39092"  # scripts/services.sh's broker (TRIDENT_KAFKA_PORT)
DRPC_WORDS = "the cow moon candy apples"


def kafka_connections(
    work: Path, bootstrap: str, connect_port: int, zk_root: str
) -> dict[str, dict[str, object]]:
    """The main job's connections (:func:`tests.harness.run_dag.connections`) under another
    ZooKeeper root, and the Kafka connection ``trident_kafka``."""
    conns = connections(work, connect_port)
    zk = dict(conns["trident_zookeeper_default"])
    zk["extra"] = {"root": zk_root}
    return {**conns, "trident_zookeeper_default": zk,
            "trident_kafka": {"conn_type": "kafka",
                              "extra": {"bootstrap.servers": bootstrap}}}  # fmt: skip


def _zk_hosts() -> str:
    return os.environ.get("TRIDENT_ZK_HOSTS", "127.0.0.1:2181")


def _reset(work: Path, zk_root: str, bootstrap: str, topic: str) -> None:
    """Start from txid 1: forget the ZooKeeper nodes, state, staging and Airflow home (earlier
    task instances would hold new runs back), and delete the topic (a fresh one starts at
    offset 0 of each partition)."""
    from confluent_kafka.admin import AdminClient

    from airflow_trident.coordination.client import ZkConfig, connect

    client = connect(ZkConfig(hosts=_zk_hosts()))
    try:
        client.delete(zk_root, recursive=True)
    except NoNodeError:
        pass
    finally:
        client.stop()
        client.close()
    (work / "state.db").unlink(missing_ok=True)
    for name in ("staging", "data", "airflow"):
        shutil.rmtree(work / name, ignore_errors=True)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
        deadline = time.monotonic() + 60
        while topic in admin.list_topics(timeout=30).topics:  # deletion completes later
            if time.monotonic() > deadline:
                msg = f"topic {topic!r} still exists 60 s after its deletion"
                raise RuntimeError(msg)
            time.sleep(0.5)


def _produce(bootstrap: str, topic: str, n: int, seed: int) -> list[str]:
    from airflow_trident.examples.kafka import produce_sentences

    for attempt in range(20):  # a topic just deleted may refuse to be made for a moment
        try:
            return produce_sentences(bootstrap, topic, n, seed)
        except Exception as exc:  # KafkaException: "marked for deletion"
            if attempt == 19 or "deletion" not in str(exc).lower():
                raise
            time.sleep(1.0)
    raise AssertionError  # unreachable


def _counts(state_url: str, words: Sequence[str]) -> dict[str, int]:
    """The committed count of each word (0 when it has none)."""
    from airflow_trident.batch.runner import LocalRunner
    from airflow_trident.examples.kafka import kafka_word_count
    from airflow_trident.state.binding import StateBinding

    runner = LocalRunner(kafka_word_count, states=StateBinding(state_url))
    got = runner.state("word_counts").multi_get([(w,) for w in words])
    return {w: int(c or 0) for w, c in zip(words, got, strict=True)}


def _drpc(state_url: str, zk_root: str) -> list[tuple[object, ...]]:
    """The DRPC stream ``words``, read at the txid the DAG runs committed in ZooKeeper."""
    from airflow_trident.coordination.client import ZkConfig, connect
    from airflow_trident.coordination.paths import CoordinatorPaths
    from airflow_trident.coordination.store import CoordinatorStore
    from airflow_trident.drpc import DRPCExecutor
    from airflow_trident.examples.kafka import kafka_word_count
    from airflow_trident.state.binding import StateBinding

    client = connect(ZkConfig(hosts=_zk_hosts()))
    try:
        store = CoordinatorStore(client, CoordinatorPaths(zk_root, kafka_word_count.name))
        drpc = DRPCExecutor(kafka_word_count, store=store, states=StateBinding(state_url))
        return drpc.execute("words", DRPC_WORDS)
    finally:
        client.stop()
        client.close()


def _read_per_txid(state_url: str) -> dict[int, int]:
    """Print the offsets each committed txid read per partition (the ledger's batch archive);
    return its records by txid."""
    from airflow_trident.batch.ledger import CommitLedger

    read: dict[int, int] = {}
    for row in CommitLedger(state_url).rows(TOPOLOGY):
        archive = json.loads(row["batch_meta"] or "{}")
        parts: dict[str, Any] = archive.get("spouts", {}).get("sentences", {}).get("partitions", {})
        ranges = {p: f"[{m['first']}, {m['next']})" for p, m in sorted(parts.items()) if m}
        print(f"  txid {row['txid']}: read {row['records_in']} records, offsets {ranges}; "
              f"wrote {row['keys_written']} keys")  # fmt: skip
        read[int(row["txid"])] = int(row["records_in"] or 0)
    return read


def main(argv: Sequence[str] | None = None) -> int:
    """Run the batches and the replay; return 0 when every run succeeded, the replay changed
    nothing and the counts equal the produced sentences' words."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--records", type=int, default=40, help="records produced per batch")
    parser.add_argument("--work-dir", default=".work/kafka-demo")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per DAG run")
    parser.add_argument("--connect-port", type=int, default=CONNECT_PORT,
                        help="the local Spark Connect server's port")  # fmt: skip
    bootstrap = os.environ.get("TRIDENT_KAFKA_BOOTSTRAP") or DEFAULT_BOOTSTRAP
    parser.add_argument("--bootstrap", default=bootstrap,
                        help="the Kafka broker (bootstrap.servers)")  # fmt: skip
    parser.add_argument("--topic", default="trident_sentences",
                        help="the topic (deleted and made anew)")  # fmt: skip
    parser.add_argument("--zk-root", default=ZK_ROOT, help="the DAG's ZooKeeper root")
    args = parser.parse_args(argv)
    started = time.monotonic()
    work = Path(args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    state_url = f"sqlite:///{work / 'state.db'}"
    _reset(work, args.zk_root, args.bootstrap, args.topic)
    env_vars = {**trident_env(work), "TRIDENT_KAFKA_TOPIC": args.topic}
    os.environ.update(env_vars)  # before the example module reads TRIDENT_KAFKA_TOPIC
    produced: list[list[str]] = []
    ok = True
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(1) as pool:
        # the Connect server's JVM starts while Airflow's metadata database is made (~20 s)
        connect = pool.submit(
            stack.enter_context, running_connect_server(work / "connect", port=args.connect_port)
        )
        home = prepare_airflow_home(work / "airflow", dags_folder=DAGS_FOLDER)
        write_ui_config(home, port=UI_PORT)
        conns = kafka_connections(work, args.bootstrap, args.connect_port, args.zk_root)
        store_connections(home, conns)
        print(f"Airflow home {home.path}; DAG {DAG_ID}; state {state_url}")
        print(f"Kafka {args.bootstrap}, topic {args.topic!r} (connection trident_kafka)")
        port = free_port()  # the tasks' processes talk to a private API server
        env = {**env_vars, **server_env(port)}
        stack.enter_context(serving_airflow(home, port=port, components=("api-server",), env=env))
        print(f"Spark Connect server {connect.result()} (logs in {work / 'connect'})")
        for i in range(1, args.batches + 1):
            produced.append(_produce(args.bootstrap, args.topic, args.records, seed=i))
            print(f"produced {args.records} sentences into {args.topic} (seed {i})")
            result = run_dag_test(
                DAG_ID, home=home, extra_env=env, timeout_s=args.timeout, use_executor=True
            )
            print(f"batch {i}: run {result.run_id} -> {result.run_state} {result.task_states}")
            ok = ok and result.ok
        from airflow_trident.examples.kafka import SENTENCES, word_counts

        vocabulary = sorted(word_counts(SENTENCES))
        before = _counts(state_url, vocabulary)
        # records after the batches' ranges: the replay re-reads txid 1's offsets, not these
        _produce(args.bootstrap, args.topic, args.records, seed=args.batches + 1)
        print(f"produced {args.records} more sentences (seed {args.batches + 1}), then replay")
        replay = run_dag_test(DAG_ID, home=home, extra_env=env, conf={"txid": 1},
                              timeout_s=args.timeout, use_executor=True)  # fmt: skip
        print(f"replay of txid 1: run {replay.run_id} -> {replay.run_state} {replay.task_states}")
    after = _counts(state_url, vocabulary)
    print("what each committed txid read:")
    read = _read_per_txid(state_url)
    expected = word_counts(s for batch in produced for s in batch)
    print(f"counts after {args.batches} batches and the replay, vs the words produced:")
    for word in vocabulary:
        mark = "" if after[word] == expected[word] else "   <-- MISMATCH"
        print(f"  {word:8} {after[word]:5} produced {expected[word]:5}{mark}")
    print(f"DRPC words({DRPC_WORDS!r}) -> {_drpc(state_url, args.zk_root)}")
    per_batch = {i: args.records for i in range(1, args.batches + 1)}
    equal = set(expected) <= set(vocabulary) and all(after[w] == expected[w] for w in vocabulary)
    checks = {
        "every DAG run succeeded": ok and replay.ok,
        "the replay of txid 1 changed no count": before == after,
        "each txid read its batch's records": read == per_batch,
        "every count equals the words produced": equal,
    }
    for label, passed in checks.items():
        print(f"{'OK' if passed else 'FAILED'}: {label}")
    print(f"demo took {time.monotonic() - started:.0f} s")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
