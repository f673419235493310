"""The seeds' topologies, ready to run as Airflow DAGs, on Spark or in-process.

* :data:`word_count` — seed 001: sentences -> split -> group by word -> persistent count
  (transactional), and the DRPC stream ``words`` summing the counts of the words asked for.
* :data:`global_count` — seed 000's ``TransactionalGlobalCount``: one count of every tuple.
* :data:`opaque_count` — seed 002: an opaque partitioned spout whose partitions may be unreadable
  (``TRIDENT_UNREADABLE_PARTITIONS=p1,p2``) and opaque state: counts stay exact.
* :data:`user_scores` — seed 003: ``partition_by(user)`` -> ``partition_aggregate`` ->
  ``parallelism_hint(3)`` -> ``global_()`` -> ``aggregate`` (a combiner), persisted.

State lives in the run's state database: the DAG's ``state_conn_id`` connection (or the
``--state-conn-id`` of a CLI command); used standalone, ``TRIDENT_STATE_URL``, else SQLite in
``~/.airflow_trident/state.db``. Building these topologies does no I/O.

>>> [n.kind for n in word_count.nodes.values()][:3]
['spout', 'each', 'persist']
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from typing import Any

from airflow_trident.operation import (
    Aggregator,
    Count,
    FilterNull,
    MapGet,
    Split,
    Sum,
)
from airflow_trident.spout.memory import MemoryOpaqueSpout, MemoryTransactionalSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.state.sql.factory import default_state_url
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentCollector, TridentTuple

__all__ = ["global_count", "opaque_count", "state_url", "user_scores", "word_count"]

SEED_SENTENCES = (
    "the cow jumped over the moon",
    "the man went to the store and bought some candy",
    "four score and seven years ago",
    "how many apples can you eat",
    "to be or not to be the person",
)


def state_url() -> str:
    """The default state database: ``TRIDENT_STATE_URL`` or SQLite under ``~/.airflow_trident``
    (:func:`~airflow_trident.state.sql.factory.default_state_url`)."""
    return default_state_url()


def _sentences(partition: int, n: int) -> list[tuple[str]]:
    rng = random.Random(1000 + partition)
    return [(rng.choice(SEED_SENTENCES),) for _ in range(n)]


def _build_word_count() -> TridentTopology:
    topology = TridentTopology("word_count")
    spout = MemoryTransactionalSpout(
        {f"p{i}": _sentences(i, 500) for i in range(2)}, ["sentence"], take_per_batch=5
    )
    counts = (
        topology.new_stream("sentences", spout)
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(
            _state("word_counts", "transactional", ("word",)),
            Count(),
            ["count"],
            name="word_counts",
        )
    )
    (
        topology.new_drpc_stream("words")
        .each(["args"], Split(), ["word"])
        .group_by(["word"])
        .state_query(counts, ["word"], MapGet(), ["count"])
        .each(["count"], FilterNull())
        .aggregate(["count"], Sum(), ["sum"])
    )
    return topology


def _build_global_count() -> TridentTopology:
    topology = TridentTopology("global_count")
    words = [(w,) for s in SEED_SENTENCES for w in s.split()]
    spout = MemoryTransactionalSpout(
        {"p0": words * 20, "p1": words[::-1] * 20}, ["word"], take_per_batch=3
    )
    topology.new_stream("words", spout).persistent_aggregate(
        _state("global_count", "transactional", ("key",)), Count(), ["count"], name="global_count"
    )
    return topology


class UnreadableAwareSpout(MemoryOpaqueSpout):
    """A :class:`MemoryOpaqueSpout` whose unreadable partitions come from the environment
    (``TRIDENT_UNREADABLE_PARTITIONS``), so a demo can break a partition between attempts."""

    def emit_partition_batch(
        self, attempt: Any, collector: Any, partition: str, last_partition_meta: Any
    ) -> Any:
        broken = os.environ.get("TRIDENT_UNREADABLE_PARTITIONS", "")
        self.set_unreadable(*[p for p in broken.split(",") if p])
        return super().emit_partition_batch(attempt, collector, partition, last_partition_meta)


def _build_opaque_count() -> TridentTopology:
    topology = TridentTopology("opaque_count")
    spout = UnreadableAwareSpout(
        {f"p{i}": _sentences(10 + i, 300) for i in range(3)}, ["sentence"], take_per_batch=4
    )
    (
        topology.new_stream("sentences", spout)
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(
            _state("opaque_counts", "opaque", ("word",)), Count(), ["count"], name="opaque_counts"
        )
    )
    return topology


class UserTotals(Aggregator[dict[str, int]]):
    """Per partition: each user's total score in this batch (seed 003's partition aggregator)."""

    def init(self, batch_id: int, collector: TridentCollector) -> dict[str, int]:
        return {}

    def aggregate(
        self, state: dict[str, int], tuple_: TridentTuple, collector: TridentCollector
    ) -> dict[str, int]:
        state[tuple_[0]] = state.get(tuple_[0], 0) + tuple_[1]
        return state

    def complete(self, state: dict[str, int], collector: TridentCollector) -> None:
        for user, total in sorted(state.items()):
            collector.emit((user, total))


def _plays(n: int) -> list[tuple[str, int]]:
    rng = random.Random(7)
    users = ["nickt1", "nickt2", "nickt3", "ann", "bob"]
    return [(rng.choice(users), rng.randint(1, 10)) for _ in range(n)]


def _build_user_scores() -> TridentTopology:
    topology = TridentTopology("user_scores")
    plays = _plays(2000)
    spout = MemoryTransactionalSpout(
        {"p0": plays[::2], "p1": plays[1::2]}, ["user", "score"], take_per_batch=10
    )
    per_user = (
        topology.new_stream("plays", spout)
        .partition_by(["user"])
        .partition_aggregate(["user", "score"], UserTotals(), ["user", "total"])
        .parallelism_hint(3)
    )
    per_user.group_by(["user"]).persistent_aggregate(
        _state("user_totals", "transactional", ("user",)),
        ["total"],
        Sum(),
        ["score"],
        name="user_totals",
    )
    (
        per_user.global_()
        .aggregate(["total"], Sum(), ["batch_total"])
        .persistent_aggregate(
            _state("all_scores", "transactional", ("key",)),
            ["batch_total"],
            Sum(),
            ["total"],
            name="all_scores",
        )
    )
    return topology


def _state(table: str, state_type: str, keys: Sequence[str]) -> Any:
    """A SQL state in the run's state database (the DAG's ``state_conn_id``; standalone:
    ``TRIDENT_STATE_URL``, else SQLite under ``~/.airflow_trident``)."""
    return sql_state(None, table, state_type, key_fields=tuple(keys), value_type="bigint")


word_count = _build_word_count()
global_count = _build_global_count()
opaque_count = _build_opaque_count()
user_scores = _build_user_scores()
