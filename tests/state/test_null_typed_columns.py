"""A field with no type yet (every value of the batch ``None``: a file log's inferred field no
record of the batch had) into the lakehouse sinks (issue 32, item 4).

Before: the first batch created the table from the batch's schema, and pyiceberg refused its
``null`` column with a raw ``ValueError: Null type ... not supported`` on every retry (the
pipeline wedged at txid 0, later data or not); a later batch's new all-``None`` field was
refused for ever too. Now an evolving sink (``evolve_schema=True``) leaves such a column out
until a batch gives it a type (its rows read ``None`` there, as they would have); a sink that
does not evolve refuses it with a :class:`SchemaMismatchError` naming the txid, the field and
the fix (``schema=``), before anything is written; so does a merge key or a partition column
of no type. Iceberg (SQL catalog on SQLite and PostgreSQL) and Delta, which share
``state/schema_evolution.py``.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_trident.errors import SchemaMismatchError
from airflow_trident.state.delta import delta_state
from airflow_trident.state.iceberg import iceberg_state


@pytest.fixture(params=["iceberg-sqlite", "iceberg-postgresql", "delta"])
def sink(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """``sink(**options)``: a factory of the parametrized kind over a fresh table."""
    kind = request.param
    name = f"trident_tests.n{uuid.uuid4().hex[:10]}"
    if kind == "delta":
        path = str(tmp_path / "delta")
        return lambda **options: delta_state(path, "topo.nulls", **options)
    uri = (
        f"sqlite:///{tmp_path}/catalog.db"
        if kind == "iceberg-sqlite"
        else request.getfixturevalue("pg_url")
    )
    catalog = {
        "catalog_name": f"t{uuid.uuid4().hex[:10]}",
        "type": "sql",
        "uri": uri,
        "warehouse": f"file://{tmp_path}/warehouse",
    }
    return lambda **options: iceberg_state(name, "topo.nulls", catalog=catalog, **options)


def commit(factory: Any, txid: int, rows: list[dict[str, Any]]) -> None:
    state = factory.make_state()
    state.begin_commit(txid)
    state.write(rows)
    state.commit(txid)


def columns(factory: Any) -> list[str] | None:
    """The table's columns (``None``: no table)."""
    load = getattr(factory, "load_table", None)
    if load is not None:
        table = load()
        return None if table is None else list(table.schema().as_arrow().names)
    if not DeltaTable.is_deltatable(factory.path):
        return None
    return list(DeltaTable(factory.path).schema().to_arrow().names)


def rows(factory: Any, *names: str) -> list[tuple[Any, ...]]:
    load = getattr(factory, "load_table", None)
    if load is not None:
        found = load().scan().to_arrow().to_pylist()
    else:
        found = pq.read_table(DeltaTable(factory.path).file_uris()).to_pylist()
    return sorted(tuple(r.get(n) for n in names) for r in found)


def test_a_field_of_no_type_waits_for_its_type(sink: Any) -> None:
    evolving = sink(evolve_schema=True)
    # Given a first batch in which no record has ``lang`` (its values all None)
    commit(evolving, 1, [{"word": "a", "n": 1, "lang": None}, {"word": "b", "n": 2, "lang": None}])
    # Then it is written, without the column (its type is not known yet)
    assert columns(evolving) == ["word", "n", "trident_txid"]
    # When a later batch's new field has no type either, and a replay of txid 1 comes
    commit(evolving, 2, [{"word": "c", "n": 3, "lang": None, "tag": None}])
    commit(evolving, 1, [{"word": "a", "n": 1, "lang": None}, {"word": "b", "n": 2, "lang": None}])
    assert columns(evolving) == ["word", "n", "trident_txid"]
    # When a batch gives the field a type: the column is added; earlier rows read None
    commit(evolving, 3, [{"word": "d", "n": 4, "lang": "en", "tag": None}])
    assert columns(evolving) == ["word", "n", "trident_txid", "lang"]
    commit(evolving, 4, [{"word": "e", "n": 5, "lang": None}])
    assert rows(evolving, "word", "lang", "trident_txid") == [
        ("a", None, 1), ("b", None, 1), ("c", None, 2), ("d", "en", 3), ("e", None, 4),
    ]  # fmt: skip


def test_a_sink_that_does_not_evolve_names_the_txid_the_field_and_the_fix(sink: Any) -> None:
    strict = sink()
    with pytest.raises(SchemaMismatchError, match=r"txid 1: .*\['lang'\].*schema=") as raised:
        commit(strict, 1, [{"word": "a", "lang": None}])
    assert "Null type" not in str(raised.value)
    assert columns(strict) is None  # nothing written
    # And with the type given, the same batch commits (Delta's schema names its txid column)
    typed = sink(schema=pa.schema([("word", pa.string()), ("lang", pa.string())]))
    commit(typed, 1, [{"word": "a", "lang": None}])
    assert (columns(typed) or [])[:2] == ["word", "lang"]


def test_a_merge_key_of_no_type_is_refused_clearly(sink: Any) -> None:
    upsert = sink(evolve_schema=True, merge_keys=("word",))
    with pytest.raises(SchemaMismatchError, match=r"txid 1: .*\['word'\].*schema="):
        commit(upsert, 1, [{"word": None, "n": 1}])
    assert columns(upsert) is None
