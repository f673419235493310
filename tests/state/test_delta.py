"""Exactly-once into Delta Lake (delta-rs): each partition's rows of a txid go in one Delta
commit carrying the application transaction; a replayed txid is skipped by the table itself.

Tables are read back with ``pyarrow.parquet.read_table(dt.file_uris())``: delta-rs'
``to_pyarrow_table`` often aborts the process at exit (delta-io/delta-rs#2184)."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.errors import ConfigurationError, NotExactlyOnceError, StateError
from airflow_trident.operation import Split
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.memory import MemoryOpaqueSpout, MemoryTransactionalSpout
from airflow_trident.state.delta import DeltaWriter, delta_state
from airflow_trident.topology import TridentTopology


def read(path: Path) -> list[dict[str, Any]]:
    """Every row of the Delta table at ``path``, sorted."""
    table = pq.read_table(DeltaTable(str(path)).file_uris())
    return sorted(table.to_pylist(), key=lambda r: sorted(r.items()))


def commit(state: Any, txid: int, rows: list[dict[str, Any]]) -> None:
    state.begin_commit(txid)
    state.write(rows)
    state.commit(txid)


def test_a_replayed_txid_is_skipped_and_the_next_is_written(tmp_path: Path) -> None:
    # Given a Delta sink with txids 1 and 2 written
    sink = delta_state(str(tmp_path / "t"), "topo.events").make_state()
    commit(sink, 1, [{"k": "a", "n": 1}])
    commit(sink, 2, [{"k": "b", "n": 2}])
    # When txid 2 is committed again (with other rows: they must not land) and txid 3 comes
    commit(sink, 2, [{"k": "b", "n": 2}, {"k": "zzz", "n": 99}])
    commit(sink, 3, [{"k": "c", "n": 3}])
    # Then each txid's rows are there once, and the table records the partition's last txid
    assert [(r["k"], r["trident_txid"]) for r in read(tmp_path / "t")] == [
        ("a", 1), ("b", 2), ("c", 3),
    ]  # fmt: skip
    assert sink.written_txid() == 3
    assert DeltaTable(str(tmp_path / "t")).transaction_version("topo.events.p0of1") == 3


def test_merge_updates_matching_keys_and_a_replay_changes_nothing(tmp_path: Path) -> None:
    # Given a Delta sink MERGEing on "k"
    path = tmp_path / "m"
    sink = delta_state(str(path), "topo.latest", merge_keys=("k",), txid_column=None).make_state()
    commit(sink, 1, [{"k": "a", "n": 1}, {"k": "b", "n": 1}])
    # When txid 2 updates "a" (twice in the batch: the last wins) and adds "c", then replays
    commit(sink, 2, [{"k": "a", "n": 5}, {"k": "c", "n": 2}, {"k": "a", "n": 7}])
    commit(sink, 2, [{"k": "a", "n": 100}])
    # Then each key has its latest value of txid <= 2, once
    assert read(path) == [{"k": "a", "n": 7}, {"k": "b", "n": 1}, {"k": "c", "n": 2}]


def test_partitions_committing_at_once_each_land_once(tmp_path: Path) -> None:
    # Given 4 commit partitions of one txid writing the same table concurrently
    path = str(tmp_path / "c")
    factory = delta_state(path, "topo.par")
    states = [factory.make_state(i, 4) for i in range(4)]
    commit(states[0], 1, [{"p": 0, "i": 0}])  # the table exists

    def run(i: int) -> None:
        for txid in (2, 2):  # each partition also retries its commit
            commit(states[i], txid, [{"p": i, "i": j} for j in range(3)])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then txid 2 holds 3 rows per partition, no more, no fewer
    counts = Counter(r["p"] for r in read(tmp_path / "c") if r["trident_txid"] == 2)
    assert counts == {0: 3, 1: 3, 2: 3, 3: 3}


def test_a_replay_with_another_partition_count_is_refused(tmp_path: Path) -> None:
    # Given txid 1 written by 2 partitions
    factory = delta_state(str(tmp_path / "n"), "topo.n")
    commit(factory.make_state(0, 2), 1, [{"x": 1}])
    # When it is committed again by 3 partitions / Then refused, naming both counts
    again = factory.make_state(0, 3)
    with pytest.raises(StateError, match=r"written with 2 partitions .* again with 3"):
        commit(again, 1, [{"x": 1}])
    assert len(read(tmp_path / "n")) == 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"app_id": ""}, "app_id must be a non-empty string"),
        ({"merge_keys": "k"}, "merge_keys is a sequence"),
        ({"txid_column": "bad col"}, "txid column name 'bad col' is invalid"),
    ],
)
def test_bad_options_are_refused(tmp_path: Path, kwargs: dict[str, Any], match: str) -> None:
    options: dict[str, Any] = {"app_id": "a", **kwargs}
    with pytest.raises(ConfigurationError, match=match):
        delta_state(str(tmp_path), **options)


SENTENCES = {f"p{p}": [(f"w{p}{i} x",) for i in range(5)] for p in range(2)}


def word_events(path: Path) -> tuple[TridentTopology, MemoryTransactionalSpout]:
    """Every word of every sentence appended to a Delta table."""
    topology = TridentTopology("delta_words")
    spout = MemoryTransactionalSpout(SENTENCES, ["sentence"], take_per_batch=2)
    (
        topology.new_stream("sentences", spout)
        .each(["sentence"], Split(), ["word"])
        .partition_persist(
            delta_state(str(path), "delta_words.events"), ["word"], DeltaWriter(), name="events"
        )
    )
    return topology, spout


def test_replayed_and_half_committed_txids_leave_every_word_once(tmp_path: Path) -> None:
    # Given word events appended to Delta by in-process batches
    path = tmp_path / "events"
    topology, _ = word_events(path)
    store = MemoryCoordinatorStore(topology.name)
    steps = BatchSteps(topology, store, StagingArea(str(tmp_path / "staging"), topology.name))
    for run in ("r1", "r2"):
        txid = int(steps.begin(run)["txid"])
        steps.process_local(txid)
        assert steps.commit(txid)["applied"]
        steps.success(txid)
    # And txid 3 wrote Delta, then died before the coordinator's compare-and-set
    txid = int(steps.begin("r3")["txid"])
    steps.process_local(txid)
    plan = steps.plan(txid)
    steps.apply_staged(plan, steps.staging.verified_manifest(plan.attempt, plan.metas))
    assert store.commits.committed_txid() == 2
    # When txid 3 is processed and committed again, committed txid 1 is replayed, and the
    # batches run to the end of the data
    steps.process_local(txid)
    assert steps.commit(txid)["applied"]
    steps.success(txid)
    steps.replay(1)
    for i in range(4, 8):
        t = int(steps.begin(f"r{i}")["txid"])
        steps.process_local(t)
        steps.commit(t)
        steps.success(t)
    # Then the table holds every word of the source exactly once
    want = Counter(w for rows in SENTENCES.values() for (s,) in rows for w in s.split())
    assert Counter(r["word"] for r in read(path)) == want


def test_an_opaque_spout_into_delta_is_not_exactly_once(tmp_path: Path) -> None:
    topology = TridentTopology("delta_opaque")
    stream = topology.new_stream("s", MemoryOpaqueSpout(SENTENCES, ["sentence"], 2))
    with pytest.raises(NotExactlyOnceError):
        stream.partition_persist(delta_state(str(tmp_path), "x"), ["sentence"], DeltaWriter())


@pytest.mark.parametrize("as_uri", [False, True])
def test_a_path_that_is_a_plain_file_is_a_state_error_naming_state_txid_and_path(
    tmp_path: Path, as_uri: bool
) -> None:
    """Issue 19 (9): delta-rs raised a raw OSError with ANSI colour codes."""
    plain = tmp_path / "events"
    plain.write_text("not a table")
    path = f"file://{plain}" if as_uri else str(plain)
    sink = delta_state(path, "topo.events").make_state()
    sink.begin_commit(3)
    sink.write([{"word": "w"}])
    with pytest.raises(StateError) as info:
        sink.commit(3)
    text = str(info.value)
    assert "\x1b[" not in text
    for part in ("'topo.events'", "txid 3", repr(path), "hint:"):
        assert part in text, (part, text)
