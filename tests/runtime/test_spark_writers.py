"""Spark's own lakehouse writers (issue 54, item 3): a state factory names the table format
whose Spark writer can append its staged rows (``AppendsOnSpark.spark_append``); the Spark
commit takes that format's writer. The moved check still answers, with a warning."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from airflow_trident.graph import PersistNode
from airflow_trident.runtime.spark.lakehouse import table_format as _table_format
from airflow_trident.state.base import AppendsOnSpark
from airflow_trident.state.delta import DeltaWriter, delta_state
from airflow_trident.state.iceberg import IcebergWriter, iceberg_state

_ENTRY: dict[str, Any] = {"files": [], "fields": ["n"]}


def _node(
    factory: Any, updater: Any, mode: Literal["aggregate", "update"] = "update"
) -> PersistNode:
    return PersistNode("p", (), ("n",), state="s", factory=factory, updater=updater, mode=mode)


@pytest.mark.parametrize(
    ("options", "updater", "expected"),
    [
        ({}, DeltaWriter(), "delta"),
        ({"merge_keys": ["k"]}, DeltaWriter(), None),
        ({"evolve_schema": True}, DeltaWriter(), None),
        ({"storage_options": {"AWS_REGION": "x"}}, DeltaWriter(), None),
        ({}, object(), None),
    ],
)
def test_a_delta_factory_names_its_spark_writer_for_plain_appends(
    options: dict[str, Any], updater: Any, expected: str | None
) -> None:
    # Given a Delta state, When the Spark commit asks which writer appends its rows
    factory = delta_state("/tmp/t", "app", **options)
    assert isinstance(factory, AppendsOnSpark)
    # Then Spark's Delta writer for a plain append, else the Python writer (None)
    assert factory.spark_append(updater) == expected
    assert _table_format(_node(factory, updater), _ENTRY) == expected


def test_only_updates_of_rows_arrow_carried_go_to_a_spark_writer() -> None:
    factory = delta_state("/tmp/t", "app")
    assert _table_format(_node(factory, DeltaWriter(), "aggregate"), _ENTRY) is None
    assert _table_format(_node(factory, DeltaWriter()), {**_ENTRY, "pickled": True}) is None


def test_an_iceberg_append_still_goes_to_spark_s_iceberg_writer() -> None:
    factory = iceberg_state("db.t", "app", catalog={"type": "sql", "uri": "sqlite:////tmp/c.db"})
    assert _table_format(_node(factory, IcebergWriter()), _ENTRY) == "iceberg"
    merging = iceberg_state("db.t", "app", catalog={"type": "sql"}, merge_keys=["k"])
    assert _table_format(_node(merging, IcebergWriter()), _ENTRY) is None


def test_delta_on_spark_answers_with_a_deprecation_warning() -> None:
    from airflow_trident.runtime.spark import lakehouse

    node = _node(delta_state("/tmp/t", "app"), DeltaWriter())
    with pytest.warns(DeprecationWarning, match="spark_append"):
        assert lakehouse.delta_on_spark(node, _ENTRY) is True
