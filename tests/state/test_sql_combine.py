"""multi_combine in SQL: the seed examples, behind-state errors, and a differential test proving
that the database computes exactly what the rule maps compute over the in-memory store.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from airflow_trident.errors import ConfigurationError, StateBehindError, StateError
from airflow_trident.state.base import StateType
from airflow_trident.state.combine import CombineOp
from airflow_trident.state.map.backing import MemoryBackingMap
from airflow_trident.state.map.base import RuleMap
from airflow_trident.state.map.cached import CachedMap
from airflow_trident.state.map.non_transactional import NonTransactionalMap
from airflow_trident.state.map.opaque import OpaqueMap
from airflow_trident.state.map.transactional import TransactionalMap
from airflow_trident.state.sql import SqlBackingMap, StateValueNotSerializableError
from airflow_trident.state.values import OpaqueValue
from airflow_trident.state.values import TransactionalValue as TV
from tests.state.test_sql_support import Db, db_fixture  # noqa: F401

MAPS: dict[StateType, type[RuleMap]] = {
    StateType.TRANSACTIONAL: TransactionalMap,
    StateType.OPAQUE: OpaqueMap,
    StateType.NON_TRANSACTIONAL: NonTransactionalMap,
}


class SpyStore(SqlBackingMap):
    """Records whether the SQL combine path ran (so a test cannot pass through the fallback)."""

    combined = 0

    def multi_combine(self, *args: Any, **kwargs: Any) -> None:
        type(self).combined += 1
        super().multi_combine(*args, **kwargs)


def spy(db: Db, state_type: str, **kwargs: Any) -> SpyStore:
    store = SpyStore(
        db.engine,
        db.table_name(),
        state_type=state_type,
        copy_threshold=db.copy_threshold,
        **kwargs,
    )
    db.track(store)
    return store


def combine(state: RuleMap, txid: int, keys: list[Any], deltas: list[Any], op: CombineOp) -> None:
    state.begin_commit(txid)
    state.multi_combine(keys, deltas, op)
    state.commit(txid)


# -- seed examples --------------------------------------------------------------------------
def test_seed_transactional_man_dog_apple(db: Db) -> None:
    # Given man=3@1, dog=4@3, apple=6@2
    store = spy(db, "transactional", value_type="bigint")
    store.multi_put([("man",), ("dog",), ("apple",)], [TV(1, 3), TV(3, 4), TV(2, 6)])
    before = SpyStore.combined
    # When txid 3 carries man, man, dog (repeated keys are folded)
    combine(TransactionalMap(store), 3, [("man",), ("man",), ("dog",)], [1, 1, 1], CombineOp.SUM)
    # Then man=5@3, dog=4@3 (already counted by txid 3), apple untouched; the SQL path ran
    assert store.multi_get([("man",), ("dog",), ("apple",)]) == [TV(3, 5), TV(3, 4), TV(2, 6)]
    assert SpyStore.combined == before + 1


@pytest.mark.parametrize(
    ("txid", "expected"), [(3, OpaqueValue(3, 6, 4)), (2, OpaqueValue(2, 3, 1))]
)
def test_seed_opaque(db: Db, txid: int, expected: OpaqueValue[int]) -> None:
    # Given value 4, prev 1, written by txid 2
    store = db.store("opaque", value_type="bigint")
    store.multi_put([("total",)], [OpaqueValue(2, 4, 1)])
    # When a partial count of 2 arrives with the next txid (3) or a replay of txid 2
    combine(OpaqueMap(store), txid, [("total",)], [2], CombineOp.SUM)
    # Then 3 builds on curr (6/4/3); the replay recomputes from prev (3/1/2)
    assert store.multi_get([("total",)]) == [expected]
    assert db.raw_rows(store.table) == [("total", expected.curr_txid, expected.curr, expected.prev)]


@pytest.mark.parametrize("value_type", ["json", "bigint"])
def test_seed_opaque_generic_and_sql_paths_agree(db: Db, value_type: str) -> None:
    # Given the seed's opaque value in a json store (generic path) or bigint store (SQL path)
    store = db.store("opaque", value_type=value_type)
    store.multi_put([("total",)], [OpaqueValue(2, 4, 1)])
    # When batch 3 adds 2 through multi_combine
    combine(OpaqueMap(store), 3, [("total",)], [2], CombineOp.SUM)
    # Then both paths give 6/4/3
    assert store.multi_get([("total",)]) == [OpaqueValue(3, 6, 4)]


@pytest.mark.parametrize("op", list(CombineOp))
def test_null_is_the_identity(db: Db, op: CombineOp) -> None:
    # Given a stored NULL value and a stored 5
    store = db.store("non_transactional", value_type="bigint")
    store.multi_put([("null",), ("five",)], [None, 5])
    # When 3 is folded into both, and NULL into a new key and into 5
    combine(NonTransactionalMap(store), 1, [("null",), ("five",)], [3, None], op)
    combine(NonTransactionalMap(store), 2, [("new",), ("null",)], [None, 4], op)
    # Then op(NULL, d) = d, op(v, NULL) = v, and a new key with a NULL delta stores NULL
    expected_null = {CombineOp.SUM: 7, CombineOp.MIN: 3, CombineOp.MAX: 4}[op]
    assert store.multi_get([("null",), ("five",), ("new",)]) == [expected_null, 5, None]
    assert ("new", None, None, None) in db.raw_rows(store.table)


# -- behind state ---------------------------------------------------------------------------
@pytest.mark.parametrize("state_type", ["transactional", "opaque"])
def test_state_ahead_raises_and_writes_nothing(db: Db, state_type: str) -> None:
    # Given keys at txid 4 and one key ("late") at txid 7
    store = db.store(state_type, value_type="bigint")
    state = MAPS[StateType.parse(state_type)](store)
    combine(state, 4, [("a",), ("late",)], [1, 1], CombineOp.SUM)
    combine(state, 7, [("late",)], [1], CombineOp.SUM)
    before = db.raw_rows(store.table)
    # When batch 5 writes a new key, then combines into a, late and a new key in one call
    state.begin_commit(5)
    state.multi_combine([("new",)], [1], CombineOp.SUM)
    with pytest.raises(StateBehindError) as info:
        state.multi_combine([("a",), ("late",), ("b",)], [1, 1, 1], CombineOp.SUM)
    # Then the error names the table, both txids and the key, and nothing of txid 5 is stored
    text = str(info.value)
    assert store.table in text
    assert "batch txid 5" in text
    assert "txid 7" in text
    assert "('late',)" in text
    assert db.raw_rows(store.table) == before
    # And the commit is gone: writes are refused, commit fails, until rollback
    with pytest.raises(StateError, match="rolled back after an error"):
        state.multi_combine([("a",)], [1], CombineOp.SUM)
    with pytest.raises(StateError, match="rolled back after an error"):
        state.commit(5)
    assert db.raw_rows(store.table) == before
    # And after rollback the store is usable: reads now, and the next batch commits
    state.rollback()
    assert state.multi_get([("a",)]) == [1]
    combine(state, 8, [("a",), ("late",)], [1, 1], CombineOp.SUM)
    assert state.multi_get([("a",), ("late",)]) == [2, 3]


def test_state_ahead_outside_a_commit_writes_nothing(db: Db) -> None:
    # Given a key at txid 9
    store = db.store("opaque", value_type="double")
    store.multi_put([("x",)], [OpaqueValue(9, 1.0, None)])
    # When the store combines batch 8 into it and a new key, outside any commit
    with pytest.raises(StateBehindError, match="txid 9"):
        store.multi_combine([("y",), ("x",)], [1, 1], CombineOp.MAX, StateType.OPAQUE, 8)
    # Then nothing was written
    assert db.raw_rows(store.table) == [("x", 9, 1.0, None)]


def test_row_without_txid_in_opaque_table(db: Db) -> None:
    # Given a row written as non-transactional state (txid NULL)
    plain = db.store("non_transactional", value_type="bigint")
    plain.multi_put([("k",)], [3])
    store = db.store("opaque", value_type="bigint", table=plain.table)
    # When an opaque batch combines into it / Then it is refused, naming the cause
    with pytest.raises(StateBehindError, match="has no txid"):
        store.multi_combine([("k",)], [1], CombineOp.SUM, StateType.OPAQUE, 1)
    assert db.raw_rows(store.table) == [("k", None, 3, None)]


# -- options --------------------------------------------------------------------------------
@pytest.mark.parametrize("state_type", list(StateType))
def test_supports_combine(state_type: StateType) -> None:
    # Given stores of each value type / Then only numeric ones combine, under their own rule
    def store(value_type: str) -> SqlBackingMap:
        return SqlBackingMap(
            "sqlite://", "t", state_type=state_type, value_type=value_type, create=False
        )

    other = next(t for t in StateType if t is not state_type)
    for op in CombineOp:
        assert store("bigint").supports_combine(op, state_type)
        assert store("double").supports_combine(op, state_type)
        assert not store("json").supports_combine(op, state_type)
        assert not store("bigint").supports_combine(op, other)


def test_combine_on_json_store_is_refused(db: Db) -> None:
    # Given a json store / When multi_combine is called directly / Then ConfigurationError
    store = db.store("opaque")
    with pytest.raises(ConfigurationError, match="supports_combine"):
        store.multi_combine([("a",)], [1], CombineOp.SUM, StateType.OPAQUE, 1)


@pytest.mark.parametrize("delta", ["3", 1.5, [1]])
def test_bad_delta_writes_nothing(db: Db, delta: Any) -> None:
    # Given a bigint store
    store = db.store("transactional", value_type="bigint")
    # When a delta is not an integer / Then a clear error and nothing written
    with pytest.raises(StateValueNotSerializableError, match=store.table):
        combine(TransactionalMap(store), 1, [("a",), ("b",)], [1, delta], CombineOp.SUM)
    assert db.raw_rows(store.table) == []


def test_cached_map_forgets_combined_keys(db: Db) -> None:
    # Given an opaque map over a cached store, with "a" cached
    store = CachedMap(db.store("opaque", value_type="bigint"), max_size=10)
    state = OpaqueMap(store)
    combine(state, 1, [("a",)], [1], CombineOp.SUM)
    assert state.multi_get([("a",)]) == [1]
    # When the database combines into "a" / Then the next read sees the database's value
    combine(state, 2, [("a",)], [5], CombineOp.SUM)
    assert state.multi_get([("a",)]) == [6]


# -- differential ---------------------------------------------------------------------------
def fold(keys: list[Any], deltas: list[Any], op: CombineOp) -> tuple[list[Any], list[Any]]:
    """Fold repeated keys' deltas: what the SQL path does within one call."""
    folded: dict[Any, Any] = {}
    for k, d in zip(keys, deltas, strict=True):
        folded[k] = op.combine(folded[k], d) if k in folded else d
    return list(folded), list(folded.values())


def random_delta(rng: random.Random, value_type: str) -> Any:
    if rng.random() < 0.05:
        return None
    if value_type == "bigint":
        return rng.randint(-50, 50)
    return rng.randint(-100, 100) / 2


@pytest.mark.parametrize("value_type", ["bigint", "double"])
@pytest.mark.parametrize("op", list(CombineOp))
@pytest.mark.parametrize("state_type", list(StateType))
def test_sql_combine_equals_generic_path(
    db: Db, state_type: StateType, op: CombineOp, value_type: str
) -> None:
    # Given the same rule map over the SQL store and over the in-memory store
    rng = random.Random(f"{state_type.value}-{op.value}-{value_type}")
    two_fields = op is CombineOp.SUM and value_type == "double"
    key_fields = ("word", "n") if two_fields else ("key",)
    key_types = {"n": int} if two_fields else None
    sql = spy(
        db, state_type.value, value_type=value_type, key_fields=key_fields, key_types=key_types
    )
    ours, theirs = MAPS[state_type](sql), MAPS[state_type](MemoryBackingMap())
    pool = [(f"w{i}", i % 3) if two_fields else (f"w{i}",) for i in range(25)]
    calls = SpyStore.combined
    # When batches run with replays (of different content), several calls per batch sharing
    # keys, and repeated keys within a call
    for txid in [1, 2, 2, 3, 3, 3, 5, 6, 6, 9]:
        ours.begin_commit(txid)
        theirs.begin_commit(txid)
        for _ in range(rng.randint(1, 3)):
            keys = rng.choices(pool, k=rng.randint(1, 12))
            deltas = [random_delta(rng, value_type) for _ in keys]
            ours.multi_combine(keys, deltas, op)
            theirs.multi_combine(*fold(keys, deltas, op), op)
        ours.commit(txid)
        theirs.commit(txid)
        # Then after every batch both hold exactly the same stored values
        assert sql.multi_get(pool) == theirs.backing.multi_get(pool), f"after txid {txid}"
    assert ours.multi_get(pool) == theirs.multi_get(pool)
    assert SpyStore.combined > calls
