"""LocalRunner: a failed batch is retried by the next call (no run id needed), and replays."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.runner import LocalRunner
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.protocol import CoordinatorStoreProtocol
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.operation import Count, Filter, Split
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentTuple

DATA = {"p0": [("a b",), ("c a",), ("b",)], "p1": [("d",), ("a a",), ("e b",)]}
TOTAL = Counter(w for rows in DATA.values() for (s,) in rows for w in s.split())


class FailWhileArmed(Filter):
    """Keeps every word; raises while ``armed`` (a class switch the test flips)."""

    armed = False

    def is_keep(self, tuple_: TridentTuple) -> bool:
        if FailWhileArmed.armed:
            raise ConnectionError("source went away")
        return True


def word_count(name: str, url: str) -> TridentTopology:
    t = TridentTopology(name)
    (
        t.new_stream("lines", MemoryTransactionalSpout(DATA, ["line"], take_per_batch=1))
        .each(["line"], Split(), ["word"])
        .each(["word"], FailWhileArmed())
        .group_by(["word"])
        .persistent_aggregate(
            sql_state(url, "counts", "transactional", key_fields=("word",), value_type="bigint"),
            Count(),
            ["count"],
            name="counts",
        )
    )
    return t


def counts(runner: LocalRunner) -> dict[str, int]:
    values = runner.state("counts").multi_get([(w,) for w in TOTAL])
    return {w: v for w, v in zip(TOTAL, values, strict=True) if v is not None}


@pytest.fixture(params=["memory", "zookeeper"])
def runner(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> LocalRunner:
    FailWhileArmed.armed = False
    topology = word_count(unique_name, f"sqlite:///{tmp_path}/state.db")
    if request.param == "memory":
        return LocalRunner(topology)
    zk_store: CoordinatorStore = request.getfixturevalue("zk_store")  # named unique_name too
    return LocalRunner(topology, store=zk_store)


def test_a_failed_batch_is_retried_by_the_next_call_without_a_run_id(runner: LocalRunner) -> None:
    # Given batch 1 committed and batch 2 failing in its processing
    assert runner.run_batch().txid == 1
    FailWhileArmed.armed = True
    with pytest.raises(Exception, match="source went away"):
        runner.run_batch()
    FailWhileArmed.armed = False
    # When the user simply calls run_batch() again, as the docs show
    retried = runner.run_batch()
    # Then txid 2 is retried (not a new txid refused behind it), and the rest follows
    assert (retried.txid, retried.committed) == (2, True)
    assert [r.txid for r in runner.run(1)] == [3]
    assert runner.store.commits.committed_txid() == 3
    assert counts(runner) == dict(TOTAL)


def test_replay_of_a_committed_txid_changes_nothing(runner: LocalRunner) -> None:
    runner.run(3)
    before = counts(runner)
    report = runner.replay(2)
    assert (report.txid, report.committed) == (2, False)
    assert counts(runner) == before == dict(TOTAL)


def test_replay_of_an_unallocated_txid_is_refused(runner: LocalRunner) -> None:
    runner.run(1)
    with pytest.raises(Exception, match="txid 5"):
        runner.replay(5)
    assert runner.store.runs.current_txid() == 1


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> Iterator[str]:
    """The state database (states and commit ledger) of both ways of running a batch."""
    unique = unique_name
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/state.db"
        return
    url: str = request.getfixturevalue("pg_url")
    yield url
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # the tables the test's topologies made (named like them)
        query = sa.text("SELECT tablename FROM pg_tables WHERE tablename LIKE :n")
        for (name,) in conn.execute(query, {"n": f"{unique}%"}):
            conn.execute(sa.text(f'DROP TABLE IF EXISTS "{name}"'))
    engine.dispose()


def _counting(name: str, url: str) -> TridentTopology:
    """Word count into a table of its own (``name``), failing while FailWhileArmed is armed."""
    t = TridentTopology(name)
    t.new_stream("lines", MemoryTransactionalSpout(DATA, ["line"], take_per_batch=1)).each(
        ["line"], Split(), ["word"]
    ).each(["word"], FailWhileArmed()).group_by(["word"]).persistent_aggregate(
        sql_state(url, name, "transactional", key_fields=("word",), value_type="bigint"),
        Count(), ["count"], name="counts",
    )  # fmt: skip
    return t


@pytest.mark.parametrize("coordinator", ["memory", "zookeeper"])
def test_in_process_batches_number_attempts_as_the_dag_tasks_do(
    coordinator: str, database: str, unique_name: str, tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    # Given one topology run in-process (LocalRunner.run_batch) and its twin run step by step
    # as the DAG's tasks run it (begin, process, commit), each recording its commits in a ledger
    FailWhileArmed.armed = False
    names = {"in_process": unique_name, "tasks": f"{unique_name}_tasks"}
    stores: dict[str, CoordinatorStoreProtocol] = {}
    for way, name in names.items():
        if coordinator == "memory":
            stores[way] = MemoryCoordinatorStore(name)
        else:
            client = request.getfixturevalue("zk_client")
            root = request.getfixturevalue("zk_config").root
            store = CoordinatorStore(client, CoordinatorPaths(root, name))
            request.addfinalizer(store.delete_all)
            stores[way] = store
    ledger = CommitLedger(database)
    runner = LocalRunner(_counting(names["in_process"], database), store=stores["in_process"],
                         ledger=ledger)  # fmt: skip
    staging = StagingArea(str(tmp_path / "staging"), names["tasks"])
    tasks = BatchSteps(_counting(names["tasks"], database), stores["tasks"], staging,
                       ledger=ledger)  # fmt: skip

    def by_tasks(run_id: str) -> int:
        txid = int(tasks.begin(run_id)["txid"])
        tasks.process_local(txid)
        return int(tasks.commit(txid)["attempt_id"])

    # When txid 1 runs, then txid 2 fails in its processing and its whole run runs again
    # (in-process: the next run_batch; as tasks: the cleared run's begin and process again)
    attempts = {"in_process": [runner.run_batch().attempt_id], "tasks": [by_tasks("r1")]}
    FailWhileArmed.armed = True
    with pytest.raises(Exception, match="source went away"):
        runner.run_batch()
    with pytest.raises(Exception, match="source went away"):
        by_tasks("r2")
    FailWhileArmed.armed = False
    attempts["in_process"].append(runner.run_batch().attempt_id)
    attempts["tasks"].append(by_tasks("r2"))

    # Then both number the attempts alike: the first processing of a txid is attempt 1 (as the
    # process and commit tasks, the run's note and the Trident tab say), never 0
    assert attempts["in_process"] == attempts["tasks"]
    assert attempts["in_process"][0] == 1
    # And so do the ledger rows the status and the Trident tab show, and ZooKeeper's attempts
    rows = {way: [(r["txid"], r["attempt_id"]) for r in ledger.rows(name)]
            for way, name in names.items()}  # fmt: skip
    assert rows["in_process"] == rows["tasks"] == [(1, 1), (2, attempts["tasks"][1])]
    assert [stores[w].attempts.attempt(2) for w in names] == [
        TransactionAttempt(2, attempts["tasks"][1]),
        TransactionAttempt(2, attempts["tasks"][1]),
    ]
