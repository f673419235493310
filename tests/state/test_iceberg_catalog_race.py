"""A new SQL catalog's first users race to make its tables: the loser gets the catalog too.

Found by the test command: the two commit partitions of a Spark commit, each in its own Python
worker, loaded a brand-new SQLite catalog at once, and one failed with pyiceberg's "table
iceberg_tables already exists" (pyiceberg checks that the table is absent, then creates it; 22
of 30 rounds of 8 processes loading one new catalog had a loser). The test makes the race
happen every time: another connection creates the table between pyiceberg's check and its
``CREATE TABLE``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyiceberg")

from sqlalchemy import event
from sqlalchemy.engine import Engine

from airflow_trident.state.iceberg_catalog import load_catalog


@contextmanager
def another_process_wins_the_race(db: Path) -> Iterator[list[str]]:
    """Right before pyiceberg's first ``CREATE TABLE iceberg_tables`` on ``db``, another
    connection creates that table (as another process would); yields what it did."""
    won: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        create = statement.lstrip()
        if not won and create.startswith("CREATE TABLE iceberg_tables"):
            with sqlite3.connect(db) as other:
                other.execute(create)
            won.append("iceberg_tables")

    event.listen(Engine, "before_cursor_execute", before)
    try:
        yield won
    finally:
        event.remove(Engine, "before_cursor_execute", before)


def test_a_process_that_loses_the_race_to_make_the_catalog_tables_gets_the_catalog(
    tmp_path: Path,
) -> None:
    # Given a SQLite catalog database no process has made yet
    db = tmp_path / "catalog.db"
    props = {"type": "sql", "uri": f"sqlite:///{db}", "warehouse": f"file://{tmp_path}/wh"}
    # When another process makes its first table between pyiceberg's check and its own CREATE
    with another_process_wins_the_race(db) as won:
        catalog = load_catalog("race", props)
    # Then the race happened, and this process has a working catalog all the same
    assert won == ["iceberg_tables"]
    catalog.create_namespace("words")
    assert catalog.list_namespaces() == [("words",)]
