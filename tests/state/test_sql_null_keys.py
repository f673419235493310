"""A ``None`` key field is a key (issue 32, item 5): ``sql_state`` refused it for ever (the key
columns are the primary key, NOT NULL), so a batch with a ``None`` group key could never commit.

Each key column is now NULL-safe: the table's ``trident_null_keys`` column (part of the primary
key) has bit ``i`` set when key field ``i`` is ``None``, the key column then holding its type's
placeholder (``''``, ``0``). So ``(None,)`` and ``('',)`` are two keys, on SQLite and
PostgreSQL, on every path (row by row, PostgreSQL's COPY, the database's own combine, the
opaque revert). A table made before (no such column) is still read and written as it was; a
``None`` key into it is refused with a message naming the fix (``migrate_null_keys()``), with
nothing of that commit written; the migration keeps its rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.errors import StateError
from airflow_trident.state.combine import CombineOp
from airflow_trident.state.sql.factory import SqlMapStateFactory

pytestmark = pytest.mark.integration

KEYS: list[tuple[Any, ...]] = [(None, 1), ("", 1), (None, None), ("", 0), ("a", None), ("a", 0)]
"""Keys a ``None`` could be mistaken for: the placeholders of ``str`` and ``int``."""


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        found: str = request.getfixturevalue("pg_url")
        return found
    return f"sqlite:///{tmp_path}/state.db"


@pytest.fixture
def table(url: str, unique_name: str) -> Iterator[str]:
    yield unique_name
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(f'DROP TABLE IF EXISTS "{unique_name}"'))
    engine.dispose()


def factory(url: str, table: str, state_type: str, **options: Any) -> SqlMapStateFactory:
    return SqlMapStateFactory(
        url, table, state_type, key_fields=("word", "n"), key_types={"n": int}, **options
    )


def commit(state: Any, txid: int, apply: Any) -> None:
    state.begin_commit(txid)
    try:
        apply()
    except BaseException:
        state.rollback()
        raise
    state.commit(txid)


@pytest.mark.parametrize("state_type", ["transactional", "opaque", "non_transactional"])
@pytest.mark.parametrize("path", ["json", "bigint", "bigint-copy"])
def test_a_none_key_field_is_a_key_of_its_own(
    url: str, table: str, state_type: str, path: str
) -> None:
    # Given a state whose keys include None next to the placeholders it could be taken for
    options: dict[str, Any] = {"value_type": "json" if path == "json" else "bigint"}
    if path == "bigint-copy":
        if not url.startswith("postgresql"):
            pytest.skip("COPY is PostgreSQL's")
        options["copy_threshold"] = 1
    state = factory(url, table, state_type, **options).make_state()
    values = list(range(1, len(KEYS) + 1))

    def add() -> None:
        if path == "json":
            state.multi_update(KEYS, [lambda old, v=v: (old or 0) + v for v in values])
        else:
            state.multi_combine(KEYS, values, CombineOp.SUM)

    # When txid 1 adds each key's value, txid 2 adds them again
    commit(state, 1, add)
    commit(state, 2, add)
    # Then each key holds its own sum
    assert state.multi_get(KEYS) == [2 * v for v in values]
    assert state.multi_get([(None, 2), ("b", None)]) == [None, None]
    # And the table shows it: one row per key
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f'SELECT word, n, trident_null_keys FROM "{table}"')).all()
    engine.dispose()
    assert sorted(rows) == sorted([("", 1, 1), ("", 1, 0), ("", 0, 3), ("", 0, 0), ("a", 0, 2),
                                   ("a", 0, 0)])  # fmt: skip


def test_a_replay_and_the_opaque_revert_handle_none_keys(url: str, table: str) -> None:
    state = factory(url, table, "opaque", value_type="bigint").make_state()
    commit(state, 1, lambda: state.multi_combine([(None, None), ("", 0)], [1, 1], CombineOp.SUM))
    # Given txid 2's first attempt wrote (None, None) and ('x', None), then failed before ZK
    first = [(None, None), ("x", None)]
    commit(state, 2, lambda: state.multi_combine(first, [5, 5], CombineOp.SUM))
    # When its replay writes only ('', 0): the keys it does not write are put back
    reverted: list[int] = []
    commit(state, 2, lambda: reverted.append(state.revert_txid(2, {("", 0)})))
    commit(state, 2, lambda: state.multi_combine([("", 0)], [2], CombineOp.SUM))
    assert reverted == [2]
    assert state.multi_get([(None, None), ("x", None), ("", 0)]) == [1, None, 3]


def _legacy_table(url: str, table: str) -> None:
    """The table as sql_state made it before None keys (no trident_null_keys), one row."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(
            f'CREATE TABLE "{table}" (word VARCHAR NOT NULL, n BIGINT NOT NULL, txid BIGINT, '
            f"val BIGINT, prev BIGINT, PRIMARY KEY (word, n))"
        ))  # fmt: skip
        conn.execute(sa.text(f"INSERT INTO \"{table}\" VALUES ('a', 1, 1, 5, NULL)"))
    engine.dispose()


def test_a_table_made_before_is_read_and_a_none_key_into_it_names_the_migration(
    url: str, table: str
) -> None:
    _legacy_table(url, table)
    made = factory(url, table, "transactional", value_type="bigint")
    state = made.make_state()
    # Then its rows are read, and other keys written, as before
    assert state.multi_get([("a", 1)]) == [5]
    commit(state, 2, lambda: state.multi_combine([("a", 1), ("b", 2)], [1, 1], CombineOp.SUM))
    # When a commit brings a None key: refused, naming the fix, and nothing of it written
    with pytest.raises(StateError, match=r"key \(None, 3\).*txid 3.*migrate_null_keys\(\)"):
        commit(state, 3, lambda: state.multi_combine([("c", 3), (None, 3)], [1, 1], CombineOp.SUM))
    assert state.multi_get([("a", 1), ("b", 2), ("c", 3)]) == [6, 1, None]
    # When the table is migrated: its rows stay, and the None key commits
    assert made.migrate_null_keys() is True
    assert made.migrate_null_keys() is False  # once
    state = made.make_state()
    commit(state, 3, lambda: state.multi_combine([("c", 3), (None, 3)], [1, 1], CombineOp.SUM))
    assert state.multi_get([("a", 1), ("b", 2), ("c", 3), (None, 3), ("", 3)]) == [6, 1, 1, 1, None]
    # And a new factory (another process) reads the migrated table as new
    again = factory(url, table, "transactional", value_type="bigint").make_state()
    assert again.multi_get([(None, 3)]) == [1]


def test_a_nan_key_or_a_nan_into_sqlite_is_refused_naming_it(url: str, table: str) -> None:
    # A NaN key: before, SQLite failed with NOT NULL for ever (it stores NaN as NULL) and
    # PostgreSQL stored it but never found it again (each batch put 1 back)
    from airflow_trident.state.sql.codec import StateValueNotSerializableError

    nan = float("nan")
    state = SqlMapStateFactory(
        url, table, "transactional", key_fields=("x",), key_types={"x": float},
        value_type="double",
    ).make_state()  # fmt: skip
    with pytest.raises(StateValueNotSerializableError, match=r"key \(nan,\) of txid 1 has a NaN"):
        commit(state, 1, lambda: state.multi_combine([(1.5,), (nan,)], [1, 1], CombineOp.SUM))
    assert state.multi_get([(1.5,)]) == [None]  # nothing of the commit written
    # A NaN value: PostgreSQL stores it; SQLite stored NULL (the sum started again): refused
    if url.startswith("sqlite"):
        with pytest.raises(StateValueNotSerializableError, match="SQLite would store it as NULL"):
            commit(state, 1, lambda: state.multi_combine([(1.5,)], [nan], CombineOp.SUM))
    else:
        commit(state, 1, lambda: state.multi_combine([(1.5,)], [nan], CombineOp.SUM))
        assert math.isnan(state.multi_get([(1.5,)])[0])
