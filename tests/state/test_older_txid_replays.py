"""A replay of an *older* txid into the lakehouse sinks (issue 32, item 1).

A txid below the newest one a sink's app wrote is complete in the table: the coordinator commits
txids in order, so every partition of it was applied before a later txid wrote anything. Its
replay — with another commit partition count, or with its rows spread over the partitions
differently (the other runtime's hash) — must write nothing and must not move the record of the
newest txid backwards. The replay of the newest txid with another count is refused with
``StateError`` before anything is written. Iceberg on SQLite and PostgreSQL catalogs; Delta.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_trident.errors import StateError
from airflow_trident.state.delta import delta_state
from airflow_trident.state.iceberg import iceberg_state
from tests.harness.iceberg_sinks import table_rows


@pytest.fixture(params=["sqlite", "postgresql"])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """A SQL catalog on SQLite or PostgreSQL (its own catalog name), warehouse under tmp."""
    if request.param == "sqlite":
        uri = f"sqlite:///{tmp_path}/catalog.db"
    else:
        uri = request.getfixturevalue("pg_url")
    return {
        "catalog_name": f"t{uuid.uuid4().hex[:10]}",
        "type": "sql",
        "uri": uri,
        "warehouse": f"file://{tmp_path}/warehouse",
    }


def commit(factory: Any, index: int, count: int, txid: int) -> None:
    """Partition ``index`` of ``count`` commits its row of ``txid``."""
    state = factory.make_state(index, count)
    state.begin_commit(txid)
    state.write([{"txid_of_row": txid, "p": index}])
    state.commit(txid)


def committed_two_ways(factory: Any, last: int) -> None:
    """Txids 1..``last``, each written by partitions 0 and 1 of 2."""
    for txid in range(1, last + 1):
        for index in range(2):
            commit(factory, index, 2, txid)


def iceberg_rows(factory: Any) -> list[tuple[int, int]]:
    return sorted((r["txid_of_row"], r["p"]) for r in table_rows(factory))


def delta_rows(path: Path) -> list[tuple[int, int]]:
    table = pq.read_table(DeltaTable(str(path)).file_uris())
    return sorted(zip(table["txid_of_row"].to_pylist(), table["p"].to_pylist(), strict=True))


EXPECTED = [(t, p) for t in range(1, 9) for p in range(2)]


def test_iceberg_older_txid_replayed_with_another_count_writes_nothing(
    catalog: dict[str, str],
) -> None:
    # Given txids 1..8 written by 2 partitions
    factory = iceberg_state(f"trident_tests.o{uuid.uuid4().hex[:8]}", "topo.o", catalog=catalog)
    committed_two_ways(factory, 8)
    assert iceberg_rows(factory) == EXPECTED
    # When txid 3 is replayed by 3 partitions
    for index in range(3):
        commit(factory, index, 3, 3)
    # Then nothing was written, and the record of the newest txid did not go backwards
    assert iceberg_rows(factory) == EXPECTED
    props = factory.load_table().properties
    assert props["trident.txid.topo.o"] == "8/2"
    assert "trident.txid.topo.o.p0of3" not in props
    # And the newest txid replayed by 3 partitions is still refused before writing
    with pytest.raises(StateError, match=r"txid 8 was written with 2 partitions .* again with 3"):
        commit(factory, 2, 3, 8)
    assert iceberg_rows(factory) == EXPECTED
    # And txid 9 is written as usual
    commit(factory, 0, 2, 9)
    assert iceberg_rows(factory) == [*EXPECTED, (9, 0)]
    assert factory.load_table().properties["trident.txid.topo.o"] == "9/2"


def test_iceberg_older_txid_replayed_with_rows_moved_writes_nothing(
    catalog: dict[str, str],
) -> None:
    # Given txids 1..8, partition 1 writing only up to txid 2 (it had no rows after)
    factory = iceberg_state(f"trident_tests.m{uuid.uuid4().hex[:8]}", "topo.m", catalog=catalog)
    for txid in range(1, 9):
        commit(factory, 0, 2, txid)
        if txid <= 2:
            commit(factory, 1, 2, txid)
    before = iceberg_rows(factory)
    # When txid 5 is replayed with rows in partition 1 (the other runtime's hash placed them
    # there: same count, another spread)
    commit(factory, 1, 2, 5)
    # Then nothing was written
    assert iceberg_rows(factory) == before
    assert factory.load_table().properties["trident.txid.topo.m"] == "8/2"


def test_delta_older_txid_replayed_with_another_count_writes_nothing(tmp_path: Path) -> None:
    # Given txids 1..8 written by 2 partitions
    path = tmp_path / "older"
    factory = delta_state(str(path), "topo.o")
    committed_two_ways(factory, 8)
    assert delta_rows(path) == EXPECTED
    # When txid 3 is replayed by 3 partitions
    for index in range(3):
        commit(factory, index, 3, 3)
    # Then nothing was written, and the record of the newest txid did not go backwards
    assert delta_rows(path) == EXPECTED
    table = DeltaTable(str(path))
    assert table.transaction_version("topo.o") == 8 * 4096 + 2
    assert table.transaction_version("topo.o.p0of3") is None
    # And the newest txid replayed by 3 partitions is still refused before writing
    with pytest.raises(StateError, match=r"txid 8 was written with 2 partitions .* again with 3"):
        commit(factory, 2, 3, 8)
    assert delta_rows(path) == EXPECTED
    # And txid 9 is written as usual
    commit(factory, 0, 2, 9)
    assert delta_rows(path) == [*EXPECTED, (9, 0)]


def test_delta_older_txid_replayed_with_rows_moved_writes_nothing(tmp_path: Path) -> None:
    # Given txids 1..8, partition 1 writing only up to txid 2 (it had no rows after)
    path = tmp_path / "moved"
    factory = delta_state(str(path), "topo.m")
    for txid in range(1, 9):
        commit(factory, 0, 2, txid)
        if txid <= 2:
            commit(factory, 1, 2, txid)
    before = delta_rows(path)
    # When txid 5 is replayed with rows in partition 1 / Then nothing was written
    commit(factory, 1, 2, 5)
    assert delta_rows(path) == before
    assert DeltaTable(str(path)).transaction_version("topo.m") == 8 * 4096 + 2
