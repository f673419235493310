"""sql_state: a state factory over one SQL table, with shared engines."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.errors import ConfigurationError, StateStoreUnavailableError
from airflow_trident.state.base import StateType
from airflow_trident.state.combine import CombineOp
from airflow_trident.state.map.cached import CachedMap
from airflow_trident.state.map.non_transactional import NonTransactionalMap
from airflow_trident.state.map.opaque import OpaqueMap
from airflow_trident.state.map.transactional import TransactionalMap
from airflow_trident.state.sql import SqlBackingMap, SqlMapStateFactory, sql_state
from airflow_trident.state.sql.engine import shared_engine
from tests.state.test_sql_support import Db, db_fixture  # noqa: F401


@pytest.mark.parametrize(
    ("state_type", "map_type"),
    [
        ("transactional", TransactionalMap),
        ("opaque", OpaqueMap),
        (StateType.NON_TRANSACTIONAL, NonTransactionalMap),
    ],
)
def test_make_state_returns_the_rule_map(db: Db, state_type: Any, map_type: type) -> None:
    # Given a factory for a state type
    factory = sql_state(db.engine, db.table_name(), state_type)
    # When a state is made
    state = factory.make_state()
    # Then it is that rule's map over a SqlBackingMap named after the table
    assert type(state) is map_type
    assert isinstance(state.backing, SqlBackingMap)
    assert state.name == factory.layout.name


def test_cache_size_wraps_the_store_in_a_cached_map(db: Db) -> None:
    # Given a factory with a cache
    factory = sql_state(db.engine, db.table_name(), "opaque", value_type="bigint", cache_size=8)
    # When two partitions are made and partition 0 commits a count
    first, second = factory.make_state(0, 2), factory.make_state(1, 2)
    first.begin_commit(1)
    first.multi_combine([("a",)], [4], CombineOp.SUM)
    first.commit(1)
    # Then both are cached maps over one table, and the other partition reads the count
    assert isinstance(first.backing, CachedMap)
    assert second.multi_get([("a",)]) == [4]


def test_factory_does_no_io_and_shares_engines() -> None:
    # Given two factories on a closed port (made without any error: no I/O)
    url = "postgresql+psycopg://trident:pw-xyz@127.0.0.1:1/trident"
    one = sql_state(url, "t_one", "opaque")
    two = SqlMapStateFactory(url, "t_two", "transactional")
    # When a state is made / Then the table creation reports the database unavailable
    with pytest.raises(StateStoreUnavailableError, match="t_one"):
        one.make_state()
    with pytest.raises(StateStoreUnavailableError):
        two.make_state()
    # And the URL's engine is shared; the password is never shown
    assert shared_engine(url) is shared_engine(sa.make_url(url))
    assert "pw-xyz" not in repr(one)


def test_factory_validates_options_up_front() -> None:
    # Given / When bad options / Then ConfigurationError at once
    with pytest.raises(ConfigurationError, match="cache_size"):
        sql_state("sqlite://", "t", "opaque", cache_size=-1)
    with pytest.raises(ConfigurationError, match="value_type"):
        sql_state("sqlite://", "t", "opaque", value_type="xml")
    # And a partition out of range is refused
    factory = sql_state("sqlite://", "t_partitions", "opaque")
    with pytest.raises(ConfigurationError, match="partition 2 of 2"):
        factory.make_state(2, 2)


def test_states_of_one_url_share_the_engine(tmp_path: Any) -> None:
    # Given a factory on a SQLite URL
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    factory = sql_state(url, "counts", "transactional", value_type="bigint")
    # When two states are made
    one, two = factory.make_state(0, 2), factory.make_state(1, 2)
    # Then their stores use one engine, the URL's shared one
    assert isinstance(one.backing, SqlBackingMap)
    assert isinstance(two.backing, SqlBackingMap)
    assert one.backing.engine is two.backing.engine is shared_engine(url)
    shared_engine(url).dispose()


def test_factory_pickles(tmp_path: Any) -> None:
    # Given a factory on a URL, used once
    url = f"sqlite:///{tmp_path / 'pickled.db'}"
    factory = sql_state(url, "counts", "non_transactional", value_type="bigint")
    state = factory.make_state()
    state.begin_commit(1)
    state.multi_put([("a",)], [3])
    state.commit(1)
    # When it is pickled and unpickled (as when a topology is shipped to another process)
    copy = pickle.loads(pickle.dumps(factory))
    # Then the copy makes states over the same table
    assert copy.make_state().multi_get([("a",)]) == [3]
    shared_engine(url).dispose()
