"""Map states over the in-memory store: the three rules, caching and global values."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_trident.errors import (
    ConfigurationError,
    StateBehindError,
    StateError,
    UnknownStateTypeError,
)
from airflow_trident.state.base import StateType
from airflow_trident.state.combine import CombineOp
from airflow_trident.state.map.backing import MemoryBackingMap
from airflow_trident.state.map.cached import CachedMap
from airflow_trident.state.map.non_transactional import NonTransactionalMap
from airflow_trident.state.map.opaque import OpaqueMap
from airflow_trident.state.map.snapshot import SnapshottableMap
from airflow_trident.state.map.transactional import TransactionalMap
from airflow_trident.state.values import OpaqueValue
from airflow_trident.state.values import TransactionalValue as TV


def count_batch(state: Any, txid: int, words: list[str]) -> None:
    counts: dict[tuple[str], int] = {}
    for w in words:
        counts[(w,)] = counts.get((w,), 0) + 1
    state.begin_commit(txid)
    state.multi_combine(list(counts), list(counts.values()), CombineOp.SUM)
    state.commit(txid)


def test_seed_man_dog_apple() -> None:
    # Given man=3@1, dog=4@3, apple=6@2
    store = MemoryBackingMap()
    store.multi_put([("man",), ("dog",), ("apple",)], [TV(1, 3), TV(3, 4), TV(2, 6)])
    # When txid 3 carries man, man, dog
    count_batch(TransactionalMap(store), 3, ["man", "man", "dog"])
    # Then man=5@3, dog=4@3 (already counted), apple untouched
    assert dict(store.items()) == {("man",): TV(3, 5), ("dog",): TV(3, 4), ("apple",): TV(2, 6)}


def test_transactional_replay_does_not_double() -> None:
    state = TransactionalMap(MemoryBackingMap())
    for txid in (1, 2, 2, 2):
        count_batch(state, txid, ["a", "a", "b"])
    assert state.multi_get([("a",), ("b",)]) == [4, 2]


def test_opaque_replay_with_different_batch_recomputes() -> None:
    state = OpaqueMap(MemoryBackingMap())
    count_batch(state, 1, ["a"])
    count_batch(state, 2, ["a", "a", "a"])
    # When txid 2 is re-emitted with other content
    count_batch(state, 2, ["a", "b"])
    # Then txid 2's first attempt left no trace
    assert state.multi_get([("a",), ("b",)]) == [2, 1]


def test_non_transactional_counts_every_attempt() -> None:
    state = NonTransactionalMap(MemoryBackingMap())
    count_batch(state, 1, ["a"])
    count_batch(state, 1, ["a"])
    assert state.multi_get([("a",)]) == [2]


@pytest.mark.parametrize("cls", [TransactionalMap, OpaqueMap])
def test_batch_behind_state_writes_nothing(cls: type[TransactionalMap | OpaqueMap]) -> None:
    # Given "x" written by txid 5 and "y" by txid 1
    store = MemoryBackingMap()
    state = cls(store, name="counts")
    count_batch(state, 1, ["y"])
    count_batch(state, 5, ["x"])
    before = dict(store.items())
    # When txid 3 updates both
    state.begin_commit(3)
    with pytest.raises(StateBehindError, match=r"batch txid 3 .*txid 5"):
        state.multi_update([("y",), ("x",)], [lambda v: v + 1, lambda v: v + 1])
    # Then neither key changed
    assert dict(store.items()) == before


def test_update_outside_commit_is_an_error_naming_state() -> None:
    state = OpaqueMap(MemoryBackingMap(), name="scores")
    with pytest.raises(StateError, match=r"'scores'.*begin_commit"):
        state.multi_update([("a",)], [lambda v: 1])


def test_commit_of_other_txid_is_an_error() -> None:
    state = TransactionalMap(MemoryBackingMap())
    state.begin_commit(2)
    with pytest.raises(StateError, match=r"commit\(3\) without begin_commit\(3\)"):
        state.commit(3)


def test_opaque_multi_put_keeps_prev() -> None:
    store = MemoryBackingMap()
    state = OpaqueMap(store)
    for txid, value in ((1, "a"), (2, "b"), (2, "c")):
        state.begin_commit(txid)
        state.multi_put([("k",)], [value])
        state.commit(txid)
    assert store.multi_get([("k",)]) == [OpaqueValue(2, "c", "a")]


class Counting(MemoryBackingMap):
    def __init__(self) -> None:
        super().__init__()
        self.gets: list[list[Any]] = []

    def multi_get(self, keys: Any) -> list[Any]:
        self.gets.append(list(keys))
        return super().multi_get(keys)


def test_cached_map_serves_hits_and_evicts_least_recent() -> None:
    # Given a cache of 2 in front of a store that records reads
    store = Counting()
    state = TransactionalMap(CachedMap(store, max_size=2))
    count_batch(state, 1, ["a", "b", "c"])
    store.gets.clear()
    # When we read b and c (cached: the last two written), then a (evicted)
    assert state.multi_get([("b",), ("c",)]) == [1, 1]
    assert store.gets == []
    assert state.multi_get([("a",)]) == [1]
    # Then only a reached the store
    assert store.gets == [[("a",)]]


def test_cached_map_forgets_writes_of_a_rolled_back_commit() -> None:
    store = Counting()
    cache = CachedMap(store, max_size=10)
    cache.begin_commit(1)
    cache.multi_put([("a",)], [TV(1, 1)])
    cache.rollback()
    store.multi_put([("a",)], [None])  # the store rolled back too
    assert cache.multi_get([("a",)]) == [None]


def test_cached_map_rejects_bad_size() -> None:
    with pytest.raises(ConfigurationError, match=r"max_size"):
        CachedMap(MemoryBackingMap(), max_size=0)


def test_snapshottable_global_count_replay() -> None:
    total = SnapshottableMap(OpaqueMap(MemoryBackingMap()))
    for txid, n in ((1, 5), (2, 3), (2, 4)):
        total.begin_commit(txid)
        total.combine(n, CombineOp.SUM)
        total.commit(txid)
    assert total.get() == 9


def test_unknown_state_type() -> None:
    with pytest.raises(UnknownStateTypeError, match=r"'eventual'.*'opaque'"):
        StateType.parse("eventual")


def test_repeated_keys_in_one_combine_are_folded() -> None:
    # Given the seed's batch as raw deltas (man twice), When combined in one call
    state = TransactionalMap(MemoryBackingMap())
    state.begin_commit(3)
    state.multi_combine([("man",), ("man",), ("dog",)], [1, 1, 1], CombineOp.SUM)
    state.commit(3)
    # Then both men count
    assert state.multi_get([("man",), ("dog",)]) == [2, 1]
