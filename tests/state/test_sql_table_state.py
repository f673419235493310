"""Table-shaped SQL state (``value_fields``): the aggregate's output fields are typed columns an
analyst queries with plain SQL, beside ``txid`` (and ``prev_<field>`` for opaque state), under
the same exactly-once rules as the JSON-value form, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.errors import ConfigurationError
from airflow_trident.state.combine import CombineOp
from airflow_trident.state.sql import SqlMapStateFactory, StateValueNotSerializableError, sql_state

pytestmark = pytest.mark.integration


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        pg: str = request.getfixturevalue("pg_url")
        return pg
    return f"sqlite:///{tmp_path}/state.db"


@pytest.fixture
def table(url: str, unique_name: str) -> Iterator[str]:
    yield unique_name
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(f'DROP TABLE IF EXISTS "{unique_name}"'))
    engine.dispose()


def select(url: str, sql: str) -> list[tuple[Any, ...]]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = [tuple(r) for r in conn.execute(sa.text(sql))]
    engine.dispose()
    return rows


@pytest.mark.parametrize("copy_threshold", [500, 1], ids=["rows", "copy"])
def test_opaque_counts_are_a_word_count_column_and_a_replay_recomputes_from_prev(
    url: str, table: str, copy_threshold: int
) -> None:
    # Given an opaque table-shaped state of word counts (bulk COPY on PostgreSQL when 1)
    factory = SqlMapStateFactory(
        url,
        table,
        "opaque",
        key_fields=("word",),
        value_fields=("count",),
        value_type="bigint",
        copy_threshold=copy_threshold,
    )
    state: Any = factory.make_state()
    # When txid 1 counts two words, and txid 2 is applied twice with different deltas
    for txid, deltas in [(1, {"man": 2, "dog": 1}), (2, {"man": 5}), (2, {"man": 1, "cat": 4})]:
        state.begin_commit(txid)
        state.multi_combine([(w,) for w in deltas], list(deltas.values()), CombineOp.SUM)
        state.commit(txid)
    # Then an analyst's query sees the counts (the replay of txid 2 started from prev)
    got = select(url, f'SELECT word, count FROM "{table}" ORDER BY word')
    assert got == [("cat", 4), ("dog", 1), ("man", 3)]
    # And the rule's columns sit beside them, no JSON "val"
    cols = select(url, f'SELECT word, txid, prev_count FROM "{table}" ORDER BY word')
    assert cols == [("cat", 2, None), ("dog", 1, None), ("man", 2, 2)]
    assert state.multi_get([("man",), ("owl",)]) == [3, None]


def test_transactional_tuple_values_are_columns_and_a_replayed_txid_is_skipped(
    url: str, table: str
) -> None:
    # Given a transactional state whose value has three fields of three types
    factory = sql_state(
        url,
        table,
        "transactional",
        key_fields=("shop", "day"),
        key_types={"day": int},
        value_fields=("total", "orders", "top_item"),
        value_types={"total": "double", "orders": "bigint", "top_item": "string"},
    )
    state: Any = factory.make_state()

    def add(old: Any, total: float, orders: int, item: str) -> Any:
        if old is None:
            return (total, orders, item)
        return (old[0] + total, old[1] + orders, item)

    # When txid 1 and 2 update, then txid 2 is replayed
    for txid in (1, 2, 2):
        state.begin_commit(txid)
        state.multi_update([("lyon", 7)], [lambda old, t=txid: add(old, 1.5 * t, t, f"i{t}")])
        state.commit(txid)
    # Then each field is its own typed column, txid 2 counted once, and read back as a tuple
    rows = select(url, f'SELECT shop, day, total, orders, top_item, txid FROM "{table}"')
    assert rows == [("lyon", 7, 4.5, 3, "i2", 2)]
    assert state.multi_get([("lyon", 7)]) == [(4.5, 3, "i2")]
    # And no prev column: the transactional rule does not need one (the last column says
    # which key fields are None: tests/state/test_sql_null_keys.py)
    assert [c["name"] for c in sa.inspect(sa.create_engine(url)).get_columns(table)] == [
        "shop", "day", "total", "orders", "top_item", "txid", "trident_null_keys",
    ]  # fmt: skip


def test_opaque_revert_puts_typed_columns_back_to_prev(url: str, table: str) -> None:
    # Given opaque counts where txid 2's failed attempt wrote "a" (existing) and "b" (new)
    state: Any = sql_state(
        url, table, "opaque", key_fields=("word",), value_fields=("count",), value_type="bigint"
    ).make_state()
    state.begin_commit(1)
    state.multi_combine([("a",)], [1], CombineOp.SUM)
    state.commit(1)
    state.begin_commit(2)
    state.multi_combine([("a",), ("b",)], [5, 7], CombineOp.SUM)
    state.commit(2)
    # When the replay of txid 2 writes only "c" and reverts what it does not write
    state.begin_commit(2)
    reverted = state.revert_txid(2, {("c",)})
    state.multi_combine([("c",)], [1], CombineOp.SUM)
    state.commit(2)
    # Then "a" is back to its count before txid 2 and "b" (created by txid 2) is gone
    assert reverted == 2
    assert select(url, f'SELECT word, count FROM "{table}" ORDER BY word') == [("a", 1), ("c", 1)]


def test_a_value_that_does_not_fit_the_columns_writes_nothing(url: str, table: str) -> None:
    # Given a two-field table-shaped state
    state: Any = sql_state(
        url, table, "non_transactional", value_fields=("n", "avg"), value_types={"avg": "double"},
        value_type="bigint",
    ).make_state()  # fmt: skip
    # When a value of the wrong arity is put / Then it names the fields, and nothing is stored
    state.begin_commit(1)
    with pytest.raises(StateValueNotSerializableError, match=r"3 items for 2 fields \['n', 'avg'"):
        state.multi_put([("k",), ("j",)], [(1, 2.0), (1, 2.0, 3)])
    state.rollback()
    assert select(url, f'SELECT * FROM "{table}"') == []


def test_json_and_table_shaped_layouts_of_one_table_are_told_apart(url: str, table: str) -> None:
    # Given a table created in the JSON-value form
    sql_state(url, table, "opaque", key_fields=("word",)).make_state()
    # When it is opened table-shaped / Then the column mismatch is named, with a hint
    shaped = sql_state(url, table, "opaque", key_fields=("word",), value_fields=("count",))
    with pytest.raises(ConfigurationError, match="exists with columns word text, txid integer"):
        shaped.make_state()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"value_fields": ("word",)}, "'word' is given twice"),
        ({"value_fields": ("txid",)}, "clashes with a value column"),
        ({"value_fields": "count"}, "non-empty sequence"),
        ({"value_fields": ("n",), "value_types": {"m": "bigint"}}, r"names \['m'\]"),
        ({"value_fields": ("n",), "value_types": {"n": "int"}}, "unknown value_type 'int'"),
        ({"value_types": {"n": "bigint"}}, "value_types needs value_fields"),
        ({"value_fields": ("n", "prev_n")}, "'prev_n' is given twice"),
    ],
)
def test_bad_table_shapes_are_refused_before_any_io(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        sql_state("sqlite://", "shaped", "opaque", key_fields=("word",), **kwargs)
