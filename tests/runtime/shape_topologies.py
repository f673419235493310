"""Topologies for the tests of a txid's shape on replay (issue 32, items 1 and 2), loaded by
reference (``tests.runtime.shape_topologies:iceberg_2``) as Spark executors do.

Words partitioned by word into 2 or 3 commit partitions (the same topology name and sink, so a
replay of a txid can come with another parallelism) and appended into an Iceberg table whose
catalog is the run's state database, or into a Delta table beside the run's SQLite database.
While :data:`FAIL_MARKER` exists, the next partition commit of the sink dies right after its
table commit (in whichever process applies it, and removes the marker): a txid half committed.
"""

from __future__ import annotations

import os.path
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from airflow_trident.errors import StateStoreUnavailableError
from airflow_trident.operation import Split
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.base import StateType
from airflow_trident.state.delta import DeltaWriter, delta_state
from airflow_trident.state.iceberg import IcebergWriter, iceberg_state
from airflow_trident.topology import TridentTopology

NAME = "shape_words"
TABLE = "trident_tests.shape_words"
APP = f"{NAME}.events"
WAREHOUSE = f"file://{tempfile.gettempdir()}/trident-shape-warehouse"
FAIL_MARKER = Path(tempfile.gettempdir()) / "trident-shape-fail-after-commit"
TAKE = 2
SENTENCES = {
    f"p{p}": [(f"w{(3 * p + i) % 7} v{i % 4} u{p}{i}",) for i in range(5 * TAKE)] for p in range(3)
}
"""3 source partitions of 10 sentences, 2 per partition and batch: 5 batches."""


class _DiesAfterCommit:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def begin_commit(self, txid: int) -> None:
        self.inner.begin_commit(txid)

    def commit(self, txid: int) -> None:
        self.inner.commit(txid)
        try:
            FAIL_MARKER.unlink()
        except FileNotFoundError:
            return
        msg = f"injected: the commit of txid {txid} died after its table commit"
        raise StateStoreUnavailableError(msg)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class DiesAfterCommit:
    """A state factory over ``inner`` whose partition commits die after their table commit
    while :data:`FAIL_MARKER` exists (once: the first one removes it)."""

    state_type = StateType.TRANSACTIONAL

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def located_at(self, url: str) -> DiesAfterCommit:
        locate = getattr(self.inner, "located_at", None)
        return self if locate is None else DiesAfterCommit(locate(url))

    def make_state(self, partition_index: int = 0, num_partitions: int = 1) -> Any:
        return _DiesAfterCommit(self.inner.make_state(partition_index, num_partitions))


class DeltaBesideState:
    """``delta_state`` at ``delta_shape_words`` beside the run's SQLite state database."""

    state_type = StateType.TRANSACTIONAL

    def __init__(self, path: str | None = None) -> None:
        self.inner = delta_state(path or os.path.join(tempfile.gettempdir(), "shape"), APP)

    def located_at(self, url: str) -> DeltaBesideState:
        assert url.startswith("sqlite:///"), url
        directory = os.path.dirname(url[len("sqlite:///") :])
        return DeltaBesideState(os.path.join(directory, "delta_shape_words"))

    def make_state(self, partition_index: int = 0, num_partitions: int = 1) -> Any:
        return self.inner.make_state(partition_index, num_partitions)


def iceberg_sink() -> Any:
    """The Iceberg sink (its catalog: the run's state database)."""
    return DiesAfterCommit(iceberg_state(TABLE, APP, warehouse=WAREHOUSE))


def words(sink: Any, hint: int, writer: Any) -> TridentTopology:
    """Sentences -> words -> ``partition_by(word)`` in ``hint`` partitions -> ``sink``."""
    topology = TridentTopology(NAME)
    (
        topology.new_stream(
            "sentences", MemoryTransactionalSpout(SENTENCES, ["sentence"], take_per_batch=TAKE)
        )
        .each(["sentence"], Split(), ["word"])
        .partition_by(["word"])
        .parallelism_hint(hint)
        .partition_persist(sink, ["word"], writer, name="events")
    )
    return topology


def iceberg_2() -> TridentTopology:
    return words(iceberg_sink(), 2, IcebergWriter())


def iceberg_3() -> TridentTopology:
    return words(iceberg_sink(), 3, IcebergWriter())


def delta_2() -> TridentTopology:
    return words(DiesAfterCommit(DeltaBesideState()), 2, DeltaWriter())


def delta_3() -> TridentTopology:
    return words(DiesAfterCommit(DeltaBesideState()), 3, DeltaWriter())


def expected_words(batches: int) -> Counter[str]:
    """Every word of the first ``batches`` batches, as often as it came."""
    return Counter(
        w for rows in SENTENCES.values() for (s,) in rows[: batches * TAKE] for w in s.split()
    )
