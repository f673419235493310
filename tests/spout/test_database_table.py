"""The database table source (SQLite and PostgreSQL): incremental by an id column, one
high-water mark per partition, each txid's ranges fixed at first emit and replayed exactly."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.errors import ConfigurationError, SpoutEmitError
from airflow_trident.operation import Count
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.base import ListCollector
from airflow_trident.spout.database_table import DatabaseTableSpout
from airflow_trident.spout.partitioned import PartitionedTransactionalSpoutExecutor
from airflow_trident.spout.tx_state import MemoryPartitionState
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology

pytestmark = pytest.mark.integration


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        pg: str = request.getfixturevalue("pg_url")
        return pg
    return f"sqlite:///{tmp_path}/source.db"


@pytest.fixture
def events(url: str, unique_name: str) -> Iterator[str]:
    """An empty ``events(id, user_id, word)`` table with an increasing id."""
    engine = sa.create_engine(url)
    id_type = "BIGSERIAL" if url.startswith("postgresql") else "INTEGER"
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                f"CREATE TABLE {unique_name} (id {id_type} PRIMARY KEY, user_id INT, word TEXT)"
            )
        )
    engine.dispose()
    yield unique_name
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS {unique_name}"))
    engine.dispose()


def insert(url: str, table: str, rows: list[tuple[int, str]]) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(f"INSERT INTO {table} (user_id, word) VALUES (:u, :w)"),
            [{"u": u, "w": w} for u, w in rows],
        )
    engine.dispose()


def emit(executor: PartitionedTransactionalSpoutExecutor, txid: int) -> dict[str, list[Any]]:
    """The tuples batch ``txid`` emits, by partition."""
    collector = ListCollector()
    coordinator = executor.get_coordinator()
    meta = coordinator.initialize_transaction(txid, None, None)
    executor.get_emitter().emit_batch(TransactionAttempt(txid, 0), meta, collector)
    return {p: list(rows) for p, rows in collector.partitions.items()}


def test_each_partition_advances_its_own_mark_and_a_replay_reads_the_same_rows(
    url: str, events: str
) -> None:
    # Given 5 rows of user 0 and 1 row of user 1, two partitions by user_id % 2, 2 rows a batch
    insert(url, events, [(0, f"a{i}") for i in range(5)] + [(1, "b0")])
    spout = DatabaseTableSpout(
        url, events, ["id", "word"], partitions=2, partition_column="user_id",
        max_rows_per_batch=2,
    )  # fmt: skip
    executor = PartitionedTransactionalSpoutExecutor(spout, MemoryPartitionState())
    # When txid 1 and 2 are emitted, rows arrive, and txid 2 is emitted again
    first = emit(executor, 1)
    second = emit(executor, 2)
    insert(url, events, [(1, "b1"), (0, "a5")])
    again = emit(executor, 2)
    third = emit(executor, 3)
    # Then each partition read at most 2 rows per batch, from its own mark
    words = {t: {p: [r[1] for r in rows] for p, rows in b.items()} for t, b in
             ((1, first), (2, second), (3, third))}  # fmt: skip
    assert words == {
        1: {"p0": ["a0", "a1"], "p1": ["b0"]},
        2: {"p0": ["a2", "a3"], "p1": []},
        3: {"p0": ["a4", "a5"], "p1": ["b1"]},
    }
    # And the replay of txid 2 read exactly its first emit, not the rows that arrived since
    assert again == second
    # And the metadata is the (low, high] range of each partition with its row count and the
    # digest of the rows read
    meta = executor.state.get("p0", 2)
    assert {k: meta[k] for k in ("low", "high", "count")} == {"low": 2, "high": 4, "count": 2}
    assert isinstance(meta["digest"], str)
    assert len(meta["digest"]) == 15


def test_named_predicates_are_partitions(url: str, events: str) -> None:
    insert(url, events, [(7, "x"), (8, "y"), (7, "z")])
    spout = DatabaseTableSpout(
        url, events, ["word"], partitions={"seven": "user_id = 7", "eight": "user_id = 8"}
    )
    executor = PartitionedTransactionalSpoutExecutor(spout, MemoryPartitionState())
    assert emit(executor, 1) == {"seven": [("x",), ("z",)], "eight": [("y",)]}


def test_a_replay_of_a_range_that_changed_fails_naming_it(url: str, events: str) -> None:
    # Given txid 1 emitted over ids 1..3
    insert(url, events, [(0, "a"), (0, "b"), (0, "c")])
    spout = DatabaseTableSpout(url, events, ["id", "word"])
    executor = PartitionedTransactionalSpoutExecutor(spout, MemoryPartitionState())
    emit(executor, 1)
    # When a row of its range is deleted / Then its replay fails: it cannot be exact
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"DELETE FROM {events} WHERE id = 2"))
    engine.dispose()
    with pytest.raises(SpoutEmitError, match=r"range id in \(None, 3\] holds 2 rows, 3 when"):
        emit(executor, 1)


def test_word_counts_over_a_growing_table_are_exact_after_replays(
    url: str, events: str, tmp_path: Path
) -> None:
    # Given a topology counting words of the table into table-shaped transactional state
    insert(url, events, [(u, f"w{u % 3}") for u in range(20)])
    topology = TridentTopology("db_words")
    state = sql_state(
        f"sqlite:///{tmp_path}/state.db", "db_counts", "transactional", key_fields=("word",),
        value_fields=("count",), value_type="bigint",
    )  # fmt: skip
    spout = DatabaseTableSpout(
        url, events, ["word"], partitions=3, partition_column="user_id", max_rows_per_batch=3
    )
    (
        topology.new_stream("events", spout)
        .group_by(["word"])
        .persistent_aggregate(state, Count(), ["count"], name="counts")
    )
    store = MemoryCoordinatorStore(topology.name)
    steps = BatchSteps(topology, store, StagingArea(str(tmp_path / "staging"), topology.name))
    # When batches run while rows arrive, and committed txids are replayed
    for i in range(1, 9):
        txid = int(steps.begin(f"r{i}")["txid"])
        steps.process_local(txid)
        assert steps.commit(txid)["applied"]
        steps.success(txid)
        if i == 3:
            insert(url, events, [(u, f"w{u % 3}") for u in range(20, 30)])
    steps.replay(2)
    steps.replay(5)
    # Then the counts are the table's word counts
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        want = Counter(w for (w,) in conn.execute(sa.text(f"SELECT word FROM {events}")))
    engine.dispose()
    counts: Any = state.make_state()
    assert dict(zip(want, counts.multi_get([(w,) for w in want]), strict=True)) == want


def test_a_missing_column_and_bad_options_are_named(url: str, events: str) -> None:
    spout = DatabaseTableSpout(url, events, ["id", "colour"])
    with pytest.raises(ConfigurationError, match=r"has no column\(s\) \['colour'\]"):
        spout.table_object()
    with pytest.raises(ConfigurationError, match="partitions must be >= 1"):
        DatabaseTableSpout(url, events, ["id"], partitions=0)
    with pytest.raises(ConfigurationError, match="max_rows_per_batch"):
        DatabaseTableSpout(url, events, ["id"], max_rows_per_batch=0)


def test_an_unreachable_database_is_a_connection_error() -> None:
    spout = DatabaseTableSpout(
        "postgresql+psycopg://u:p@127.0.0.1:9/none?connect_timeout=2", "events", ["id"]
    )
    with pytest.raises(ConnectionError, match="database table 'events': cannot connect"):
        spout.get_partitioned_emitter().emit_partition_batch_new(None, ListCollector(), "all", None)


def test_is_ready_only_when_rows_beyond_the_high_water_marks_exist(url: str, events: str) -> None:
    # Given an empty table read by two partitions (user_id % 2)
    spout = DatabaseTableSpout(url, events, ["id", "word"], partitions=2,
                               partition_column="user_id")  # fmt: skip
    executor = PartitionedTransactionalSpoutExecutor(spout, MemoryPartitionState())
    coordinator = executor.get_coordinator()
    # Then nothing is ready while the table is empty
    assert coordinator.is_ready(1) is False
    # When rows of both partitions land: ready; once txid 1 took them: not ready for txid 2
    insert(url, events, [(0, "a0"), (1, "b0")])
    assert coordinator.is_ready(1) is True
    emit(executor, 1)
    assert coordinator.is_ready(2) is False
    # When a row lands in one partition only: ready again (its mark is behind)
    insert(url, events, [(1, "b1")])
    assert coordinator.is_ready(2) is True
    emit(executor, 2)
    assert coordinator.is_ready(3) is False
