"""LocalRunner: a failed batch is retried by the next call (no run id needed), and replays."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from airflow_trident.batch.runner import LocalRunner
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.operation import Count, Filter, Split
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
    assert runner.store.committed_txid() == 3
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
    assert runner.store.current_txid() == 1
