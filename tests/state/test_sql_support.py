"""Shared fixtures of the ``test_sql_*`` files (this module holds no tests).

The ``db`` fixture runs a test on three backends: SQLite in ``tmp_path``, PostgreSQL through the
row-by-row paths, and PostgreSQL through the COPY paths (``copy_threshold=0``). The PostgreSQL ones
are ``integration`` tests and use ``pg_url``; their tables are dropped afterwards.

Use it with ``from tests.state.test_sql_support import db_fixture  # noqa: F401``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.state.sql import SqlBackingMap
from airflow_trident.state.sql.engine import shared_engine

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("pg-rows", id="pg-rows", marks=pytest.mark.integration),
    pytest.param("pg-copy", id="pg-copy", marks=pytest.mark.integration),
]
NEVER = 10**9


@dataclass
class Db:
    """One database for one test: makes stores on fresh tables and drops them afterwards."""

    kind: str
    engine: sa.Engine
    base_name: str
    copy_threshold: int
    tables: list[str] = field(default_factory=list)
    stores: list[SqlBackingMap] = field(default_factory=list)

    @property
    def is_pg(self) -> bool:
        return self.kind.startswith("pg")

    def table_name(self) -> str:
        name = f"{self.base_name}_{len(self.tables)}"
        self.tables.append(name)
        return name

    def store(self, state_type: str, *, table: str | None = None, **kwargs: Any) -> SqlBackingMap:
        """A store on a fresh table (or on ``table``)."""
        return self.track(
            SqlBackingMap(
                self.engine,
                table or self.table_name(),
                state_type=state_type,
                copy_threshold=self.copy_threshold,
                **kwargs,
            )
        )

    def track(self, store: SqlBackingMap) -> SqlBackingMap:
        """Remember ``store`` so that a commit a failed test left open is rolled back."""
        self.stores.append(store)
        return store

    def close(self) -> None:
        for store in self.stores:
            store.rollback()

    def raw_rows(self, table: str) -> list[tuple[Any, ...]]:
        """Every row of ``table``, sorted, read with plain SQL (but ``trident_null_keys``, the
        primary key's column of ``None`` key fields: ``tests/state/test_sql_null_keys.py``)."""
        with self.engine.connect() as conn:
            quoted = self.engine.dialect.identifier_preparer.quote(table)
            result = conn.execute(sa.text(f"SELECT * FROM {quoted}"))
            keep = [i for i, c in enumerate(result.keys()) if c != "trident_null_keys"]
            return sorted(tuple(r[i] for i in keep) for r in result)


@pytest.fixture(name="db", params=BACKENDS)
def db_fixture(request: pytest.FixtureRequest, tmp_path: Any, unique_name: str) -> Iterator[Db]:
    kind: str = request.param
    if kind == "sqlite":
        engine = sa.create_engine(f"sqlite:///{tmp_path / 'state.db'}")
        db = Db(kind, engine, unique_name, NEVER)
        yield db
        db.close()
        engine.dispose()
        return
    pg_url: str = request.getfixturevalue("pg_url")
    engine = shared_engine(pg_url)
    db = Db(kind, engine, unique_name, 0 if kind == "pg-copy" else NEVER)
    yield db
    db.close()
    with engine.begin() as conn:
        conn.execute(sa.text("SET LOCAL lock_timeout = '10s'"))
        for table in db.tables:
            conn.execute(sa.text(f'DROP TABLE IF EXISTS "{table}"'))
