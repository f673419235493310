"""Schema evolution of the Delta sink: a new field adds a nullable column only when the sink
opts in (``evolve_schema=True``), incompatible changes are refused before anything is written,
and rows of an older schema (a replay of an older txid) are written with nulls for the new
columns. Tables are read with ``pyarrow.parquet`` over ``file_uris()`` (delta-io/delta-rs#2184)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_trident.errors import SchemaMismatchError
from airflow_trident.state.delta import delta_state


def commit(state: Any, txid: int, rows: list[dict[str, Any]]) -> None:
    state.begin_commit(txid)
    state.write(rows)
    state.commit(txid)


def read(path: Path, *columns: str) -> list[tuple[Any, ...]]:
    rows = pq.read_table(DeltaTable(str(path)).file_uris()).to_pylist()
    return sorted(tuple(r.get(c) for c in columns) for r in rows)


@pytest.mark.parametrize("merge_keys", [(), ("k",)])
def test_a_new_field_is_added_only_by_an_evolving_sink(
    tmp_path: Path, merge_keys: tuple[str, ...]
) -> None:
    # Given a Delta table with columns k, n (appended, or merged on k)
    path = tmp_path / "t"
    commit(delta_state(str(path), "topo.e", merge_keys=merge_keys).make_state(), 1, [
        {"k": "a", "n": 1},
    ])  # fmt: skip
    # When a batch brings a new field to a sink that does not evolve / Then nothing is written
    with pytest.raises(SchemaMismatchError, match=r"columns the table does not: \['lang'\]"):
        commit(delta_state(str(path), "topo.e", merge_keys=merge_keys).make_state(), 2, [
            {"k": "b", "n": 2, "lang": "en"},
        ])  # fmt: skip
    assert DeltaTable(str(path)).version() == 0
    # When the sink evolves / Then the column is added (nullable) with the rows
    evolving = delta_state(str(path), "topo.e", merge_keys=merge_keys, evolve_schema=True)
    commit(evolving.make_state(), 2, [{"k": "b", "n": 2, "lang": "en"}])
    field = DeltaTable(str(path)).schema().to_arrow().field("lang")
    assert field.nullable
    assert read(path, "k", "lang") == [("a", None), ("b", "en")]


def test_an_incompatible_type_is_refused_before_writing(tmp_path: Path) -> None:
    path = tmp_path / "t"
    sink = delta_state(str(path), "topo.e", evolve_schema=True).make_state()
    commit(sink, 1, [{"k": "a", "n": 1}])
    with pytest.raises(SchemaMismatchError, match=r"incompatible column types \['n: string"):
        commit(sink, 2, [{"k": "b", "n": "two"}])
    assert DeltaTable(str(path)).version() == 0
    assert sink.written_txid() == 1


def test_rows_of_an_older_schema_are_written_with_nulls(tmp_path: Path) -> None:
    # Given a table that gained a column at txid 2 of one writer
    path = tmp_path / "t"
    sink = delta_state(str(path), "topo.e", evolve_schema=True).make_state()
    commit(sink, 1, [{"k": "a", "n": 1}])
    commit(sink, 2, [{"k": "b", "n": 2, "lang": "en"}])
    # When another writer's older txid brings rows without it (and a narrower int type)
    import pyarrow as pa

    older = delta_state(
        str(path),
        "other.e",
        schema=pa.schema([("k", pa.string()), ("n", pa.int32()), ("trident_txid", pa.int64())]),
    )
    commit(older.make_state(), 1, [{"k": "c", "n": 3}])
    # Then they are written with the schema they had: the new column null
    assert read(path, "k", "n", "lang", "trident_txid") == [
        ("a", 1, None, 1), ("b", 2, "en", 2), ("c", 3, None, 1),
    ]  # fmt: skip


@pytest.mark.parametrize("merge_keys", [(), ("k",)])
def test_a_partition_whose_schema_grew_under_its_write_plans_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, merge_keys: tuple[str, ...]
) -> None:
    """Two commit partitions of one txid on an evolving sink (a Spark commit runs them at
    once): partition 1 reads the table's two columns, then partition 0 adds ``lang`` before
    partition 1 writes. delta-rs refuses a 2-column append to the 3-column table; the
    partition plans again against the new schema (found by CI: ``number of fields does not
    match: 3 vs 4``)."""
    from airflow_trident.state import delta as delta_module

    path = tmp_path / "t"
    factory = delta_state(str(path), "topo.e", merge_keys=merge_keys, evolve_schema=True)
    first = factory.make_state()
    commit(first, 1, [{"k": "a", "n": 1}])
    zero, one = factory.make_state(0, 2), factory.make_state(1, 2)
    write = delta_module.DeltaState._write
    raced: list[int] = []

    def interleaved(self: Any, table: Any, rows: Any, txid: int) -> None:
        if self is one and not raced:  # partition 0 commits between the read and the write
            raced.append(txid)
            commit(zero, txid, [{"k": "b", "n": 2, "lang": "en"}])
        write(self, table, rows, txid)

    monkeypatch.setattr(delta_module.DeltaState, "_write", interleaved)
    commit(one, 2, [{"k": "c", "n": 3}])
    assert raced == [2]
    assert read(path, "k", "n", "lang") == [("a", 1, None), ("b", 2, "en"), ("c", 3, None)]
