"""A topology for the Delta sink's end-to-end tests, configured from the environment (it is
shipped by reference to spark-submit):

* ``TRIDENT_TEST_TOPOLOGY``: the topology name (default ``e2e_delta_words``);
* ``TRIDENT_DELTA_PATH``: the Delta table's directory;
* ``TRIDENT_DELTA_FAIL_MARKER``: a path; while a file exists there, the next commit of the
  sink fails right *after* its Delta commit (and removes the file): the case where the table has
  the txid and ZooKeeper's compare-and-set has not happened, so the retry must skip it.

Every word of :data:`~tests.harness.topologies.E2E_DATA` is appended to the table,
one row per word and txid, by :func:`~airflow_trident.state.delta.delta_state`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from airflow_trident.errors import StateStoreUnavailableError
from airflow_trident.operation import Split
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.delta import DeltaWriter, delta_state
from airflow_trident.topology import TridentTopology
from tests.harness.topologies import E2E_DATA

__all__ = ["FailAfterCommitOnce", "e2e_delta_words"]

DELTA_PATH_ENV = "TRIDENT_DELTA_PATH"
DELTA_FAIL_MARKER_ENV = "TRIDENT_DELTA_FAIL_MARKER"


class _FailingState:
    def __init__(self, inner: Any, marker: Path) -> None:
        self.inner = inner
        self.marker = marker

    def begin_commit(self, txid: int) -> None:
        self.inner.begin_commit(txid)

    def commit(self, txid: int) -> None:
        self.inner.commit(txid)
        if self.marker.exists():
            self.marker.unlink()
            msg = f"injected: the commit of txid {txid} died after its Delta commit"
            raise StateStoreUnavailableError(msg)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class FailAfterCommitOnce:
    """A state factory whose states fail once, after their inner commit, while ``marker``
    exists."""

    def __init__(self, inner: Any, marker: str) -> None:
        self.inner = inner
        self.marker = marker

    def make_state(self, partition_index: int = 0, num_partitions: int = 1) -> Any:
        state = self.inner.make_state(partition_index, num_partitions)
        return _FailingState(state, Path(self.marker)) if self.marker else state

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def e2e_delta_words() -> TridentTopology:
    """Sentences -> split -> every word appended to the Delta table at ``TRIDENT_DELTA_PATH``."""
    name = os.environ.get("TRIDENT_TEST_TOPOLOGY", "e2e_delta_words")
    path = os.environ.get(DELTA_PATH_ENV, str(Path.home() / ".airflow_trident" / name))
    topology = TridentTopology(name)
    factory = FailAfterCommitOnce(
        delta_state(path, f"{name}.events"), os.environ.get(DELTA_FAIL_MARKER_ENV, "")
    )
    (
        topology.new_stream(
            "sentences", MemoryTransactionalSpout(E2E_DATA, ["sentence"], take_per_batch=2)
        )
        .each(["sentence"], Split(), ["word"])
        .partition_persist(factory, ["word"], DeltaWriter(), name="events")
    )
    return topology
