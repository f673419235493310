"""Rebuilding a new state from the batch archive (the ledger) over a txid range: real
ZooKeeper for the live runs (with metadata rotated away), SQLite state and ledger."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_trident import cli
from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.rebuild import rebuild_states
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import BatchIncompleteError, ConfigurationError, StateBehindError
from airflow_trident.operation import Count, Function, Split
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.memory import MemoryOpaqueSpout, MemoryTransactionalSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentCollector, TridentTuple

pytestmark = pytest.mark.integration

WORDS = ["apple", "avocado", "bean", "cherry", "date", "egg", "fig", "grape", "kiwi", "lemon"]
DATA = {  # no two batches alike: a replay from the wrong offset gives other counts
    f"p{p}": [(" ".join(WORDS[(p * 7 + i * 3 + k) % len(WORDS)] for k in range(i % 3 + 1)),)
              for i in range(8)]
    for p in range(2)
}  # fmt: skip
TAKE = 2
BATCHES = 4


def words_in(batches: int) -> Counter[str]:
    return Counter(
        w for rows in DATA.values() for (s,) in rows[: batches * TAKE] for w in s.split()
    )


class FirstLetter(Function):
    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((tuple_[0][0],))


def topology(name: str, url: str, *, opaque: bool, with_letters: bool) -> TridentTopology:
    """Words counted per word; v2 (``with_letters``) also counts words per first letter."""
    kind = "opaque" if opaque else "transactional"
    spout = (MemoryOpaqueSpout if opaque else MemoryTransactionalSpout)(DATA, ["line"], TAKE)
    t = TridentTopology(name)
    words = t.new_stream("lines", spout).each(["line"], Split(), ["word"])
    words.group_by(["word"]).persistent_aggregate(
        sql_state(url, "counts", kind, key_fields=("word",), value_type="bigint"),
        Count(), ["count"], name="counts",
    )  # fmt: skip
    if with_letters:
        words.each(["word"], FirstLetter(), ["letter"]).group_by(["letter"]).persistent_aggregate(
            sql_state(url, "letters", kind, key_fields=("letter",), value_type="bigint"),
            Count(), ["count"], name="letters",
        )  # fmt: skip
    return t


def read(t: TridentTopology, state: str, keys: list[str]) -> dict[str, Any]:
    s = t.nodes[t.states[state]].factory.make_state()  # type: ignore[attr-defined]
    return {k: v for k, v in zip(keys, s.multi_get([(k,) for k in keys]), strict=True) if v}


@pytest.fixture(params=["transactional", "opaque"])
def live(
    request: pytest.FixtureRequest, zk_store: CoordinatorStore, tmp_path: Path
) -> tuple[str, CommitLedger, bool]:
    """Four batches committed by the live topology (v1), ZooKeeper keeping only 2 txids."""
    opaque = request.param == "opaque"
    url = f"sqlite:///{tmp_path}/state.db"
    ledger = CommitLedger(url)
    v1 = topology(zk_store.paths.topology, url, opaque=opaque, with_letters=False)
    steps = BatchSteps(
        v1, zk_store, StagingArea(str(tmp_path / "staging"), v1.name), keep_txids=2, ledger=ledger
    )
    for i in range(1, BATCHES + 1):
        txid = int(steps.begin(f"r{i}")["txid"])
        steps.process_local(txid)
        steps.commit(txid)
        steps.success(txid)
    assert zk_store.metas.get_meta("lines", 1) is None  # rotated away: only the ledger has txid 1
    assert read(v1, "counts", sorted(words_in(BATCHES))) == words_in(BATCHES)
    return url, ledger, opaque


def test_rebuild_fills_a_new_state_as_if_it_had_always_existed(
    live: tuple[str, CommitLedger, bool], zk_store: CoordinatorStore
) -> None:
    url, ledger, opaque = live
    v2 = topology(zk_store.paths.topology, url, opaque=opaque, with_letters=True)
    letters = sorted({w[0] for w in words_in(BATCHES)})
    counts_before = read(v2, "counts", sorted(words_in(BATCHES)))
    committed_before = zk_store.commits.committed_txid()

    summaries = rebuild_states(v2, ledger, 1, BATCHES, states=["letters"])

    assert [s["txid"] for s in summaries] == [1, 2, 3, 4]
    expected: Counter[str] = Counter()
    for word, n in words_in(BATCHES).items():
        expected[word[0]] += n
    assert read(v2, "letters", letters) == expected
    # the other state and the coordinator are untouched
    assert read(v2, "counts", sorted(words_in(BATCHES))) == counts_before
    assert zk_store.commits.committed_txid() == committed_before
    # and a second rebuild of the same range changes nothing
    assert rebuild_states(v2, ledger, 1, BATCHES, states=["letters"]) == []
    assert read(v2, "letters", letters) == expected


def test_an_interrupted_rebuild_resumes_after_the_last_txid_it_applied(
    live: tuple[str, CommitLedger, bool], zk_store: CoordinatorStore
) -> None:
    url, ledger, opaque = live
    v2 = topology(zk_store.paths.topology, url, opaque=opaque, with_letters=True)
    rebuild_states(v2, ledger, 1, 2, states=["letters"])  # "interrupted" after txid 2
    summaries = rebuild_states(v2, ledger, 1, BATCHES, states=["letters"])
    assert [s["txid"] for s in summaries] == [3, 4]
    expected: Counter[str] = Counter()
    for word, n in words_in(BATCHES).items():
        expected[word[0]] += n
    assert read(v2, "letters", sorted(expected)) == expected


def test_rebuild_into_a_state_that_already_holds_later_txids_fails_clearly(
    live: tuple[str, CommitLedger, bool], zk_store: CoordinatorStore
) -> None:
    url, ledger, opaque = live
    v2 = topology(zk_store.paths.topology, url, opaque=opaque, with_letters=True)
    # "counts" was written live up to txid 4 (and never rebuilt)
    with pytest.raises(StateBehindError, match="batch txid 1"):
        rebuild_states(v2, ledger, 1, BATCHES, states=["counts"])


def test_rebuild_of_a_range_with_an_unarchived_txid_writes_nothing(
    live: tuple[str, CommitLedger, bool], zk_store: CoordinatorStore
) -> None:
    url, ledger, opaque = live
    v2 = topology(zk_store.paths.topology, url, opaque=opaque, with_letters=True)
    with pytest.raises(BatchIncompleteError, match=r"txid 5 .*ledger holds txids 1\.\.4"):
        rebuild_states(v2, ledger, 1, 5, states=["letters"])
    assert read(v2, "letters", sorted({w[0] for w in words_in(BATCHES)})) == {}


def test_rebuild_refuses_an_unknown_state(
    live: tuple[str, CommitLedger, bool], zk_store: CoordinatorStore
) -> None:
    url, ledger, opaque = live
    v2 = topology(zk_store.paths.topology, url, opaque=opaque, with_letters=True)
    with pytest.raises(ConfigurationError, match="no state 'lettres'; its states: counts, letters"):
        rebuild_states(v2, ledger, 1, 2, states=["lettres"])


def letters_v2() -> TridentTopology:
    """v2 by reference, for the command line (name and database from the environment)."""
    name, url = os.environ["TRIDENT_TEST_TOPOLOGY"], os.environ["TRIDENT_STATE_URL"]
    return topology(name, url, opaque=False, with_letters=True)


@pytest.mark.parametrize("live", ["transactional"], indirect=True)
def test_rebuild_command_line(
    live: tuple[str, CommitLedger, bool],
    zk_store: CoordinatorStore,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, _, _ = live
    monkeypatch.setenv("TRIDENT_TEST_TOPOLOGY", zk_store.paths.topology)
    monkeypatch.setenv("TRIDENT_STATE_URL", url)
    ref = "tests.runtime.test_rebuild:letters_v2"
    assert cli.main(["rebuild", ref, "--state", "letters", "--to-txid", "2"]) == 0
    assert cli.main(["rebuild", ref, "--state", "letters"]) == 0  # to the last committed
    out = capsys.readouterr().out
    assert "txids 1..2" in out
    assert "txids 1..4" in out
    applied = [line.split(":")[0].strip() for line in out.splitlines() if line.startswith("  txid")]
    assert applied == ["txid 1", "txid 2", "txid 3", "txid 4"]
    expected: Counter[str] = Counter()
    for word, n in words_in(BATCHES).items():
        expected[word[0]] += n
    assert read(letters_v2(), "letters", sorted(expected)) == expected
    # an unarchived txid: a clear message, exit status 2, nothing written
    assert cli.main(["rebuild", ref, "--state", "letters", "--to-txid", "9"]) == 2
    assert "txid 5" in capsys.readouterr().err


def test_rebuild_through_a_state_binding_writes_only_to_that_database(
    pg_url: str, unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state database comes from the run (a connection's URL), not from a variable set at
    the right moment: states made with ``url=None`` follow the binding, for live runs and
    rebuilds alike, and nothing lands in the fallback database."""
    from airflow_trident.batch.runner import LocalRunner
    from airflow_trident.state.binding import StateBinding

    monkeypatch.delenv("TRIDENT_STATE_URL", raising=False)
    monkeypatch.setenv("TRIDENT_HOME", str(tmp_path / "home"))
    binding = StateBinding(pg_url)

    def v(with_letters: bool) -> TridentTopology:
        t = TridentTopology(unique_name)
        words = t.new_stream(
            "lines", MemoryTransactionalSpout(DATA, ["line"], TAKE)
        ).each(["line"], Split(), ["word"])
        words.group_by(["word"]).persistent_aggregate(
            sql_state(None, f"{unique_name}_c", "transactional", key_fields=("word",),
                      value_type="bigint"), Count(), ["count"], name="counts",
        )  # fmt: skip
        if with_letters:
            letters = words.each(["word"], FirstLetter(), ["letter"]).group_by(["letter"])
            letters.persistent_aggregate(
                sql_state(None, f"{unique_name}_l", "transactional", key_fields=("letter",),
                          value_type="bigint"), Count(), ["count"], name="letters",
            )  # fmt: skip
        return t

    ledger = CommitLedger(pg_url)
    LocalRunner(v(False), states=binding, ledger=ledger).run(BATCHES)
    summaries = rebuild_states(
        v(True), ledger, 1, BATCHES, states=["letters"], binding=binding
    )
    assert [s["txid"] for s in summaries] == list(range(1, BATCHES + 1))
    letters = Counter({w[0]: 0 for w in WORDS})
    for word, n in words_in(BATCHES).items():
        letters[word[0]] += n
    got = LocalRunner(v(True), states=binding).state("letters").multi_get([(k,) for k in letters])
    assert dict(zip(letters, got, strict=True)) == {k: (n or None) for k, n in letters.items()}
    assert not (tmp_path / "home" / "state.db").exists()
