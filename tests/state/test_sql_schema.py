"""A SQL state table in a named PostgreSQL schema (issue 20, finding 2):
``sql_state(None, "analytics.word_counts", ...)`` creates the schema if absent and the table in
it, and every read and write (the row paths and the COPY bulk path) goes there; on SQLite a
schema-qualified name is a clear ConfigurationError. Before, the name was refused as an invalid
table name (InvalidNameError), so a state could only live in the connection's default schema."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from airflow_trident.batch.runner import LocalRunner
from airflow_trident.errors import ConfigurationError, InvalidNameError
from airflow_trident.operation import Count, Split
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.sql import SqlMapStateFactory, sql_state
from airflow_trident.topology import TridentTopology

SENTENCES = [("the cow jumped over the moon",), ("the man went to the store",), ("dog cat",)]


@pytest.fixture
def schema(pg_url: str) -> Iterator[str]:
    name = f"s_{uuid.uuid4().hex[:10]}"
    yield name
    with sa.create_engine(pg_url).begin() as conn:
        conn.execute(sa.text(f"DROP SCHEMA IF EXISTS {name} CASCADE"))


@pytest.mark.integration
def test_a_state_lives_in_a_named_schema_on_postgresql(pg_url: str, schema: str) -> None:
    # Given a topology whose states name a schema that does not exist yet: one on the row paths,
    # one on the COPY bulk path (copy_threshold=1), opaque with its txid index
    t = TridentTopology(f"schema_{schema}")
    spout = MemoryTransactionalSpout({"p0": SENTENCES[:2], "p1": SENTENCES[2:]}, ["sentence"], 1)
    words = t.new_stream("sentences", spout).each(["sentence"], Split(), ["word"])
    counts = sql_state(None, f"{schema}.word_counts", "opaque", key_fields=("word",),
                       value_fields=("count",), value_type="bigint", txid_index=True)  # fmt: skip
    bulk = SqlMapStateFactory(
        None, f"{schema}.bulk_counts", "transactional", key_fields=("word",),
        value_type="bigint", copy_threshold=1,
    )  # fmt: skip
    words.group_by(["word"]).persistent_aggregate(counts, Count(), ["count"], name="counts")
    words.group_by(["word"]).persistent_aggregate(bulk, Count(), ["count"], name="bulk")
    assert repr(counts).endswith(f"'{schema}.word_counts', 'opaque', cache_size=0)")
    # When the in-process runtime runs batches in the run's PostgreSQL database (r2 retried)
    runner = LocalRunner(t, states=StateBinding(pg_url))
    for run in ("r1", "r2", "r2", "r3"):
        runner.run_batch(run_id=run)
    # Then both tables are in the schema, with each word counted once
    expected = Counter(w for (s,) in SENTENCES for w in s.split())
    engine = sa.create_engine(pg_url)
    with engine.connect() as conn:
        shaped = dict(conn.execute(sa.text(f"SELECT word, count FROM {schema}.word_counts")).all())
        copied = dict(conn.execute(sa.text(f"SELECT word, val FROM {schema}.bulk_counts")).all())
    assert shaped == dict(expected)
    assert copied == dict(expected)
    inspector = sa.inspect(engine)
    assert sorted(inspector.get_table_names(schema=schema)) == ["bulk_counts", "word_counts"]
    assert [ix["name"] for ix in inspector.get_indexes("word_counts", schema)] == [
        "word_counts_txid_ix"
    ]
    assert not inspector.has_table("word_counts")  # nothing in the default schema
    # and a state of the existing schema reads the same values
    state = sql_state(pg_url, f"{schema}.word_counts", "opaque", key_fields=("word",),
                      value_fields=("count",), value_type="bigint").make_state()  # fmt: skip
    assert state.multi_get([("the",), ("dog",)]) == [expected["the"], expected["dog"]]


def test_a_schema_on_sqlite_is_a_clear_error(tmp_path: object) -> None:
    factory = sql_state("sqlite://", "analytics.word_counts", "opaque")  # no I/O at build
    with pytest.raises(ConfigurationError, match=r"'analytics.word_counts': a schema-qualified "
                       r"table needs PostgreSQL, but the state database is sqlite"):  # fmt: skip
        factory.make_state()


def test_a_table_name_has_at_most_one_schema() -> None:
    with pytest.raises(InvalidNameError, match=r"give 'table' or 'schema\.table'"):
        sql_state(None, "db.analytics.word_counts", "opaque")
    with pytest.raises(InvalidNameError, match="schema name 'bad-schema'"):
        sql_state(None, "bad-schema.word_counts", "opaque")
