"""Topologies and fault wrappers for the Iceberg sink's tests.

:func:`iceberg_words` is loaded by reference (Spark executors commit it with
``commit_mode="spark"``), so it is configured by nothing but the run: its catalog is the run's
state database (the :class:`~airflow_trident.state.binding.StateBinding` each task carries), a
SQLite file whose directory also holds the warehouse. :class:`FailOnce` makes a sink's next
commit die before or after its Iceberg commit, in the process that runs it.
"""

from __future__ import annotations

from typing import Any

from airflow_trident.errors import StateStoreUnavailableError
from airflow_trident.operation import Split
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.iceberg import IcebergWriter, iceberg_state
from airflow_trident.topology import TridentTopology

__all__ = [
    "SENTENCES",
    "TABLE",
    "FailOnce",
    "expected_words",
    "iceberg_words",
    "table_rows",
    "words_topology",
]

TABLE = "trident_tests.words"
SENTENCES = {f"p{p}": [(f"w{p}{i} x{i % 3} y",) for i in range(12)] for p in range(3)}
"""3 source partitions of 12 sentences; 2 per partition and batch: 6 batches."""


class _FailingState:
    def __init__(self, inner: Any, owner: FailOnce) -> None:
        self.inner = inner
        self.owner = owner

    def begin_commit(self, txid: int) -> None:
        self.inner.begin_commit(txid)

    def commit(self, txid: int) -> None:
        if self.owner.armed("before"):
            self.inner.rollback()
            msg = f"injected: the commit of txid {txid} died before its Iceberg commit"
            raise StateStoreUnavailableError(msg)
        self.inner.commit(txid)
        if self.owner.armed("after"):
            msg = f"injected: the commit of txid {txid} died after its Iceberg commit"
            raise StateStoreUnavailableError(msg)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class FailOnce:
    """A state factory whose next commit dies once ``when`` (``"before"`` or ``"after"``) its
    inner commit, after :meth:`arm`."""

    state_type = None

    def __init__(self, inner: Any, switch: list[str | None] | None = None) -> None:
        self.inner = inner
        self.state_type = inner.state_type
        self._switch: list[str | None] = [None] if switch is None else switch  # shared with copies

    def arm(self, when: str) -> None:
        self._switch[0] = when

    def armed(self, when: str) -> bool:
        if self._switch[0] != when:
            return False
        self._switch[0] = None
        return True

    def located_at(self, url: str) -> FailOnce:
        return FailOnce(self.inner.located_at(url), self._switch)

    def make_state(self, partition_index: int = 0, num_partitions: int = 1) -> Any:
        return _FailingState(self.inner.make_state(partition_index, num_partitions), self)


def words_topology(name: str, factory: Any) -> TridentTopology:
    """Sentences -> split -> every word appended (with its sentence's partition) by ``factory``."""
    topology = TridentTopology(name)
    (
        topology.new_stream(
            "sentences", MemoryTransactionalSpout(SENTENCES, ["sentence"], take_per_batch=2)
        )
        .each(["sentence"], Split(), ["word"])
        .partition_persist(factory, ["word"], IcebergWriter(), name="events")
    )
    return topology


def iceberg_words() -> TridentTopology:
    """Every word appended to :data:`TABLE` in the run's state database's catalog."""
    return words_topology("iceberg_words", iceberg_state(TABLE, "iceberg_words.events"))


def expected_words(batches: int) -> dict[str, int]:
    """word -> count in the first ``batches`` batches."""
    counts: dict[str, int] = {}
    for rows in SENTENCES.values():
        for (sentence,) in rows[: 2 * batches]:
            for w in sentence.split():
                counts[w] = counts.get(w, 0) + 1
    return counts


def table_rows(factory: Any) -> list[dict[str, Any]]:
    """Every row of the factory's table, read back with pyiceberg."""
    table = factory.load_table()
    return [] if table is None else table.scan().to_arrow().to_pylist()
