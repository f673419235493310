"""Topologies for end-to-end tests, configured from the environment so that a test can give
each run its own name, state and fault (they are shipped by reference to spark-submit).

* ``TRIDENT_TEST_TOPOLOGY``: the topology name (default ``e2e_word_count``);
* the state database is the run's (the DAG's ``state_conn_id``), else ``TRIDENT_STATE_URL``;
* ``TRIDENT_FAIL_ONCE_MARKER``: a path; when set, the first processing attempt that finds no
  file there fails (after creating it), so its retry succeeds;
* ``TRIDENT_POISON_WORD``: a word on which a filter (step ``RejectWord``) raises, every time.

:func:`scheduler_word_count` (the real-scheduler fault run's) also reads
:data:`SCHEDULER_DATA_ENV` (its generated data) and :data:`POISON_ENV` (txids whose emit fails).
"""

from __future__ import annotations

import functools
import json
import os
import random
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.examples.topologies import SEED_SENTENCES
from airflow_trident.operation import Count, Filter, Function, MapGet, Split, Sum
from airflow_trident.spout.base import Collector
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.delta import DeltaWriter, delta_state
from airflow_trident.state.sql import sql_state
from airflow_trident.testing.fault_topology import SourceData
from airflow_trident.testing.faults import FailOnce
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentCollector, TridentTuple

__all__ = [
    "BENCH_DELTA_ENV",
    "BENCH_ICEBERG_ENV",
    "BENCH_TABLE",
    "E2E_DATA",
    "INLINED_ENV",
    "e2e_expected_counts",
    "POISON_ENV",
    "POISON_WORD_ENV",
    "SCHEDULER_DATA_ENV",
    "PoisonableSpout",
    "RejectWord",
    "SchedulerData",
    "bench_counts",
    "bench_delta_events",
    "bench_iceberg_events",
    "e2e_word_count",
    "scheduler_word_count",
]

E2E_DATA = {
    "p0": [(s,) for s in SEED_SENTENCES * 4],
    "p1": [(s,) for s in reversed(SEED_SENTENCES * 4)],
}


def e2e_expected_counts(batches: int) -> Counter[str]:
    """Each word's count after the first ``batches`` batches of :func:`e2e_word_count` (two
    sentences per partition each), counted directly from :data:`E2E_DATA`.

    >>> e2e_expected_counts(0)
    Counter()
    >>> sum(e2e_expected_counts(1).values()) == sum(
    ...     len(s.split()) for rows in E2E_DATA.values() for (s,) in rows[:2])
    True
    """
    total: Counter[str] = Counter()
    for rows in E2E_DATA.values():
        for (sentence,) in rows[: 2 * batches]:
            total.update(sentence.split())
    return total


POISON_WORD_ENV = "TRIDENT_POISON_WORD"
INLINED_ENV = "TRIDENT_E2E_INLINED"


class Normalise(Function):
    """The word without surrounding blanks (a split word has none: counts do not change);
    its ``execute`` is of the form Spark's workers inline (``operation/inline.py``)."""

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        word = tuple_.get("word")
        collector.emit((word.strip(),))


_TOLD: set[tuple[str, str]] = set()  # (marker file, caller) this process wrote down


class NonEmpty(Filter):
    """Keeps non-empty words (every split word): an ``is_keep`` that inlines. Each process
    appends, once per caller and file, the name of the code that called it to ``marker``
    (``is_keep_inlined`` or ``<listcomp>`` where Spark's workers inlined it; per process, not
    per instance: the driver pickles the step after its type sample called it)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def is_keep(self, tuple_: TridentTuple) -> bool:
        return len(tuple_[0]) > 0 and self.tell()

    def tell(self) -> bool:
        caller = sys._getframe(1).f_code.co_name
        if (self.marker, caller) not in _TOLD:  # a reused worker writes to each test's file
            _TOLD.add((self.marker, caller))
            with open(self.marker, "a", encoding="utf-8") as out:
                out.write(f"{caller}\n")
        return True


class RejectWord(Filter):
    """A filter that raises on one word (``TRIDENT_POISON_WORD`` in :func:`e2e_word_count`):
    the processing job fails on that record, every time."""

    def __init__(self, word: str) -> None:
        self.word = word

    def is_keep(self, tuple_: TridentTuple) -> bool:
        if tuple_[0] == self.word:
            msg = f"the word {self.word!r} is not allowed"
            raise ValueError(msg)
        return True


def e2e_word_count() -> TridentTopology:
    """Sentences -> split -> (fail once) -> (``TRIDENT_E2E_INLINED``: a function and a filter
    that Spark inlines, the filter telling its caller in that file) -> count per word, in
    transactional SQL state."""
    name = os.environ.get("TRIDENT_TEST_TOPOLOGY", "e2e_word_count")
    topology = TridentTopology(name)
    words = topology.new_stream(
        "sentences", MemoryTransactionalSpout(E2E_DATA, ["sentence"], take_per_batch=2)
    ).each(["sentence"], Split(), ["word"])
    marker = os.environ.get("TRIDENT_FAIL_ONCE_MARKER", "")
    if marker:
        words = words.each(["word"], FailOnce(marker), ["checked"]).project(["word"])
    inlined_marker = os.environ.get(INLINED_ENV, "")
    if inlined_marker:
        words = (
            words.each(["word"], Normalise(), ["normal"])
            .filter(["normal"], NonEmpty(inlined_marker))
            .project(["word"])
        )
    poison = os.environ.get(POISON_WORD_ENV, "")
    if poison:
        words = words.each(["word"], RejectWord(poison))
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


BENCH_DELTA_ENV = "TRIDENT_BENCH_DELTA_PATH"
"""The Delta table of :func:`bench_delta_events` (read when the topology is built)."""


def bench_delta_events() -> TridentTopology:
    """Rows ``(key, user, n)`` appended by :class:`DeltaWriter` to the Delta table at
    ``$TRIDENT_BENCH_DELTA_PATH`` (``bench/lakehouse_commit.py`` stages its batches directly;
    the spout is never read)."""
    topology = TridentTopology("bench_lakehouse_commit")
    fields = ["key", "user", "n"]
    topology.new_stream(
        "rows", MemoryTransactionalSpout({"p0": []}, fields, take_per_batch=1)
    ).partition_persist(
        delta_state(os.environ[BENCH_DELTA_ENV], "bench_lakehouse_commit.events"),
        fields,
        DeltaWriter(),
        name="events",
    )
    return topology


BENCH_ICEBERG_ENV = "TRIDENT_BENCH_ICEBERG_TABLE"
"""The Iceberg table (``namespace.name``) of :func:`bench_iceberg_events`, in the catalog of
``$TRIDENT_STATE_URL`` (a SQLite file: the warehouse beside it)."""


def bench_iceberg_events() -> TridentTopology:
    """Rows ``(key, user, n)`` appended by :class:`IcebergWriter` to the Iceberg table
    ``$TRIDENT_BENCH_ICEBERG_TABLE`` (``bench/lakehouse_commit.py --format iceberg``)."""
    from airflow_trident.state.iceberg import IcebergWriter, iceberg_state

    topology = TridentTopology("bench_lakehouse_commit")
    fields = ["key", "user", "n"]
    topology.new_stream(
        "rows", MemoryTransactionalSpout({"p0": []}, fields, take_per_batch=1)
    ).partition_persist(
        iceberg_state(os.environ[BENCH_ICEBERG_ENV], "bench_lakehouse_commit.events"),
        fields,
        IcebergWriter(),
        name="events",
    )
    return topology


# -- the real-scheduler fault run (tests.harness.scheduler_faults) ---------------------

SCHEDULER_DATA_ENV = "TRIDENT_SCHEDULER_DATA"
"""JSON of :class:`SchedulerData` (the fault run's source data, generated from a seed)."""

POISON_ENV = "TRIDENT_POISON_FILE"
"""A path; while the file holds txid ``N`` (one per line), every emit of txid ``N`` fails."""


@dataclass(frozen=True)
class SchedulerData:
    """The source data of :func:`scheduler_word_count`: lines ``(text, amount)`` per partition,
    generated from ``seed`` (:meth:`SourceData.generate
    <airflow_trident.testing.fault_topology.SourceData.generate>`), ``take`` lines per batch and
    partition, enough for ``batches`` batches.

    >>> spec = SchedulerData(seed=3, batches=4, partitions=2, take=2, vocabulary=50)
    >>> SchedulerData.from_json(spec.to_json()) == spec
    True
    >>> ends = spec.ends(3)
    >>> ends, len(spec.source().partitions["p00"])
    ({'p00': 6, 'p01': 6}, 8)
    """

    seed: int
    batches: int
    partitions: int = 3
    take: int = 8
    vocabulary: int = 4000

    def to_json(self) -> str:
        """The environment form (:data:`SCHEDULER_DATA_ENV`)."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SchedulerData:
        """Parse :meth:`to_json`'s form."""
        return cls(**json.loads(text))

    def source(self) -> SourceData:
        """The lines (deterministic: every process that loads the topology gets the same)."""
        return _scheduler_source(self)

    def ends(self, txids: int) -> dict[str, int]:
        """Lines of each partition that txids ``1..txids`` read."""
        rows = self.batches * self.take
        return {p: min(rows, txids * self.take) for p in self.source().partitions}


@functools.lru_cache(maxsize=4)
def _scheduler_source(spec: SchedulerData) -> SourceData:
    return SourceData.generate(
        random.Random(spec.seed),
        partitions=spec.partitions,
        rows_per_partition=spec.batches * spec.take,
        vocabulary=spec.vocabulary,
        words_per_line=(3, 14),
    )


class PoisonableSpout(MemoryTransactionalSpout):
    """A :class:`MemoryTransactionalSpout` whose emit of a txid fails while the file named by
    :data:`POISON_ENV` lists that txid: the process step of that one run fails on every try."""

    def emit_partition_batch(
        self, attempt: TransactionAttempt, collector: Collector, partition: str, partition_meta: Any
    ) -> None:
        path = os.environ.get(POISON_ENV, "")
        if path and os.path.exists(path):
            poisoned = {int(line) for line in Path(path).read_text().split() if line.isdigit()}
            if attempt.txid in poisoned:
                msg = (
                    f"injected failure: txid {attempt.txid} is poisoned by {path} (partition "
                    f"{partition}); remove the txid from that file and retry"
                )
                raise RuntimeError(msg)
        super().emit_partition_batch(attempt, collector, partition, partition_meta)


def scheduler_word_count() -> TridentTopology:
    """Lines -> words -> per word: a transactional count (``<name>_counts``) and an opaque sum
    of the lines' amounts (``<name>_sums``), in the run's state database (``sql_state(None,
    ...)``); data from :data:`SCHEDULER_DATA_ENV`, name from ``TRIDENT_TEST_TOPOLOGY``."""
    name = os.environ.get("TRIDENT_TEST_TOPOLOGY", "scheduler_word_count")
    spec = SchedulerData.from_json(
        os.environ.get(SCHEDULER_DATA_ENV) or '{"seed": 0, "batches": 10}'
    )
    data = spec.source()
    topology = TridentTopology(name)
    words = (
        topology.new_stream(
            "lines", PoisonableSpout(data.partitions, ["line", "amount"], spec.take)
        )
        .each(["line"], Split(), ["word"])
        .project(["word", "amount"])
        .parallelism_hint(3)
        .group_by(["word"])
    )
    words.persistent_aggregate(
        sql_state(
            None, f"{name}_counts", "transactional", key_fields=("word",), value_type="bigint"
        ),
        Count(),
        ["count"],
        name="counts",
    )
    words.persistent_aggregate(
        sql_state(None, f"{name}_sums", "opaque", key_fields=("word",), value_type="bigint"),
        ["amount"],
        Sum(),
        ["total"],
        name="sums",
    )
    return topology
