"""A topology for the Spark standalone cluster tests: one executor's Python worker stalls once,
so that a test can kill that executor's Spark worker while the batch's process step runs.

On a cluster, executors load the topology by reference in their own environment (the Spark
worker's, plus ``spark.executorEnv.*``), not in the task's: every setting the topology reads
must reach them through ``spark.executorEnv.X`` (the DAG's ``spark_conf``).

* ``TRIDENT_TEST_TOPOLOGY``: the topology name (default ``cluster_word_count``);
* ``TRIDENT_STALL_ONCE_MARKER``: a path; the first tuple a process sees while no file is there
  creates it (holding the process id), then sleeps (:data:`STALL_S`). Read where the step runs
  (the operations travel pickled from the driver): give it to the executors only
  (``spark.executorEnv.TRIDENT_STALL_ONCE_MARKER``), since the driver runs the steps on a sample
  too, and must not stall.

>>> import tempfile, pathlib, os
>>> marker = pathlib.Path(tempfile.mkdtemp()) / "stalled"
>>> stall = StallOnce(str(marker), stall_s=0.0)
>>> from airflow_trident.tuple import TridentCollector, TridentTuple
>>> c = TridentCollector()
>>> stall.execute(TridentTuple(("w",), ("word",)), c)
>>> c.rows, int(marker.read_text()) == os.getpid()
([('w',)], True)
"""

from __future__ import annotations

import os
import time
from collections import Counter

from airflow_trident.operation import Count, Split
from airflow_trident.operation.base import Function
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentCollector, TridentTuple
from tests.harness.topologies import E2E_DATA

__all__ = ["STALL_MARKER_ENV", "STALL_S", "StallOnce", "cluster_expected", "cluster_word_count"]

STALL_MARKER_ENV = "TRIDENT_STALL_ONCE_MARKER"
STALL_S = 120.0
"""How long the stalled worker sleeps if nobody kills it (then the batch goes on)."""
_CHECKED: set[str] = set()


class StallOnce(Function):
    """Passes its input through; the first tuple seen by any process while no file is at
    ``marker`` creates it (with this process's id) and sleeps ``stall_s`` seconds first.

    ``marker=None``: the path is ``TRIDENT_STALL_ONCE_MARKER`` of the process that runs the step
    (read at its first tuple). An empty path disables it.
    """

    def __init__(self, marker: str | None = None, stall_s: float = STALL_S) -> None:
        self.marker = marker
        self.stall_s = stall_s

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        marker = os.environ.get(STALL_MARKER_ENV, "") if self.marker is None else self.marker
        if marker and marker not in _CHECKED:
            # Per process, not per instance: the driver pickles the step after its sample ran.
            _CHECKED.add(marker)
            self._stall(marker)
        collector.emit(tuple_.values)

    def _stall(self, marker: str) -> None:
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
        time.sleep(self.stall_s)


def cluster_word_count() -> TridentTopology:
    """Sentences -> split -> (stall once) -> count per word, in transactional SQL state (the
    run's state database), on the data of :data:`~tests.harness.topologies.E2E_DATA`
    (two partitions, two sentences each per batch)."""
    name = os.environ.get("TRIDENT_TEST_TOPOLOGY", "cluster_word_count")
    topology = TridentTopology(name)
    (
        topology.new_stream(
            "sentences", MemoryTransactionalSpout(E2E_DATA, ["sentence"], take_per_batch=2)
        )
        .each(["sentence"], Split(), ["word"])
        .each(["word"], StallOnce(), ["checked"])
        .project(["word"])
        .group_by(["word"])
        .persistent_aggregate(
            sql_state(None, name, "transactional", key_fields=("word",), value_type="bigint"),
            Count(),
            ["count"],
            name="counts",
        )
    )
    return topology


def cluster_expected(batches: int) -> Counter[str]:
    """The word counts after ``batches`` batches of :func:`cluster_word_count`, counted
    directly from the data.

    >>> cluster_expected(1) == cluster_expected(0) + cluster_expected(1)
    True
    >>> sum(cluster_expected(2).values()) > sum(cluster_expected(1).values()) > 0
    True
    """
    total: Counter[str] = Counter()
    for rows in E2E_DATA.values():
        for (sentence,) in rows[: 2 * batches]:
            total.update(sentence.split())
    return total
