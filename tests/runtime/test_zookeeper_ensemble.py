"""Batches over a three-server ZooKeeper ensemble while the server the client uses is killed
(``SIGKILL``) and restarted: they go on, exact, every txid in the ledger once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import TridentError
from airflow_trident.operation import Count, Split
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology
from tests.harness.servers import PrivateZooKeeperEnsemble

pytestmark = pytest.mark.integration

BATCHES, PER_BATCH = 24, 5
DATA = {p: [(f"w{i % 7} w{(i * 3) % 11}",) for i in range(BATCHES * PER_BATCH)] for p in ("a", "b")}


def make_steps(store: CoordinatorStore, url: str) -> BatchSteps:
    t = TridentTopology(store.paths.topology)
    t.new_stream("lines", MemoryTransactionalSpout(DATA, ["line"], PER_BATCH)).each(
        ["line"], Split(), ["word"]
    ).group_by(["word"]).persistent_aggregate(
        sql_state(url, "counts", "transactional", key_fields=("word",), value_type="bigint"),
        Count(), ["count"], name="counts",
    )  # fmt: skip
    return BatchSteps(t, store, keep_txids=4, ledger=CommitLedger(url))


def run_all(steps: BatchSteps, errors: list[str]) -> None:
    """Run batches 1..BATCHES, each retried with its run id (as Airflow retries a task)."""
    for i in range(1, BATCHES + 1):
        for _attempt in range(100):
            try:
                steps.run_batch(f"scheduled__{i:03d}")
                break
            except (KazooException, TridentError) as error:  # the connection is being moved
                errors.append(f"batch {i}: {type(error).__name__}: {error}")
                time.sleep(0.2)
        else:
            return


def wait_until(condition: object, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_batches_go_on_exactly_when_the_connected_zookeeper_server_is_killed_and_restarted(
    tmp_path: Path, unique_name: str
) -> None:
    # Given a three-server ensemble, a client listing all three, batches running on it
    url = f"sqlite:///{tmp_path}/state.db"
    with PrivateZooKeeperEnsemble(tmp_path) as ensemble:
        client = KazooClient(hosts=ensemble.hosts, timeout=10.0)
        client.start(timeout=30)
        try:
            store = CoordinatorStore(client, CoordinatorPaths("/trident_test", unique_name))
            steps = make_steps(store, url)
            errors: list[str] = []
            worker = threading.Thread(target=run_all, args=(steps, errors), daemon=True)
            worker.start()
            # When the server the client is connected to is killed mid-run, then restarted
            wait_until(lambda: store.commits.committed_txid() >= 3, "txid 3")
            victim = ensemble.connected_node()
            assert victim.client_connections() >= 1  # the server our client uses
            victim.kill()
            killed_at = store.commits.committed_txid()
            wait_until(
                lambda: store.commits.committed_txid() >= killed_at + 5, "batches after the kill"
            )
            victim.start()
            ensemble.wait_for_quorum()
            worker.join(timeout=120)
            # Then every batch committed once, with the ensemble back at three servers
            assert not worker.is_alive()
            assert killed_at < BATCHES, "the kill came after the last batch"
            assert store.commits.committed_txid() == BATCHES, errors
            assert sorted(n.mode or "" for n in ensemble.nodes) == ["follower", "follower",
                                                                    "leader"]  # fmt: skip
            ledger = CommitLedger(url).rows(unique_name)
            assert [row["txid"] for row in ledger] == list(range(1, BATCHES + 1))
            # And the counts equal the words counted directly
            expected = Counter(w for lines in DATA.values() for (line,) in lines
                               for w in line.split())  # fmt: skip
            with sa.create_engine(url).connect() as conn:
                rows = conn.execute(sa.text("SELECT word, val FROM counts")).all()
            assert {word: int(val) for word, val in rows} == dict(expected)
        finally:
            if client.connected:  # else a kazoo call would wait for a server for ever
                store.delete_all()
            client.stop()
            client.close()
