"""A topology grouping by a key field that is sometimes ``None`` (issue 32, item 5), loaded by
reference (``tests.runtime.null_key_topologies:words``) as Spark executors do: counts in
transactional SQL state (the database's own combine) and opaque SQL state (JSON values), and
the counts' new values upserted into Iceberg and Delta tables on the key. The SQL states and
the Iceberg catalog are the run's state database; the Delta table is under :data:`ROOT`."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from airflow_trident.operation import Count
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.delta import DeltaWriter, delta_state
from airflow_trident.state.iceberg import IcebergWriter, iceberg_state
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology

NAME = "null_key_words"
COUNTS, OPAQUE = "null_key_counts", "null_key_opaque"
ROOT = Path(tempfile.gettempdir()) / "trident-null-keys"
TABLE = "trident_tests.null_key_totals"
ICEBERG = iceberg_state(TABLE, f"{NAME}.iceberg", warehouse=f"file://{ROOT}/warehouse",
                        merge_keys=("word",))  # fmt: skip
TAKE = 2
WORDS: dict[str, list[tuple[Any, ...]]] = {
    "p0": [("a",), (None,), ("",), (None,), ("a",), ("b",)],
    "p1": [(None,), ("b",), ("",), ("c",), (None,), (None,)],
}
"""``None`` beside ``''`` (the placeholder a None key could be mistaken for); 3 batches."""
BATCHES = 3


def words() -> TridentTopology:
    """word -> counts (transactional, bigint) and opaque counts (JSON); counts' new values
    upserted into Iceberg and Delta on ``word``."""
    topology = TridentTopology(NAME)
    grouped = topology.new_stream(
        "words", MemoryTransactionalSpout(WORDS, ["word"], take_per_batch=TAKE)
    ).group_by(["word"])
    counts = grouped.persistent_aggregate(
        sql_state(None, COUNTS, "transactional", key_fields=("word",), value_type="bigint"),
        Count(),
        ["count"],
        name="counts",
    )
    grouped.persistent_aggregate(
        sql_state(None, OPAQUE, "opaque", key_fields=("word",)), Count(), ["count"],
        name="opaque_counts",
    )  # fmt: skip
    new = counts.new_values_stream()
    new.partition_persist(ICEBERG, ["word", "count"], IcebergWriter(), name="iceberg_totals")
    new.partition_persist(
        delta_state(str(ROOT / "delta"), f"{NAME}.delta", merge_keys=("word",)),
        ["word", "count"],
        DeltaWriter(),
        name="delta_totals",
    )
    return topology


def expected(batches: int) -> Counter[Any]:
    """word -> its count after ``batches`` batches."""
    return Counter(w for rows in WORDS.values() for (w,) in rows[: batches * TAKE])
