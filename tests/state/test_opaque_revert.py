"""``OpaqueMap.revert_txid``: undo what a failed attempt of a txid wrote to keys its replay does
not write, on the memory store, SQLite and PostgreSQL (row and COPY paths), with and without the
LRU cache in front."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.errors import StateError
from airflow_trident.state.base import Key
from airflow_trident.state.combine import CombineOp
from airflow_trident.state.map.backing import (
    BackingMap,
    MemoryBackingMap,
    TxidIndexedBackingMap,
    txid_index,
)
from airflow_trident.state.map.base import RevertibleState
from airflow_trident.state.map.cached import CachedMap
from airflow_trident.state.map.opaque import OpaqueMap
from airflow_trident.state.map.snapshot import GLOBAL_KEY, SnapshottableMap
from airflow_trident.state.map.transactional import TransactionalMap
from airflow_trident.state.sql import SqlBackingMap
from airflow_trident.state.sql.engine import shared_engine
from airflow_trident.state.sql.schema import ensure_table
from airflow_trident.state.sql.table import TableLayout, txid_index_name
from airflow_trident.state.values import OpaqueValue as OV
from tests.state.test_sql_support import BACKENDS, NEVER, Db, db_fixture  # noqa: F401

N = 2  # the txid being committed again
# What attempt 1 of txid N left, and a key of txid 1 that N did not touch.
SEEDED: dict[Key, OV[int]] = {
    ("total",): OV(N, 4, 1),  # the seed's example: updated by N (4, was 1)
    ("new",): OV(N, 7, None),  # created by N
    ("kept",): OV(N, 5, 3),  # written by N and by this attempt too
    ("old",): OV(1, 3, None),  # written by txid 1
}
AFTER_REVERT: dict[Key, OV[int] | None] = {
    ("total",): OV(N, 1, 1),
    ("new",): None,
    ("kept",): OV(N, 5, 3),
    ("old",): OV(1, 3, None),
}


@dataclass
class Backend:
    """An opaque map over one store, and the store itself (below any cache)."""

    store: Any
    cache_size: int

    def opaque(self) -> OpaqueMap:
        backing = CachedMap(self.store, max_size=100) if self.cache_size else self.store
        return OpaqueMap(backing, name="counts")

    def seed(self, values: dict[Key, OV[int]]) -> None:
        self.store.multi_put(list(values), list(values.values()))

    def stored(self, keys: Sequence[Key]) -> dict[Key, Any]:
        return dict(zip(keys, self.store.multi_get(list(keys)), strict=True))


@pytest.fixture(params=[0, 100], ids=["uncached", "cached"])
def cache_size(request: pytest.FixtureRequest) -> int:
    size: int = request.param
    return size


@pytest.fixture(params=[pytest.param("memory", id="memory"), *BACKENDS])
def backend(request: pytest.FixtureRequest, cache_size: int, tmp_path: Any) -> Iterator[Backend]:
    if request.param == "memory":
        yield Backend(MemoryBackingMap(), cache_size)
        return
    yield Backend(sql_db(request, tmp_path).store("opaque", value_type="bigint"), cache_size)


@pytest.fixture(params=BACKENDS)
def sql_backend(request: pytest.FixtureRequest, cache_size: int, tmp_path: Any) -> Backend:
    return Backend(sql_db(request, tmp_path).store("opaque", value_type="bigint"), cache_size)


def sql_db(request: pytest.FixtureRequest, tmp_path: Any) -> Db:
    """The ``Db`` of ``test_sql_support`` for backend ``request.param``, cleaned up after."""
    kind: str = request.param
    name: str = request.getfixturevalue("unique_name")
    if kind == "sqlite":
        engine = sa.create_engine(f"sqlite:///{tmp_path / 'state.db'}")
        db = Db(kind, engine, name, NEVER)
        request.addfinalizer(lambda: (db.close(), engine.dispose()))
        return db
    engine = shared_engine(request.getfixturevalue("pg_url"))
    db = Db(kind, engine, name, 0 if kind == "pg-copy" else NEVER)

    def drop() -> None:
        db.close()
        with engine.begin() as conn:
            for table in db.tables:
                conn.execute(sa.text(f'DROP TABLE IF EXISTS "{table}"'))

    request.addfinalizer(drop)
    return db


def test_revert_puts_unwritten_keys_back_to_their_value_before_the_txid(
    backend: Backend,
) -> None:
    # Given what attempt 1 of txid N wrote, read once through the map (a cache then holds it)
    backend.seed(SEEDED)
    counts = backend.opaque()
    assert counts.multi_get(list(SEEDED)) == [4, 7, 5, 3]
    # When the commit of txid N reverts every key at N except the one this attempt writes
    counts.begin_commit(N)
    reverted = counts.revert_txid(N, keep=[("kept",)])
    counts.commit(N)
    # Then the updated key is back to prev, the created key is gone, the others are untouched
    assert reverted == 2
    assert backend.stored(list(SEEDED)) == AFTER_REVERT
    # And reads (from the cache, if any) see the reverted values, not stale ones
    assert counts.multi_get(list(SEEDED)) == [1, None, 5, 3]


def test_revert_twice_changes_nothing_more(backend: Backend) -> None:
    # Given a revert of txid N done and committed
    backend.seed(SEEDED)
    counts = backend.opaque()
    counts.begin_commit(N)
    counts.revert_txid(N, keep=[("kept",)])
    counts.commit(N)
    # When it runs again (a second committer of the same txid)
    counts.begin_commit(N)
    again = counts.revert_txid(N, keep=[("kept",)])
    counts.commit(N)
    # Then nothing changes
    assert again == 0
    assert backend.stored(list(SEEDED)) == AFTER_REVERT


def test_replay_and_later_batches_build_on_the_reverted_values(backend: Backend) -> None:
    # Given attempt 1 of txid N's writes
    backend.seed(SEEDED)
    counts = backend.opaque()
    # When the replay of N reverts, then counts only "kept" (+2), and txid N+1 brings what the
    # replay did not read ("new" +7, "total" +3)
    counts.begin_commit(N)
    counts.revert_txid(N, keep=[("kept",)])
    counts.multi_combine([("kept",)], [2], CombineOp.SUM)
    counts.commit(N)
    counts.begin_commit(N + 1)
    counts.revert_txid(N + 1, keep=[("new",), ("total",)])
    counts.multi_combine([("new",), ("total",)], [7, 3], CombineOp.SUM)
    counts.commit(N + 1)
    # Then every key is counted once: kept = 3 + 2, new = 7, total = 1 + 3
    assert counts.multi_get([("kept",), ("new",), ("total",), ("old",)]) == [5, 7, 4, 3]
    assert backend.stored([("new",), ("total",)]) == {
        ("new",): OV(N + 1, 7, None),
        ("total",): OV(N + 1, 4, 1),
    }


def test_rollback_after_the_revert_undoes_it(sql_backend: Backend) -> None:
    # Given attempt 1 of txid N's writes, read once through the map
    sql_backend.seed(SEEDED)
    counts = sql_backend.opaque()
    assert counts.multi_get(list(SEEDED)) == [4, 7, 5, 3]
    # When the commit reverts, then rolls back (the batch failed later in the same commit)
    counts.begin_commit(N)
    assert counts.revert_txid(N, keep=[("kept",)]) == 2
    counts.rollback()
    # Then the store and the reads through the map have the values before the revert
    assert sql_backend.stored(list(SEEDED)) == SEEDED
    assert counts.multi_get(list(SEEDED)) == [4, 7, 5, 3]


def test_revert_of_many_composite_keys(db: Db) -> None:
    # Given 6000 keys (more than one statement's chunk) created by txid N, keyed (word, year)
    store = db.store(
        "opaque", key_fields=("word", "year"), key_types={"year": int}, value_type="bigint"
    )
    keys = [(f"w{i}", 2000 + i % 7) for i in range(6000)]
    store.multi_put(keys, [OV(N, 1, None)] * len(keys))
    store.multi_put([("w0", 1999)], [OV(N, 9, 4)])
    # When the commit of N keeps only the first ten
    counts = OpaqueMap(store)
    counts.begin_commit(N)
    reverted = counts.revert_txid(N, keep=keys[:10])
    counts.commit(N)
    # Then the others are deleted, and the one that existed before N is back to prev
    assert reverted == len(keys) - 10 + 1
    assert db.raw_rows(store.table) == sorted(
        [(w, y, N, 1, None) for w, y in keys[:10]] + [("w0", 1999, N, 4, 4)]
    )


def test_revert_outside_the_commit_of_that_txid_is_an_error() -> None:
    counts = OpaqueMap(MemoryBackingMap(), name="counts")
    with pytest.raises(StateError, match=r"state 'counts': revert_txid outside a commit"):
        counts.revert_txid(N, keep=[])
    counts.begin_commit(N + 1)
    with pytest.raises(StateError, match=r"revert_txid\(2\) inside the commit of txid 3"):
        counts.revert_txid(N, keep=[])


class UserStore:
    """A user's store: only the two calls every store has."""

    def __init__(self) -> None:
        self.inner = MemoryBackingMap()

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        return self.inner.multi_get(keys)

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        self.inner.multi_put(keys, values)


@pytest.mark.parametrize("cached", [False, True], ids=["uncached", "cached"])
def test_store_that_cannot_list_keys_by_txid_reverts_nothing_and_warns(
    cached: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a user's store without keys_at_txid (behind a cache or not)
    store = UserStore()
    store.multi_put(list(SEEDED), list(SEEDED.values()))
    backing: BackingMap = CachedMap(store) if cached else store
    assert txid_index(backing) is None
    counts = OpaqueMap(backing, name=f"user_counts_{cached}")
    # When the commit of txid N reverts
    counts.begin_commit(N)
    with caplog.at_level(logging.WARNING, "airflow_trident.state.map.opaque"):
        reverted = counts.revert_txid(N, keep=[("kept",)])
    counts.commit(N)
    # Then nothing changed, and the warning names the state and what to implement
    assert reverted == 0
    assert dict(zip(SEEDED, store.multi_get(list(SEEDED)), strict=True)) == SEEDED
    assert f"state 'user_counts_{cached}'" in caplog.text
    assert "implement keys_at_txid and multi_delete" in caplog.text


def test_stores_implement_the_txid_protocol() -> None:
    store = SqlBackingMap("sqlite://", "proto", state_type="opaque")
    assert isinstance(store, TxidIndexedBackingMap)
    assert txid_index(CachedMap(store)) is not None
    assert txid_index(MemoryBackingMap()) is not None
    assert isinstance(OpaqueMap(store), RevertibleState)
    assert not isinstance(TransactionalMap(store), RevertibleState)


def test_snapshottable_map_passes_the_revert_to_its_opaque_map() -> None:
    # Given a global count written by attempt 1 of txid N (was 1, now 4)
    store = MemoryBackingMap()
    store.multi_put([GLOBAL_KEY], [OV(N, 4, 1)])
    total = SnapshottableMap(OpaqueMap(store))
    # When the replay writes the global value, it is kept; when it writes nothing, reverted
    total.begin_commit(N)
    assert total.revert_txid(N, keep=[GLOBAL_KEY]) == 0
    assert total.revert_txid(N, keep=[]) == 1
    total.commit(N)
    # Then the value before N is back
    assert store.multi_get([GLOBAL_KEY]) == [OV(N, 1, 1)]
    # And a global value over a transactional map has nothing to revert
    assert SnapshottableMap(TransactionalMap(store)).revert_txid(N, keep=[]) == 0


def test_opaque_table_has_a_txid_index_created_for_existing_tables_too(db: Db) -> None:
    # Given an opaque table created without the txid index (the default, or an earlier version)
    store = db.store("opaque", value_type="bigint")
    index = txid_index_name(store.table)
    assert index not in indexes(db.engine, store.table)
    # When the table is opened again by a state asking for the index
    ensure_table(
        db.engine,
        TableLayout.build(
            store.table, state_type="opaque", value_type="bigint", txid_index=True
        ),
    )
    # Then it has the index on txid again
    assert indexes(db.engine, store.table)[index] == ["txid"]


def indexes(engine: sa.Engine, table: str) -> dict[str, list[str]]:
    with engine.connect() as conn:
        return {
            str(ix["name"]): [str(c) for c in ix["column_names"]]
            for ix in sa.inspect(conn).get_indexes(table)
        }
