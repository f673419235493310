"""SqlBackingMap: rows <-> values, batching, one transaction per commit, and its errors.

Every test runs on SQLite and (integration) on PostgreSQL through both write paths.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.errors import (
    ConfigurationError,
    InvalidNameError,
    StateBehindError,
    StateError,
    StateStoreUnavailableError,
    UnknownStateTypeError,
)
from airflow_trident.state.map.non_transactional import NonTransactionalMap
from airflow_trident.state.map.opaque import OpaqueMap
from airflow_trident.state.map.transactional import TransactionalMap
from airflow_trident.state.sql import SqlBackingMap, StateValueNotSerializableError
from airflow_trident.state.values import OpaqueValue
from airflow_trident.state.values import TransactionalValue as TV
from tests.state.test_sql_support import Db, db_fixture  # noqa: F401

CLOSED_PG = "postgresql+psycopg://trident:s3cret-pw@127.0.0.1:1/trident"


# -- rows <-> values ------------------------------------------------------------------------
def test_transactional_values_round_trip(db: Db) -> None:
    # Given a transactional store
    store = db.store("transactional")
    # When values are put, one of them NULL
    store.multi_put([("a",), ("b",)], [TV(3, {"n": [1, 2]}), TV(4, None)])
    # Then they read back, a stored NULL differs from an absent key, and the rows are as designed
    assert store.multi_get([("b",), ("zz",), ("a",)]) == [TV(4, None), None, TV(3, {"n": [1, 2]})]
    assert db.raw_rows(store.table) == [("a", 3, '{"n":[1,2]}', None), ("b", 4, None, None)]


def test_opaque_values_round_trip(db: Db) -> None:
    # Given an opaque store of bigints
    store = db.store("opaque", value_type="bigint")
    # When an opaque value is put
    store.multi_put([("total",)], [OpaqueValue(curr_txid=2, curr=4, prev=1)])
    # Then the row holds txid, val and prev, and reads back as the same value
    assert db.raw_rows(store.table) == [("total", 2, 4, 1)]
    assert store.multi_get([("total",)]) == [OpaqueValue(2, 4, 1)]


def test_non_transactional_values_have_no_txid(db: Db) -> None:
    # Given a non-transactional store of doubles
    store = db.store("non_transactional", value_type="double")
    # When plain values are put
    store.multi_put([("x",), ("y",)], [1.5, 2])
    # Then txid is NULL and the values come back as floats
    assert db.raw_rows(store.table) == [("x", None, 1.5, None), ("y", None, 2.0, None)]
    assert store.multi_get([("y",), ("x",)]) == [2.0, 1.5]


def test_composite_int_keys(db: Db) -> None:
    # Given a store keyed by (word, year:int)
    store = db.store("transactional", key_fields=("word", "year"), key_types={"year": int})
    # When two keys sharing a word are put
    store.multi_put([("dog", 2024), ("dog", 2025)], [TV(1, 5), TV(1, 7)])
    # Then each composite key has its own value
    assert store.multi_get([("dog", 2025), ("dog", 2024), ("dog", 2026)]) == [
        TV(1, 7),
        TV(1, 5),
        None,
    ]


def test_put_overwrites_and_last_repeated_key_wins(db: Db) -> None:
    # Given a stored value
    store = db.store("non_transactional")
    store.multi_put([("k",)], ["old"])
    # When one call puts the same key twice (and another key)
    store.multi_put([("k",), ("j",), ("k",)], ["first", "j", "last"])
    # Then the last value of the key wins, as successive puts would
    assert store.multi_get([("k",), ("j",)]) == ["last", "j"]


def test_multi_get_batches_reads(db: Db) -> None:
    # Given 12,000 stored keys
    store = db.store("non_transactional", value_type="bigint")
    keys = [(f"k{i}",) for i in range(12_000)]
    store.multi_put(keys, list(range(12_000)))
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(args[2])

    # When they are read back with a missing key and a repeated key
    sa.event.listen(db.engine, "before_cursor_execute", count)
    try:
        values = store.multi_get([*keys, ("missing",), ("k5",)])
    finally:
        sa.event.remove(db.engine, "before_cursor_execute", count)
    # Then values are aligned to keys, and at most 3 SELECTs ran (5,000 keys each)
    assert values == [*range(12_000), None, 5]
    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert 1 <= len(selects) <= 3


def test_empty_calls_do_nothing(db: Db) -> None:
    # Given a store
    store = db.store("opaque", value_type="bigint")
    # When empty batches are read and written
    store.multi_put([], [])
    # Then nothing is stored and the read is empty
    assert store.multi_get([]) == []
    assert db.raw_rows(store.table) == []


# -- transactions ---------------------------------------------------------------------------
def test_one_transaction_spans_the_commit(db: Db) -> None:
    # Given a transactional map over a store, and a second store on the same table
    store = db.store("transactional", value_type="bigint")
    reader = db.store("transactional", value_type="bigint", table=store.table)
    counts = TransactionalMap(store)
    # When a commit writes in two calls
    counts.begin_commit(1)
    counts.multi_put([("a",)], [1])
    counts.multi_put([("b",)], [2])
    # Then the commit sees its writes, others do not until commit
    assert counts.multi_get([("a",), ("b",)]) == [1, 2]
    assert reader.multi_get([("a",), ("b",)]) == [None, None]
    counts.commit(1)
    assert reader.multi_get([("a",), ("b",)]) == [TV(1, 1), TV(1, 2)]


def test_rollback_leaves_nothing(db: Db) -> None:
    # Given a stored value and an open commit that changed it and added a key
    store = db.store("opaque", value_type="bigint")
    store.multi_put([("a",)], [OpaqueValue(1, 10, None)])
    totals = OpaqueMap(store)
    totals.begin_commit(2)
    totals.multi_put([("a",), ("b",)], [11, 5])
    # When the commit is rolled back
    totals.rollback()
    # Then the table is as before, and the store works on
    assert db.raw_rows(store.table) == [("a", 1, 10, None)]
    totals.begin_commit(2)
    totals.multi_put([("b",)], [6])
    totals.commit(2)
    assert store.multi_get([("a",), ("b",)]) == [OpaqueValue(1, 10, None), OpaqueValue(2, 6, None)]


def test_commit_of_another_txid_is_refused(db: Db) -> None:
    # Given an open commit of txid 4
    store = db.store("transactional")
    store.begin_commit(4)
    # When txid 5 is committed, or a commit never begun
    # Then both are refused, naming the table and the txid
    with pytest.raises(StateError, match=rf"{store.table}.*commit\(5\)"):
        store.commit(5)
    store.rollback()
    with pytest.raises(StateError, match=r"begin_commit\(6\)"):
        store.commit(6)


def test_begin_commit_discards_a_stale_open_commit(db: Db) -> None:
    # Given a commit that wrote and was never committed nor rolled back
    store = db.store("non_transactional")
    store.begin_commit(1)
    store.multi_put([("stale",)], [1])
    # When the batch is begun again
    store.begin_commit(1)
    store.multi_put([("fresh",)], [2])
    store.commit(1)
    # Then only the new attempt's writes are stored
    assert db.raw_rows(store.table) == [("fresh", None, "2", None)]


def test_transactional_map_put_behind_writes_nothing(db: Db) -> None:
    # Given state written by txid 5
    store = db.store("transactional")
    store.multi_put([("a",)], [TV(5, "a5")])
    counts = TransactionalMap(store)
    # When batch 4 puts two keys
    counts.begin_commit(4)
    with pytest.raises(StateBehindError):
        counts.multi_put([("b",), ("a",)], ["b4", "a4"])
    counts.rollback()
    # Then nothing was written
    assert db.raw_rows(store.table) == [("a", 5, '"a5"', None)]


# -- errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["bad name", "1st", "x" * 64, "drop;table", ""])
def test_invalid_table_name(bad: str) -> None:
    # Given / When an invalid table name / Then InvalidNameError naming it, before any I/O
    with pytest.raises(InvalidNameError, match="table name"):
        SqlBackingMap(CLOSED_PG, bad, state_type="opaque")


@pytest.mark.parametrize("fields", [("a b",), ("ok", "x-y"), ('k"',)])
def test_invalid_key_field(fields: tuple[str, ...]) -> None:
    # Given / When an invalid key field / Then InvalidNameError
    with pytest.raises(InvalidNameError, match="key field name"):
        SqlBackingMap(CLOSED_PG, "t", state_type="opaque", key_fields=fields)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"key_fields": ("txid",)}, "clashes"),
        ({"key_fields": ("a", "A")}, "twice"),
        ({"key_fields": ()}, "non-empty"),
        ({"key_fields": "word"}, "non-empty"),
        ({"key_types": {"key": bytes}}, "str, int or float"),
        ({"key_types": {"other": int}}, "not key fields"),
        ({"value_type": "text"}, "unknown value_type 'text'"),
    ],
)
def test_bad_options(kwargs: dict[str, Any], match: str) -> None:
    # Given / When a bad option / Then ConfigurationError naming the table, before any I/O
    with pytest.raises(ConfigurationError, match=match) as info:
        SqlBackingMap(CLOSED_PG, "tbl", state_type="opaque", **kwargs)
    assert "'tbl'" in str(info.value)


def test_unknown_state_type() -> None:
    # Given / When an unknown state type / Then UnknownStateTypeError listing the known ones
    with pytest.raises(UnknownStateTypeError, match=r"'eventual'.*'opaque'"):
        SqlBackingMap(CLOSED_PG, "t", state_type="eventual")


def test_existing_table_with_other_keys_is_refused(db: Db) -> None:
    # Given a table keyed by "key"
    store = db.store("opaque")
    # When a store keyed by "word" opens it
    # Then ConfigurationError shows the columns found
    with pytest.raises(ConfigurationError, match=r"columns key text.*expected word text"):
        db.store("opaque", table=store.table, key_fields=("word",))


@pytest.mark.parametrize(
    ("value_type", "value"),
    [
        ("json", {1, 2}),
        ("json", float("nan")),
        ("json", object()),
        ("bigint", 1.5),
        ("bigint", "3"),
    ],
)
def test_value_that_cannot_be_stored_writes_nothing(db: Db, value_type: str, value: Any) -> None:
    # Given a store and a good pair next to a bad one
    store = db.store("transactional", value_type=value_type)
    # When they are put together
    with pytest.raises(StateValueNotSerializableError, match=store.table) as info:
        store.multi_put([("good",), ("bad",)], [TV(1, 1), TV(1, value)])
    # Then the error names the key and nothing was written
    assert "'bad'" in str(info.value)
    assert db.raw_rows(store.table) == []


def test_wrong_value_kind_is_refused(db: Db) -> None:
    # Given an opaque store
    store = db.store("opaque")
    # When a plain value is put (a store used without its map)
    # Then ConfigurationError points at OpaqueMap
    with pytest.raises(ConfigurationError, match="OpaqueMap"):
        store.multi_put([("k",)], [3])


def test_wrong_key_arity_is_refused(db: Db) -> None:
    # Given a store with one key field
    store = db.store("non_transactional")
    # When a two-value key is used
    # Then ConfigurationError explains the key fields
    with pytest.raises(ConfigurationError, match=r"2 values but the table has 1 key fields"):
        store.multi_get([("a", "b")])


def test_unavailable_postgres_hides_password() -> None:
    # Given a URL on a closed port
    # When the store creates its table
    with pytest.raises(StateStoreUnavailableError) as info:
        SqlBackingMap(CLOSED_PG, "t_unavailable", state_type="opaque")
    # Then the error names the URL without its password and gives a hint
    text = str(info.value)
    assert "127.0.0.1:1" in text
    assert "***" in text
    assert "s3cret-pw" not in text
    assert "the state connection, or TRIDENT_STATE_URL" in text
    assert "scripts/" not in text  # an installed provider's user has no development scripts


def test_unavailable_only_on_first_use_without_create() -> None:
    # Given a store made with create=False on a closed port: no I/O, so no error
    store = SqlBackingMap(CLOSED_PG, "t_unavailable", state_type="opaque", create=False)
    # When it is used
    # Then it raises StateStoreUnavailableError, also from begin_commit
    with pytest.raises(StateStoreUnavailableError, match="multi_get"):
        store.multi_get([("a",)])
    with pytest.raises(StateStoreUnavailableError, match=r"begin_commit\(3\)"):
        store.begin_commit(3)
    assert "s3cret-pw" not in repr(store)


def test_unavailable_sqlite_file(tmp_path: Any) -> None:
    # Given a SQLite file in a directory that does not exist
    url = f"sqlite:///{tmp_path}/missing/dir/state.db"
    # When a store is made / Then StateStoreUnavailableError
    with pytest.raises(StateStoreUnavailableError, match="unable to open"):
        SqlBackingMap(url, "t", state_type="opaque")


def test_non_transactional_map_over_store(db: Db) -> None:
    # Given a non-transactional map over a json store
    counts = NonTransactionalMap(db.store("non_transactional"))
    # When the same batch is applied twice (at-least-once)
    for _ in range(2):
        counts.begin_commit(1)
        counts.multi_update([("k",)], [lambda c: (c or 0) + 1])
        counts.commit(1)
    # Then it counts twice
    assert counts.multi_get([("k",)]) == [2]


def test_existing_table_of_another_value_type_is_refused(db: Db) -> None:
    # Given a json table
    store = db.store("opaque")
    # When it is opened as a bigint table
    # Then ConfigurationError shows the kinds of the columns
    with pytest.raises(ConfigurationError, match=r"val text.*expected.*val integer"):
        db.store("opaque", table=store.table, value_type="bigint")


@pytest.mark.integration
def test_connection_lost_mid_commit(pg_url: str, unique_name: str) -> None:
    # Given a commit in progress on PostgreSQL
    store = SqlBackingMap(pg_url, unique_name, state_type="transactional", value_type="bigint")
    try:
        store.begin_commit(1)
        store.multi_put([("a",)], [TV(1, 1)])
        assert store._conn is not None
        pid = store._conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        # When its server process is terminated
        with store.engine.begin() as admin:
            admin.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        # Then the next call says the database is unavailable, hiding the password
        with pytest.raises(StateStoreUnavailableError, match=unique_name) as info:
            store.multi_put([("b",)], [TV(1, 2)])
        assert "trident:***@" in str(info.value)
        # And the store recovers: the batch is replayed on a new connection
        store.rollback()
        store.begin_commit(1)
        store.multi_put([("b",)], [TV(1, 2)])
        store.commit(1)
        assert store.multi_get([("a",), ("b",)]) == [None, TV(1, 2)]
    finally:
        store.rollback()
        with store.engine.begin() as conn:
            conn.execute(sa.text(f'DROP TABLE IF EXISTS "{unique_name}"'))
