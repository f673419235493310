"""The in-process runtime's side of the Kafka ways in (issue 35; the DAG runs' side, on Spark
under a real scheduler, is ``tests/e2e/test_kafka_scheduler.py``): the topology those DAGs run
(:mod:`tests.harness.kafka_topologies`), read through an Airflow ``kafka`` connection, coordinated
in ZooKeeper, its transactional state and commit ledger in PostgreSQL. A batch whose processing
fails once is retried with its txid; a committed txid run again after more records were produced
(a clear) changes nothing and emits exactly its offsets again; txids run again by range twice,
with a new txid between (what ``airflow-trident backfill`` makes runs of), change nothing; the
counts equal the words produced after each step. ~4 s."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.runner import LocalRunner
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import BatchFailedError
from airflow_trident.examples.kafka import produce_sentences, word_counts
from airflow_trident.state.binding import StateBinding
from tests.harness.kafka import create_topic, unique_topic
from tests.harness.kafka_topologies import (
    CONNECTION_ID,
    FAIL_ONCE_ENV,
    TX_TOPIC_ENV,
    kafka_tx_word_count,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def connection(kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The Airflow ``kafka`` connection the topology names, resolved as in a task."""
    from airflow_trident import connections
    from airflow_trident.hooks.connections import install

    extra = {"bootstrap.servers": kafka_bootstrap}
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONNECTION_ID.upper()}",
                       json.dumps({"conn_type": "kafka", "extra": extra}))  # fmt: skip
    install()
    try:
        yield
    finally:
        connections.install_resolver(None)


def _ranges(ledger: CommitLedger, topology: str) -> dict[int, dict[int, tuple[int, int]]]:
    out: dict[int, dict[int, tuple[int, int]]] = {}
    for row in ledger.rows(topology):
        parts: dict[str, Any] = json.loads(row["batch_meta"])["spouts"]["sentences"]["partitions"]
        out[int(row["txid"])] = {
            int(m["partition"]): (int(m["first"]), int(m["next"])) for m in parts.values() if m
        }
    return out


@pytest.mark.usefixtures("connection")
def test_retry_clear_and_backfill_twice_in_process_on_zookeeper_and_postgresql(
    kafka_bootstrap: str,
    zk_client: Any,
    pg_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the DAG runs' topology over a topic of its own, failing its first processing once
    topic = unique_topic("kwi")
    create_topic(kafka_bootstrap, topic, partitions=2)
    monkeypatch.setenv(TX_TOPIC_ENV, topic)
    monkeypatch.setenv(FAIL_ONCE_ENV, str(tmp_path / "failed-once"))
    topology = kafka_tx_word_count()
    store = CoordinatorStore(zk_client, CoordinatorPaths("/trident_test", topology.name))
    ledger = CommitLedger(pg_url)
    runner = LocalRunner(topology, store=store, states=StateBinding(pg_url), ledger=ledger)
    produced: list[list[str]] = []

    def produce(n: int) -> None:
        produced.append(produce_sentences(kafka_bootstrap, topic, n, seed=len(produced) + 1))

    def counts() -> dict[str, int]:
        words = sorted(word_counts(s for b in produced for s in b))
        got = runner.state("counts").multi_get([(w,) for w in words])
        return {w: int(c) for w, c in zip(words, got, strict=True) if c is not None}

    def expected(batches: int) -> dict[str, int]:
        return dict(word_counts(s for b in produced[:batches] for s in b))

    try:
        # When txid 1 fails in its processing, then runs again (a retry)
        produce(10)
        with pytest.raises(BatchFailedError):
            runner.run_batch()
        assert store.commits.committed_txid() == 0
        report = runner.run_batch()
        # Then it is txid 1 again and counts its records once
        assert (report.txid, report.committed, report.records_in) == (1, True, 10)
        assert counts() == expected(1)
        produce(6)
        assert runner.run_batch().txid == 2
        assert counts() == expected(2)
        # When txid 1 runs again after more records were produced (a clear)
        produce(8)
        replay = runner.replay(1)
        # Then it changes nothing, and its emit reads exactly its offsets again
        assert (replay.txid, replay.committed) == (1, False)
        assert counts() == expected(2)
        emitted = runner.steps.emit(runner.steps.plan(1))["sentences"]
        offsets = {p: [row[-3] for row in rows] for p, rows in emitted.items()}
        assert offsets == {f"{topic}:0": [0, 1, 2, 3, 4], f"{topic}:1": [0, 1, 2, 3, 4]}
        # And txids 1..2 again, a new txid 3, then 2..3 again (two backfills)
        for txid in (1, 2):
            runner.replay(txid)
        assert runner.run_batch().txid == 3
        for txid in (2, 3):
            runner.replay(txid)
        # Then the counts are the words produced, each txid read its batch's offsets
        assert counts() == expected(3)
        assert _ranges(ledger, topology.name) == {
            1: {0: (0, 5), 1: (0, 5)},
            2: {0: (5, 8), 1: (5, 8)},
            3: {0: (8, 12), 1: (8, 12)},
        }
        assert runner.steps.is_ready() is False
    finally:
        store.delete_all()
