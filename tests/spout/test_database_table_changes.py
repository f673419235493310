"""Rows of a database table that change before their batch commits (issue 19, symptom 5).

Txid 1 reads rows 1-4 (``a b c d``), writes its counts to the state and fails before
ZooKeeper's compare-and-set; then ``UPDATE t SET word = 'B' WHERE id = 2``. The retry counted 5
rows out of 4 (the transactional state skipped ``b``, already at txid 1, and added ``B``).

* The table read as a transactional source (the default): each range's metadata holds the
  digest of the rows the batch first read; the retry sees other rows and fails with
  ``SpoutEmitError`` naming the range, nothing committed; with the row restored, it commits
  the 4 rows once.
* Read as an opaque source (``as_opaque()``) into an opaque state: the retry reads the rows as
  they are and the state holds exactly them (the key only the failed attempt wrote, ``b``, is
  reverted): 4 rows, ``B`` not ``b``; a row deleted before the retry is not counted.

In-process (SQLAlchemy) and on Spark (PostgreSQL: JDBC reads by the executors; SQLite: read on
the driver), table and state on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.errors import SpoutEmitError
from airflow_trident.operation import Count
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.database_table import DatabaseTableSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology

pytestmark = pytest.mark.integration

Process = Callable[[BatchSteps, int], Any]


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        pg: str = request.getfixturevalue("pg_url")
        return pg
    return f"sqlite:///{tmp_path}/db.sqlite"


@pytest.fixture
def table(url: str, unique_name: str) -> Iterator[str]:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE {unique_name} (id INTEGER PRIMARY KEY, word TEXT)"))
        conn.execute(
            sa.text(f"INSERT INTO {unique_name} (id, word) VALUES (1,'a'),(2,'b'),(3,'c'),(4,'d')")
        )
    yield unique_name
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS {unique_name}"))
        conn.execute(sa.text(f"DROP TABLE IF EXISTS {unique_name}_counts"))
    engine.dispose()


def execute(url: str, sql: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(sql))
    engine.dispose()


def counts(url: str, table: str) -> dict[str, int]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f"SELECT word, val FROM {table}_counts")).all()
    engine.dispose()
    return {str(w): int(n) for w, n in rows}


def word_counts(url: str, table: str, tmp_path: Path, *, opaque: bool) -> BatchSteps:
    spout: Any = DatabaseTableSpout(url, table, ["word"], max_rows_per_batch=10)
    kind = "opaque" if opaque else "transactional"
    state = sql_state(url, f"{table}_counts", kind, key_fields=("word",), value_type="bigint")
    t = TridentTopology(f"{table}_topology")
    (
        t.new_stream("events", spout.as_opaque() if opaque else spout)
        .group_by(["word"])
        .persistent_aggregate(state, Count(), ["n"], name="counts")
    )
    staging = StagingArea(str(tmp_path / "staging"), t.name)
    return BatchSteps(t, MemoryCoordinatorStore(t.name), staging)


def fail_after_state(steps: BatchSteps, process: Process) -> int:
    """Txid 1 processed, its state written, and no compare-and-set (the batch failed)."""
    txid = int(steps.begin("r1")["txid"])
    process(steps, txid)
    plan = steps.plan(txid)
    steps.apply_staged(plan, steps.staging.verified_manifest(plan.attempt, plan.metas))
    assert steps.store.commits.committed_txid() == 0
    return txid


def commit(steps: BatchSteps, process: Process, txid: int) -> None:
    process(steps, txid)
    assert steps.commit(txid)["applied"] is True
    steps.success(txid)


def transactional_replay_after_an_update(
    url: str, table: str, tmp_path: Path, process: Process
) -> None:
    steps = word_counts(url, table, tmp_path, opaque=False)
    txid = fail_after_state(steps, process)
    assert counts(url, table) == {"a": 1, "b": 1, "c": 1, "d": 1}
    # When row 2 is updated before the retry
    execute(url, f"UPDATE {table} SET word = 'B' WHERE id = 2")
    # Then the retry fails naming the range, and nothing is committed
    with pytest.raises(SpoutEmitError, match=rf"'{table}' partition 'all': the rows of range"):
        process(steps, txid)
    assert steps.store.commits.committed_txid() == 0
    # And once the row is restored, the retry commits the 4 rows once
    execute(url, f"UPDATE {table} SET word = 'b' WHERE id = 2")
    commit(steps, process, txid)
    assert counts(url, table) == {"a": 1, "b": 1, "c": 1, "d": 1}


def opaque_replay_after_an_update_and_a_delete(
    url: str, table: str, tmp_path: Path, process: Process
) -> None:
    steps = word_counts(url, table, tmp_path, opaque=True)
    txid = fail_after_state(steps, process)
    # When row 2 is updated and row 3 deleted before the retry
    execute(url, f"UPDATE {table} SET word = 'B' WHERE id = 2")
    execute(url, f"DELETE FROM {table} WHERE id = 3")
    # Then the retry commits the rows as they are: b and c reverted, B counted, once
    commit(steps, process, txid)
    assert counts(url, table) == {"a": 1, "B": 1, "d": 1}
    # And a later row comes in the next txid
    execute(url, f"INSERT INTO {table} (id, word) VALUES (5, 'a')")
    commit(steps, process, int(steps.begin("r2")["txid"]))
    assert counts(url, table) == {"a": 2, "B": 1, "d": 1}


def in_process(steps: BatchSteps, txid: int) -> Any:
    return steps.process_local(txid)


def test_a_transactional_replay_after_an_update_fails_clearly_in_process(
    url: str, table: str, tmp_path: Path
) -> None:
    transactional_replay_after_an_update(url, table, tmp_path, in_process)


def test_an_opaque_replay_after_an_update_and_a_delete_counts_the_rows_as_they_are(
    url: str, table: str, tmp_path: Path
) -> None:
    opaque_replay_after_an_update_and_a_delete(url, table, tmp_path, in_process)


@pytest.fixture
def on_spark(spark: Any) -> Process:
    from airflow_trident.batch.on_spark import process_on_spark

    # the session-wide Spark has the JDBC driver on its spark.jars (tests/harness/jars.py)

    def process(steps: BatchSteps, txid: int) -> Any:
        return process_on_spark(steps, spark, txid, 0.0)

    return process


def test_a_transactional_replay_after_an_update_fails_clearly_on_spark(
    url: str, table: str, tmp_path: Path, on_spark: Process
) -> None:
    transactional_replay_after_an_update(url, table, tmp_path, on_spark)


def test_an_opaque_replay_after_an_update_and_a_delete_on_spark(
    url: str, table: str, tmp_path: Path, on_spark: Process
) -> None:
    opaque_replay_after_an_update_and_a_delete(url, table, tmp_path, on_spark)


COUNT_CHANGED = (
    r"database table '{table}' partition 'all': range id in \(None, 4\] holds {now} rows, 3 when "
    r"the batch first read it: rows were inserted or deleted below the high-water mark, so the "
    r"batch cannot be replayed exactly; nothing is committed\. Hint: "
)


def transactional_replay_after_an_insert_or_delete(
    url: str, table: str, tmp_path: Path, process: Process, change: str
) -> None:
    """Issue 32, item 6: a row inserted into (or deleted from) a failed txid's range before its
    retry is named as such on every runtime (Spark's JDBC read said "a row was updated or
    deleted" for an insert)."""
    execute(url, f"DELETE FROM {table} WHERE id = 3")  # txid 1 reads ids 1, 2, 4
    steps = word_counts(url, table, tmp_path, opaque=False)
    txid = fail_after_state(steps, process)
    if change == "insert":
        execute(url, f"INSERT INTO {table} (id, word) VALUES (3, 'c')")
    else:
        execute(url, f"DELETE FROM {table} WHERE id = 2")
    now = 4 if change == "insert" else 2
    with pytest.raises(SpoutEmitError, match=COUNT_CHANGED.format(table=table, now=now)):
        process(steps, txid)
    assert steps.store.commits.committed_txid() == 0


@pytest.mark.parametrize("change", ["insert", "delete"])
def test_a_row_inserted_or_deleted_before_a_retry_is_named_in_process(
    url: str, table: str, tmp_path: Path, change: str
) -> None:
    transactional_replay_after_an_insert_or_delete(url, table, tmp_path, in_process, change)


@pytest.mark.parametrize("change", ["insert", "delete"])
def test_a_row_inserted_or_deleted_before_a_retry_is_named_on_spark(
    url: str, table: str, tmp_path: Path, on_spark: Process, change: str
) -> None:
    transactional_replay_after_an_insert_or_delete(url, table, tmp_path, on_spark, change)
