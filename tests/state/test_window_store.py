"""The SQL window store on PostgreSQL: txids in order per window partition, one stored result
per txid even when two attempts race, and the cleanup of a commit."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from airflow_trident.errors import BatchNotReadyError
from airflow_trident.state.window import (
    SqlWindowStore,
    StoredTuple,
    WindowUpdate,
    sql_window_store,
)

pytestmark = pytest.mark.integration


def adds(*values: int, keep: int = 0) -> Any:
    """A compute adding ``values`` and returning how many tuples the window held before."""

    def compute(cursor: dict[str, Any] | None, live: list[StoredTuple]) -> WindowUpdate:
        held = [t.values[0] for t in live]
        return WindowUpdate([(None, (v,)) for v in values], [(tuple(held),)], {}, keep_pos=keep)

    return compute


@pytest.fixture
def store(pg_url: str, unique_name: str) -> SqlWindowStore:
    return sql_window_store(pg_url, table=unique_name).for_window(unique_name, "w").make_state()


def test_a_txid_ahead_of_its_window_partition_is_refused_and_writes_nothing(
    store: SqlWindowStore,
) -> None:
    # Given txid 1 processed in partition 0
    store.process(0, 1, adds(1))
    # When txid 3 comes before txid 2
    with pytest.raises(BatchNotReadyError, match=r"partition 0: txid 3 cannot be processed "
                       r"before txid 2 \(processed up to txid 1"):  # fmt: skip
        store.process(0, 3, adds(3))
    # Then nothing of it was stored, and partition 1 is independent
    assert list(store.pending()) == [(0, 1)]
    assert [t.values for t in store.held()[0]] == [(1,)]
    assert store.process(1, 3, adds(9)) == ([((),)], "new")


def test_two_attempts_of_a_txid_racing_store_it_once_and_return_the_same_results(
    store: SqlWindowStore,
) -> None:
    # Given two attempts of a window partition's first txid (no head row yet to lock), both
    # computing at once
    inside = threading.Barrier(2, timeout=30)
    outcomes: list[tuple[list[Any], str]] = []

    def attempt() -> None:
        def compute(cursor: dict[str, Any] | None, live: list[StoredTuple]) -> WindowUpdate:
            inside.wait()  # both attempts computed before either stores
            return adds(1, 2)(cursor, live)

        outcomes.append(store.process(0, 1, compute))

    # When both store
    threads = [threading.Thread(target=attempt) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    # Then one stored, the other read what it stored; the tuples are there once
    assert sorted(how for _, how in outcomes) == ["new", "retry"]
    assert outcomes[0][0] == outcomes[1][0] == [((),)]
    assert [t.values for t in store.held()[0]] == [(1,), (2,)]


def test_the_commit_removes_earlier_results_and_unneeded_tuples_once(
    pg_url: str, unique_name: str
) -> None:
    # Given txids 1-3 processed in two partitions; after txid 3, tuples from position 2 on
    # are still needed
    factory = sql_window_store(pg_url, table=unique_name).for_window(unique_name, "w")
    store = factory.make_state()
    for part in (0, 1):
        store.process(part, 1, adds(10, 11))
        store.process(part, 2, adds(12))
        store.process(part, 3, adds(13, keep=2))
    # When a state of another partition commits txid 3, then partition 0's
    other = factory.make_state(1, 2)
    other.begin_commit(3)
    other.commit(3)
    assert len(store.pending()) == 6
    store.begin_commit(3)
    store.commit(3)
    # Then only txid 3's results are left, and the tuples a later window needs
    assert sorted(store.pending()) == [(0, 3), (1, 3)]
    assert {p: [t.pos for t in ts] for p, ts in store.held().items()} == {0: [2, 3], 1: [2, 3]}
    # and a committed txid now emits nothing (its results are gone), the latest its results
    assert store.process(0, 2, adds(99)) == ([], "committed")
    assert store.process(0, 3, adds(99)) == ([((10, 11, 12),)], "retry")


def test_a_store_in_the_runs_database_never_shows_the_password() -> None:
    factory = sql_window_store(None).located_at("postgresql://u:secret@db/x")
    assert "secret" not in repr(factory)
    assert sql_window_store(None).located_at("sqlite://") is not None
