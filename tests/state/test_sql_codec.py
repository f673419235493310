"""RowCodec's errors say which state table, key and txid a value could not be stored for."""

from __future__ import annotations

import pytest

from airflow_trident.state.map.opaque import OpaqueMap
from airflow_trident.state.sql.codec import RowCodec, StateValueNotSerializableError
from airflow_trident.state.sql.table import TableLayout
from airflow_trident.state.values import OpaqueValue, TransactionalValue
from tests.state.test_sql_support import Db, db_fixture  # noqa: F401


def test_a_value_that_cannot_be_stored_names_key_and_its_txid() -> None:
    # Given a transactional JSON table
    codec = RowCodec(TableLayout.build("totals", state_type="transactional"))
    # When a set (not JSON) is encoded for txid 3
    with pytest.raises(StateValueNotSerializableError) as refused:
        codec.encode_rows(
            [("ann",), ("bob",)], [TransactionalValue(3, 1), TransactionalValue(3, {1})]
        )
    # Then the error names the table, the key and the txid, and keeps the cause
    message = str(refused.value)
    assert message.startswith("state table 'totals': cannot store set value {1}")
    assert message.endswith("(key ('bob',), txid 3)")
    assert isinstance(refused.value.__cause__, TypeError)


def test_an_opaque_value_names_its_current_txid() -> None:
    codec = RowCodec(TableLayout.build("n", state_type="opaque", value_type="bigint"))
    with pytest.raises(StateValueNotSerializableError, match=r"\(key \('x',\), txid 7\)$"):
        codec.encode_rows([("x",)], [OpaqueValue(7, "seven", 6)])


def test_a_non_transactional_value_names_the_txid_it_is_given() -> None:
    # Given a non-transactional table (its values carry no txid)
    codec = RowCodec(TableLayout.build("n", state_type="non_transactional", value_type="double"))
    # When the batch's txid is passed Then it is named
    with pytest.raises(StateValueNotSerializableError, match=r"\(key \('x',\), txid 9\)$"):
        codec.encode_rows([("x",)], ["nine"], txid=9)
    # And without one, only the key is
    with pytest.raises(StateValueNotSerializableError, match=r"\(key \('x',\)\)$"):
        codec.encode_rows([("x",)], ["nine"])


def test_a_commit_that_cannot_store_a_value_names_the_batch_txid(db: Db) -> None:
    # Given an opaque map over a SQL store, in the commit of txid 4
    store = db.store("opaque")
    state = OpaqueMap(store, name="totals")
    state.begin_commit(4)
    # When a value that is not JSON is put
    with pytest.raises(StateValueNotSerializableError, match=r"key \('ann',\), txid 4\)$"):
        state.multi_put([("ann",)], [{"a", "b"}])
    state.rollback()
    # Then nothing was written
    assert db.raw_rows(store.table) == []
