"""A topology whose Spark commit fails once part-way, for the cleared-commit tests.

:func:`commit_fault_word_count` is :func:`~tests.harness.topologies.e2e_word_count`'s
word count (same data, same name from ``TRIDENT_TEST_TOPOLOGY``, transactional SQL state in the
run's database) whose state partition 1 cannot be made once while
:func:`commit_fault_marker` exists: the commit's Spark task of that partition fails (and removes
the file), the tasks of the other partitions may already have applied theirs, so the txid stays
uncommitted; the commit's retry (or a clear) must apply each partition exactly once.

The marker's path derives from the topology name only, so the Spark executors that apply the
partitions (in a Spark Connect server's own environment) find the same file.

>>> commit_fault_marker("wc").name
'wc-fail-commit-partition-1'
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from airflow_trident.errors import StateStoreUnavailableError
from airflow_trident.operation import Count, Split
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.testing.faults import FailOnce
from airflow_trident.topology import TridentTopology
from tests.harness.topologies import E2E_DATA

__all__ = ["FailOncePartition1", "commit_fault_marker", "commit_fault_word_count"]


def commit_fault_marker(name: str) -> Path:
    """While this file exists, making partition 1 of ``name``'s state fails once."""
    return Path(tempfile.gettempdir()) / f"{name}-fail-commit-partition-1"


class FailOncePartition1:
    """A state factory whose partition 1 fails once while ``marker`` exists (then removes it)."""

    def __init__(self, inner: Any, marker: str) -> None:
        self.inner = inner
        self.marker = marker

    def make_state(self, partition_index: int = 0, num_partitions: int = 1) -> Any:
        """The inner factory's state, except once for partition 1 while the marker exists."""
        if partition_index == 1 and os.path.exists(self.marker):
            os.unlink(self.marker)
            msg = f"injected: the state database of partition 1 is unreachable ({self.marker})"
            raise StateStoreUnavailableError(msg)
        return self.inner.make_state(partition_index, num_partitions)

    def located_at(self, url: str) -> FailOncePartition1:
        """Still this wrapper, over the inner factory in the run's database."""
        return FailOncePartition1(self.inner.located_at(url), self.marker)

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "marker"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def commit_fault_word_count() -> TridentTopology:
    """Sentences -> split -> count per word in transactional SQL state (partition 1's commit
    fails once while :func:`commit_fault_marker` exists; the processing fails once with
    ``TRIDENT_FAIL_ONCE_MARKER``, as :func:`~tests.harness.topologies.e2e_word_count`'s)."""
    name = os.environ.get("TRIDENT_TEST_TOPOLOGY", "commit_fault_word_count")
    topology = TridentTopology(name)
    factory = sql_state(None, name, "transactional", key_fields=("word",), value_type="bigint")
    words = topology.new_stream(
        "sentences", MemoryTransactionalSpout(E2E_DATA, ["sentence"], take_per_batch=2)
    ).each(["sentence"], Split(), ["word"])
    marker = os.environ.get("TRIDENT_FAIL_ONCE_MARKER", "")
    if marker:  # the processing fails once too, as e2e_word_count's does
        words = words.each(["word"], FailOnce(marker), ["checked"]).project(["word"])
    (
        words.group_by(["word"]).persistent_aggregate(
            FailOncePartition1(factory, str(commit_fault_marker(name))),
            Count(),
            ["count"],
            name="counts",
        )
    )
    return topology
