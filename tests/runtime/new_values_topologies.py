"""A topology whose states are fed by a state's new values (issue 32, item 3), loaded by
reference (``tests.runtime.new_values_topologies:totals``) as Spark executors do.

Word counts (transactional SQL state) whose new values feed, in the commit phase: the pattern
``docs/sinks/iceberg.md`` recommends (running totals upserted into an Iceberg table with
``merge_keys``), a global count of the keys each batch updated (a ``persistent_aggregate``),
and a ``partition_persist`` into SQL state whose own new values are peeked (a chain). The
states name no database: the run's state database (the test's ``StateBinding``) holds them and
the Iceberg catalog.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Sequence
from typing import Any

from airflow_trident.operation import Consumer, Count, Split, StateUpdater
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.iceberg import IcebergWriter, iceberg_state
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentCollector, TridentTuple
from tests.harness.iceberg_sinks import FailOnce

NAME = "new_values_totals"
COUNTS, UPDATES, LATEST = "nv_counts", "nv_updates", "nv_latest"
TOTALS_TABLE = "trident_tests.nv_totals"
WAREHOUSE = f"file://{tempfile.gettempdir()}/trident-new-values-warehouse"
TAKE = 2
SENTENCES = {
    f"p{p}": [(f"w{(p + i) % 5} w{i % 3} x{p}",) for i in range(3 * TAKE)] for p in range(2)
}
"""2 source partitions of 6 sentences, 2 per partition and batch: 3 batches."""
BATCHES = 3

TOTALS = FailOnce(
    iceberg_state(TOTALS_TABLE, f"{NAME}.totals", warehouse=WAREHOUSE, merge_keys=("word",))
)
"""The Iceberg sink (``TOTALS.arm("after")`` makes its next commit die after its Iceberg
commit, in the process applying the commit phase)."""


class PutLatest(StateUpdater[Any]):
    """Puts each ``(word, count)`` and emits it (its state's new values)."""

    def update_state(
        self, state: Any, tuples: Sequence[TridentTuple], collector: TridentCollector
    ) -> None:
        state.multi_put([(t[0],) for t in tuples], [t[1] for t in tuples])
        for t in tuples:
            collector.emit((t[0], t[1]))


class Seen(Consumer):
    """The new values of ``latest`` the commit phase saw (in the committing process)."""

    rows: list[tuple[Any, ...]] = []  # noqa: RUF012 - shared on purpose

    def accept(self, tuple_: TridentTuple) -> None:
        Seen.rows.append(tuple(tuple_))


def totals() -> TridentTopology:
    """sentences -> words -> counts; the counts' new values -> Iceberg upsert, a global count
    of updated keys, and SQL ``latest`` (whose new values are peeked)."""
    topology = TridentTopology(NAME)
    counts = (
        topology.new_stream(
            "sentences", MemoryTransactionalSpout(SENTENCES, ["sentence"], take_per_batch=TAKE)
        )
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(
            sql_state(None, COUNTS, "transactional", key_fields=("word",), value_type="bigint"),
            Count(),
            ["count"],
            name="counts",
        )
    )
    new = counts.new_values_stream()
    new.partition_persist(TOTALS, ["word", "count"], IcebergWriter(), name="totals")
    new.persistent_aggregate(
        sql_state(None, UPDATES, "transactional", value_type="bigint"),
        Count(),
        ["updates"],
        name="updates",
    )
    latest = new.partition_persist(
        sql_state(None, LATEST, "opaque", key_fields=("word",), value_type="bigint"),
        ["word", "count"],
        PutLatest(),
        ["word", "count"],
        name="latest",
    )
    latest.new_values_stream().peek(Seen())
    return topology


def batch_words(batch: int) -> Counter[str]:
    """The words of batch ``batch`` (1-based)."""
    return Counter(
        w
        for rows in SENTENCES.values()
        for (s,) in rows[(batch - 1) * TAKE : batch * TAKE]
        for w in s.split()
    )


def expected_totals(batches: int) -> dict[str, int]:
    """word -> its count after ``batches`` batches (what ``totals`` and ``latest`` hold)."""
    total: Counter[str] = Counter()
    for b in range(1, batches + 1):
        total.update(batch_words(b))
    return dict(total)


def expected_updates(batches: int) -> int:
    """How many keys the batches updated (one new value per word and batch)."""
    return sum(len(batch_words(b)) for b in range(1, batches + 1))
