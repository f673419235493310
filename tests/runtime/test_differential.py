"""Differential tests: the same topologies, batch after batch, on the local and the Spark
runtime; the states after committing each runtime's staged rows must be equal."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from airflow_trident.operation import Aggregator, CombinerAggregator, Count, Split, Sum
from airflow_trident.runtime.commit import StateCommitter
from airflow_trident.runtime.local import LocalBatchProcessor
from airflow_trident.runtime.result import StagedState
from airflow_trident.runtime.spark import SparkBatchProcessor
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.map.backing import memory_store
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentCollector, TridentTuple

Row = tuple[Any, ...]
Sources = dict[str, dict[str, list[Row]]]
VOCAB = ["the", "cow", "jumped", "over", "moon", "Apple", "apple", "and", "four", "score"]
USERS = ["ann", "bob", "cid", "dan", "eve"]


class PerUser(Aggregator[dict[str, int]]):
    """Counts per user within one partition, emitted as one map (seed 003's first step)."""

    def init(self, batch_id: int, collector: TridentCollector) -> dict[str, int]:
        return {}

    def aggregate(
        self, state: dict[str, int], tuple_: TridentTuple, collector: TridentCollector
    ) -> dict[str, int]:
        state[tuple_[0]] = state.get(tuple_[0], 0) + 1
        return state

    def complete(self, state: dict[str, int], collector: TridentCollector) -> None:
        collector.emit((state,))


class MergeCounts(CombinerAggregator[dict[str, int]]):
    """Merges per-user count maps (seed 003's global step)."""

    def init(self, tuple_: TridentTuple) -> dict[str, int]:
        return dict(tuple_[0])

    def combine(self, val1: dict[str, int], val2: dict[str, int]) -> dict[str, int]:
        out = dict(val1)
        for key, value in val2.items():
            out[key] = out.get(key, 0) + value
        return out

    def zero(self) -> dict[str, int]:
        return {}


def spout(*fields: str) -> MemoryTransactionalSpout:
    """A transactional spout standing in for the sources the tests give each batch."""
    return MemoryTransactionalSpout({"p0": []}, fields, 1)


def word_count(prefix: str) -> TridentTopology:
    """Seed 001: sentences -> Split -> group_by(word) -> persistent_aggregate(Count)."""
    t = TridentTopology("word_count")
    s = t.new_stream("sentences", spout("sentence"))
    s.each(["sentence"], Split(), ["word"]).group_by(["word"]).persistent_aggregate(
        memory_state(f"{prefix}_counts"), Count(), ["count"], name="counts"
    )
    return t


def global_count(prefix: str) -> TridentTopology:
    """Seed 000: the number of tuples of every batch, in one ungrouped state."""
    t = TridentTopology("global_count")
    s = t.new_stream("sentences", spout("sentence"))
    s.persistent_aggregate(memory_state(f"{prefix}_total"), Count(), ["count"], name="total")
    return t


def joined(prefix: str) -> TridentTopology:
    """Orders joined with users by name, amounts summed per city."""
    t = TridentTopology("joined")
    orders = t.new_stream("orders", spout("user", "amount"))
    users = t.new_stream("users", spout("name", "city"))
    both = t.join([orders, users], [["user"], ["name"]], ["user", "amount", "city"])
    both.group_by(["city"]).persistent_aggregate(
        memory_state(f"{prefix}_by_city"), ["amount"], Sum(), ["total"], name="by_city"
    )
    return t


def chained(prefix: str) -> TridentTopology:
    """chained_agg(): Count and Sum per user and per batch, accumulated in states."""
    t = TridentTopology("chained")
    s = t.new_stream("orders", spout("user", "amount"))
    per_user = (
        s.group_by(["user"])
        .chained_agg()
        .aggregate([], Count(), ["n"])
        .aggregate(["amount"], Sum(), ["sum"])
        .chain_end()
    )
    per_user.group_by(["user"]).persistent_aggregate(
        memory_state(f"{prefix}_user_n"), ["n"], Sum(), ["n"], name="user_n"
    )
    per_batch = (
        s.chained_agg()
        .aggregate([], Count(), ["n"])
        .aggregate(["amount"], Sum(), ["sum"])
        .chain_end()
    )
    per_batch.persistent_aggregate(
        memory_state(f"{prefix}_batch_sum"), ["sum"], Sum(), ["sum"], name="batch_sum"
    )
    return t


def seed_003(prefix: str) -> TridentTopology:
    """partition_by(user) -> partition_aggregate(per-user map) x3 -> global -> aggregate."""
    t = TridentTopology("seed_003")
    s = t.new_stream("orders", spout("user", "amount"))
    merged = (
        s.partition_by(["user"])
        .partition_aggregate(["user"], PerUser(), ["counts"])
        .parallelism_hint(3)
        .global_()
        .aggregate(["counts"], MergeCounts(), ["agg"])
    )
    merged.persistent_aggregate(
        memory_state(f"{prefix}_users"), ["agg"], MergeCounts(), ["users"], name="users"
    )
    return t


def sentences(rng: random.Random) -> Sources:
    parts: dict[str, list[Row]] = {}
    for p in range(rng.randint(1, 3)):
        rows = [
            (" ".join(rng.choices(VOCAB, k=rng.randint(0, 6))),) for _ in range(rng.randint(0, 25))
        ]
        parts[f"part-{p}"] = rows
    return {"sentences": parts}


def orders(rng: random.Random) -> Sources:
    parts: dict[str, list[Row]] = {}
    for p in range(rng.randint(1, 3)):
        parts[f"part-{p}"] = [
            (rng.choice(USERS), rng.randint(1, 50)) for _ in range(rng.randint(0, 20))
        ]
    users = [(u, rng.choice(["oslo", "lima"])) for u in USERS[: rng.randint(2, 5)]]
    return {"orders": parts, "users": {"0": users}}


CASES: dict[str, tuple[Callable[[str], TridentTopology], Callable[[random.Random], Sources]]] = {
    "word_count": (word_count, sentences),
    "global_count": (global_count, sentences),
    "join": (joined, orders),
    "chained_agg": (chained, orders),
    "seed_003": (seed_003, orders),
}


def commit(t: TridentTopology, txid: int, staged: dict[str, StagedState]) -> None:
    """Apply staged rows to the states as the coordinator's commit does."""
    committer = StateCommitter(t)
    states = committer.make_states(staged)
    for state, apply in committer.updates(staged, states, {}):
        state.begin_commit(txid)
        apply()
        state.commit(txid)


def snapshot(t: TridentTopology, prefix: str) -> dict[str, dict[Any, Any]]:
    """Every stored (key, value-with-txid) pair of every state of ``t``."""
    return {name: dict(memory_store(f"{prefix}_{name}").items()) for name in t.states}


@pytest.mark.parametrize("case", list(CASES))
def test_spark_and_local_runtimes_commit_the_same_states(spark: Any, case: str) -> None:
    build, make_sources = CASES[case]
    local_t, spark_t = build("local"), build("spark")
    local, remote = LocalBatchProcessor(local_t), SparkBatchProcessor(spark_t)
    rng = random.Random(case)
    batches = [make_sources(rng) for _ in range(3)] + [{}]  # the last batch is empty
    for txid, sources in enumerate(batches, start=1):
        # Given the same emitted batch on both runtimes
        expected = local.process(txid, sources)
        with remote.process(spark, txid, sources) as result:
            # When each runtime's staged rows are committed
            staged = result.to_process_result()
        assert staged.emitted == expected.emitted
        commit(local_t, txid, expected.staged)
        commit(spark_t, txid, staged.staged)
        # Then the states are the same after every batch
        assert snapshot(spark_t, "spark") == snapshot(local_t, "local"), f"txid {txid}"
    assert any(snapshot(local_t, "local").values())


def test_a_replayed_txid_stages_identical_rows(spark: Any) -> None:
    # Given a batch processed once and committed
    t = word_count("replay")
    sources = sentences(random.Random(7))
    processor = SparkBatchProcessor(t)
    with processor.process(spark, 5, sources) as first:
        staged = first.to_process_result().staged
    commit(t, 5, staged)
    before = snapshot(t, "replay")
    # When the same txid is replayed with the same sources
    with processor.process(spark, 5, sources) as again:
        replayed = again.to_process_result().staged
    commit(t, 5, replayed)
    # Then it stages the same rows, and committing them again changes nothing
    assert sorted(replayed["counts"].partitions[0]) == sorted(staged["counts"].partitions[0])
    assert snapshot(t, "replay") == before
