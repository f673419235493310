"""Topologies for end-to-end tests, configured from the environment so that a test can give
each run its own name, state and fault (they are shipped by reference to spark-submit).

* ``TRIDENT_TEST_TOPOLOGY``: the topology name (default ``e2e_word_count``);
* the state database is the run's (the DAG's ``state_conn_id``), else ``TRIDENT_STATE_URL``;
* ``TRIDENT_FAIL_ONCE_MARKER``: a path; when set, the first processing attempt that finds no
  file there fails (after creating it), so its retry succeeds.
"""

from __future__ import annotations

import os

from airflow_trident.examples.topologies import SEED_SENTENCES
from airflow_trident.operation import Count, MapGet, Split
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.testing.faults import FailOnce
from airflow_trident.topology import TridentTopology

__all__ = ["BENCH_TABLE", "E2E_DATA", "bench_counts", "e2e_word_count"]

E2E_DATA = {
    "p0": [(s,) for s in SEED_SENTENCES * 4],
    "p1": [(s,) for s in reversed(SEED_SENTENCES * 4)],
}


def e2e_word_count() -> TridentTopology:
    """Sentences -> split -> (fail once) -> count per word, in transactional SQL state."""
    name = os.environ.get("TRIDENT_TEST_TOPOLOGY", "e2e_word_count")
    topology = TridentTopology(name)
    words = topology.new_stream(
        "sentences", MemoryTransactionalSpout(E2E_DATA, ["sentence"], take_per_batch=2)
    ).each(["sentence"], Split(), ["word"])
    marker = os.environ.get("TRIDENT_FAIL_ONCE_MARKER", "")
    if marker:
        words = words.each(["word"], FailOnce(marker), ["checked"]).project(["word"])
    counts = words.group_by(["word"]).persistent_aggregate(
        sql_state(None, name, "transactional", key_fields=("word",), value_type="bigint"),
        Count(),
        ["count"],
        name="counts",
    )
    (
        topology.new_drpc_stream("counts")
        .each(["args"], Split(), ["word"])
        .state_query(counts, ["word"], MapGet(), ["count"])
        .project(["word", "count"])
    )
    return topology


BENCH_TABLE = "bench_commit_modes"


def bench_counts() -> TridentTopology:
    """Words counted into opaque state ``bench_commit_modes`` of ``TRIDENT_STATE_URL``
    (``bench/commit_modes.py`` stages its batches directly; the spout is never read)."""
    topology = TridentTopology("bench_commit_modes")
    topology.new_stream(
        "words", MemoryTransactionalSpout({"p0": []}, ["word"], take_per_batch=1)
    ).group_by(["word"]).persistent_aggregate(
        sql_state(None, BENCH_TABLE, "opaque", key_fields=("word",), value_type="bigint"),
        Count(),
        ["count"],
        name="counts",
    )
    return topology
