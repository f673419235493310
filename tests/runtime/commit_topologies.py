"""Topologies the Spark-commit tests load by reference (``tests.runtime.commit_topologies:...``),
as Spark executors do. Their states name no database (``sql_state(None, ...)``): the tests give
the run's database (PostgreSQL) as the ``BatchSteps``' state binding, which travels to the
executors inside the Spark tasks."""

from __future__ import annotations

import random
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from airflow_trident.errors import StateStoreUnavailableError
from airflow_trident.operation import Consumer, Count, Split
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentTuple

NAME = "spark_commit_words"
TABLE = "spark_commit_counts"
TAKE = 40
WORDS = [f"w{i}" for i in range(300)]
DATA = {
    f"p{p}": [(" ".join(random.Random(p * 1000 + i).choices(WORDS, k=8)),) for i in range(TAKE * 4)]
    for p in range(3)
}
FAIL_MARKER = Path(tempfile.gettempdir()) / f"{NAME}-fail-partition-1"
"""While this file exists, making the state of partition 1 fails once (and removes it), after
every other partition has committed (:data:`COMMITTED_DIR`)."""
COMMITTED_DIR = Path(tempfile.gettempdir()) / f"{NAME}-committed"
"""A file per partition whose state committed: the failure of partition 1 waits for the others,
so that it fails a job whose other partitions are in (not one that Spark's scheduling or a
loaded machine happened to leave half-run, with tasks still writing into the next test)."""
OTHERS_WAIT_S = 120.0


def expected_counts(batches: int) -> Counter[str]:
    """The counts after ``batches`` batches."""
    return Counter(
        w for rows in DATA.values() for (s,) in rows[: batches * TAKE] for w in s.split()
    )


class FailOnceOnPartition1:
    """A state factory whose partition 1 fails once while :data:`FAIL_MARKER` exists."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def make_state(self, partition_index: int = 0, num_partitions: int = 1) -> Any:
        if partition_index == 1 and FAIL_MARKER.exists():
            others = {f"p{i}" for i in range(num_partitions) if i != 1}
            deadline = time.monotonic() + OTHERS_WAIT_S
            while time.monotonic() < deadline and not others <= _committed():
                time.sleep(0.05)
            FAIL_MARKER.unlink()
            msg = "injected: the state database of partition 1 is unreachable"
            raise StateStoreUnavailableError(msg)
        return _MarksItsCommit(self.inner.make_state(partition_index, num_partitions),
                               partition_index)  # fmt: skip

    def located_at(self, url: str) -> FailOnceOnPartition1:
        """Still this wrapper, over the inner factory in the run's database."""
        return FailOnceOnPartition1(self.inner.located_at(url))

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def _committed() -> set[str]:
    return {p.name for p in COMMITTED_DIR.iterdir()} if COMMITTED_DIR.is_dir() else set()


def clear_committed_marks() -> None:
    """Forget which partitions committed (before a test arms :data:`FAIL_MARKER`)."""
    for mark in COMMITTED_DIR.glob("p*"):
        mark.unlink(missing_ok=True)


class _MarksItsCommit:
    """A partition's state that leaves a file in :data:`COMMITTED_DIR` once it committed."""

    def __init__(self, inner: Any, index: int) -> None:
        self.inner = inner
        self.index = index

    def commit(self, txid: int) -> None:
        self.inner.commit(txid)
        COMMITTED_DIR.mkdir(exist_ok=True)
        (COMMITTED_DIR / f"p{self.index}").touch()

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class Seen(Consumer):
    """Collects the new values the commit phase sees (on the driver)."""

    rows: list[tuple[Any, ...]] = []  # noqa: RUF012 - shared on purpose

    def accept(self, tuple_: TridentTuple) -> None:
        Seen.rows.append(tuple(tuple_))


def words() -> TridentTopology:
    """sentences -> split -> group by word -> opaque count in PostgreSQL; new values peeked."""
    topology = TridentTopology(NAME)
    factory = sql_state(None, TABLE, "opaque", key_fields=("word",), value_type="bigint")
    counts = (
        topology.new_stream("sentences", MemoryTransactionalSpout(DATA, ["sentence"], TAKE))
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(FailOnceOnPartition1(factory), Count(), ["count"], name="counts")
    )
    counts.new_values_stream().peek(Seen())
    return topology


OPAQUE_NAME = "spark_commit_opaque"
OPAQUE_TABLE = "spark_commit_opaque_counts"


def opaque_words() -> TridentTopology:
    """An opaque spout whose partitions ``TRIDENT_UNREADABLE_PARTITIONS`` names emit nothing
    (read on the driver, at emit time), counted into opaque PostgreSQL state."""
    from airflow_trident.examples.topologies import UnreadableAwareSpout

    topology = TridentTopology(OPAQUE_NAME)
    factory = sql_state(
        None,
        OPAQUE_TABLE,
        "opaque",
        key_fields=("word",),
        value_type="bigint",
    )
    (
        topology.new_stream("sentences", UnreadableAwareSpout(DATA, ["sentence"], TAKE))
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(factory, Count(), ["count"], name="counts")
    )
    return topology


SCHEMA_NAME = "spark_commit_schema_words"
SCHEMA = "trident_spark_schema"
"""The PostgreSQL schema of :func:`words_in_schema`'s state (created by its first commit)."""


def words_in_schema() -> TridentTopology:
    """sentences -> split -> group by word -> opaque count in ``trident_spark_schema.counts``."""
    topology = TridentTopology(SCHEMA_NAME)
    factory = sql_state(None, f"{SCHEMA}.counts", "opaque", key_fields=("word",),
                        value_type="bigint")  # fmt: skip
    (
        topology.new_stream("sentences", MemoryTransactionalSpout(DATA, ["sentence"], TAKE))
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(factory, Count(), ["count"], name="counts")
    )
    return topology
