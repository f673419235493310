"""A topology the table-shaped state tests load by reference (Spark executors import it): an
opaque spout whose partitions ``TRIDENT_UNREADABLE_PARTITIONS`` names emit nothing, counted into
a table-shaped opaque state (columns ``word, count, txid, prev_count``) in the run's database."""

from __future__ import annotations

from airflow_trident.examples.topologies import UnreadableAwareSpout
from airflow_trident.operation import Count, Split
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology
from tests.runtime.test_opaque_replay import DATA, TAKE

NAME = "table_state_words"
TABLE = "table_state_word_counts"


def words() -> TridentTopology:
    """sentences -> split -> group by word -> opaque count in a ``word, count`` table."""
    topology = TridentTopology(NAME)
    factory = sql_state(
        None, TABLE, "opaque", key_fields=("word",), value_fields=("count",), value_type="bigint"
    )
    (
        topology.new_stream("sentences", UnreadableAwareSpout(DATA, ["sentence"], TAKE))
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(factory, Count(), ["count"], name="counts")
    )
    return topology
