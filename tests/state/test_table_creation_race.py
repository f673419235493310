"""Several processes (Spark tasks, workers of two DAGs) creating the same tables at the same
moment on PostgreSQL, whose ``CREATE TABLE IF NOT EXISTS`` is not atomic: every creator
succeeds, and the tables are there once.

The creators are threads with their own engines (own server sessions), released together by a
barrier so the race is as likely as it gets; each round uses fresh table names.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.state.sql.schema import ensure_table
from airflow_trident.state.sql.table import TableLayout
from airflow_trident.state.window import SqlWindowsStoreFactory

pytestmark = pytest.mark.integration

CREATORS = 6
ROUNDS = 8


@pytest.fixture
def engines(pg_url: str) -> Iterator[list[sa.Engine]]:
    made = [sa.create_engine(pg_url, poolclass=sa.pool.NullPool) for _ in range(CREATORS)]
    yield made
    for engine in made:
        engine.dispose()


def _all_at_once(work: Callable[[int], None]) -> list[BaseException]:
    barrier = threading.Barrier(CREATORS)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            work(i)
        except BaseException as exc:  # collected and asserted on
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(CREATORS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def _creating_table(engines: list[sa.Engine], layout: TableLayout) -> Callable[[int], None]:
    def create(i: int) -> None:
        ensure_table(engines[i], layout)

    return create


def _creating_window_store(engines: list[sa.Engine], prefix: str) -> Callable[[int], None]:
    def create(i: int) -> None:
        SqlWindowsStoreFactory(engines[i], prefix).engine()

    return create


def _drop(engine: sa.Engine, *names: str) -> None:
    with engine.begin() as conn:
        for name in names:
            conn.execute(sa.text(f'DROP TABLE IF EXISTS "{name}"'))


def test_state_tables_created_at_once_by_several_sessions(
    engines: list[sa.Engine], unique_name: str
) -> None:
    for round_ in range(ROUNDS):
        layout = TableLayout.build(f"{unique_name}_{round_}", state_type="opaque")
        try:
            errors = _all_at_once(_creating_table(engines, layout))
            assert errors == []
            assert sa.inspect(engines[0]).has_table(layout.name)
        finally:
            _drop(engines[0], layout.name)


def test_window_store_tables_created_at_once_by_several_sessions(
    engines: list[sa.Engine], unique_name: str
) -> None:
    for round_ in range(ROUNDS):
        prefix = f"{unique_name}_{round_}"
        names = [f"{prefix}_{suffix}" for suffix in ("heads", "batches", "tuples")]
        try:
            errors = _all_at_once(_creating_window_store(engines, prefix))
            assert errors == []
            inspector = sa.inspect(engines[0])
            assert all(inspector.has_table(name) for name in names)
        finally:
            _drop(engines[0], *names)


def test_commit_ledger_tables_created_at_once_by_several_sessions(
    engines: list[sa.Engine],
) -> None:
    # The ledger's table names are fixed (other tests' rows stay): creating existing tables at
    # once must succeed too.
    def create(i: int) -> None:
        CommitLedger(engines[i])._table()

    errors = _all_at_once(create)
    assert errors == []
