"""A persist step refuses a spout and state that together are not exactly-once (Trident's table),
unless the call opts in with ``at_least_once=True``."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_trident.errors import ConfigurationError, NotExactlyOnceError, TopologyError
from airflow_trident.operation import Count, Function, StateUpdater, Sum
from airflow_trident.spout.memory import (
    FixedBatchSpout,
    MemoryOpaqueSpout,
    MemoryTransactionalSpout,
)
from airflow_trident.state.memory import memory_state
from airflow_trident.stream import Stream
from airflow_trident.topology import TridentTopology

DATA = {"p0": [("a",), ("b",)]}
EXACTLY_ONCE = {
    ("transactional", "transactional"),
    ("transactional", "opaque"),
    ("opaque", "opaque"),
}


def spout_of(kind: str) -> Any:
    if kind == "transactional":
        return MemoryTransactionalSpout(DATA, ["word"], 1)
    if kind == "opaque":
        return MemoryOpaqueSpout(DATA, ["word"], 1)
    return FixedBatchSpout(["word"], 1, ("a",))


def words(kind: str, name: str = "words") -> tuple[TridentTopology, Stream]:
    t = TridentTopology("combos")
    return t, t.new_stream(name, spout_of(kind))


class Keep(StateUpdater[Any]):
    def update_state(self, state: Any, tuples: Any, collector: Any) -> None:
        return None


@pytest.mark.parametrize("spout_kind", ["transactional", "opaque", "non_transactional"])
@pytest.mark.parametrize("state_type", ["transactional", "opaque", "non_transactional"])
def test_the_spout_state_table_decides_what_is_refused(spout_kind: str, state_type: str) -> None:
    # Given a stream of a spout of each kind
    _t, s = words(spout_kind)
    factory = memory_state("counts", state_type)
    # When it is persisted into a state of each type
    if (spout_kind, state_type) in EXACTLY_ONCE:
        state = s.group_by(["word"]).persistent_aggregate(factory, Count(), ["count"], name="c")
        # Then the exactly-once combinations are accepted
        assert state.node.at_least_once is False
        return
    with pytest.raises(NotExactlyOnceError) as refused:
        s.group_by(["word"]).persistent_aggregate(factory, Count(), ["count"], name="c")
    # Then the others are refused, naming the state, the spout and both kinds
    message = str(refused.value)
    for part in ("state 'c'", f"({state_type} state)", "spout 'words'", f"({spout_kind} spout)"):
        assert part in message
    assert "at_least_once=True" in message


def test_opaque_spout_into_transactional_state_says_why_and_both_fixes() -> None:
    # Given an opaque spout's stream
    t, s = words("opaque")
    # When it is aggregated into a transactional state
    with pytest.raises(NotExactlyOnceError) as refused:
        s.persistent_aggregate(memory_state("n", "transactional"), Count(), ["n"], name="n")
    # Then the error is a configuration error saying why and how to fix it
    assert isinstance(refused.value, TopologyError | ConfigurationError)
    assert isinstance(refused.value, ValueError)
    message = str(refused.value)
    assert "re-emit a txid with other tuples" in message
    assert "use an opaque state" in message
    assert "or a transactional spout" in message
    assert "pass at_least_once=True to persistent_aggregate" in message
    # And nothing was added to the topology
    assert "n" not in t.states
    assert [n.kind for n in t.nodes.values()] == ["spout"]


def test_non_transactional_spout_is_refused_with_any_state() -> None:
    # Given a FixedBatchSpout (a batch spout: non-transactional)
    _t, s = words("non_transactional")
    # When it feeds an opaque state
    with pytest.raises(NotExactlyOnceError, match=r"use a transactional or opaque spout"):
        s.persistent_aggregate(memory_state("n"), Count(), ["n"], name="n")


def test_non_transactional_state_is_refused_in_partition_persist() -> None:
    # Given a transactional spout's stream
    _t, s = words("transactional")
    # When partition_persist writes a non-transactional state
    with pytest.raises(
        NotExactlyOnceError,
        match=r"state 'kept' \(non_transactional state\).*stores no txid.*"
        r"use a transactional or opaque state.*at_least_once=True to partition_persist",
    ):
        s.partition_persist(
            memory_state("kept", "non_transactional"), ["word"], Keep(), name="kept"
        )


def test_a_merged_stream_takes_its_weakest_spout() -> None:
    # Given a transactional and an opaque spout merged into one stream
    t = TridentTopology("merged")
    a = t.new_stream("steady", spout_of("transactional"))
    b = t.new_stream("shaky", spout_of("opaque"))
    merged = t.merge(a, b).each(["word"], _Length(), ["n"])
    # When the merged stream feeds a transactional state
    with pytest.raises(NotExactlyOnceError) as refused:
        merged.persistent_aggregate(memory_state("tot", "transactional"), ["n"], Sum(), ["t"])
    # Then the opaque spout is the one named
    assert "spout 'shaky' (opaque spout)" in str(refused.value)
    assert "'steady'" not in str(refused.value)
    # And an opaque state is fine for both
    merged.persistent_aggregate(memory_state("tot2", "opaque"), ["n"], Sum(), ["t"], name="t2")


def test_a_join_takes_its_weakest_spout() -> None:
    # Given a transactional spout joined with a non-transactional one
    t = TridentTopology("joined")
    a = t.new_stream("left", spout_of("transactional"))
    b = t.new_stream("right", FixedBatchSpout(["word", "city"], 1, ("a", "Oslo")))
    joined = t.join([a, b], [["word"], ["word"]], ["word", "city"])
    # When the join feeds an opaque state
    with pytest.raises(NotExactlyOnceError, match=r"spout 'right' \(non_transactional spout\)"):
        joined.group_by(["city"]).persistent_aggregate(memory_state("c"), Count(), ["n"])


def test_at_least_once_opts_in_and_is_recorded() -> None:
    # Given an opaque spout's stream
    t, s = words("opaque")
    # When the caller accepts at-least-once for a transactional state
    state = s.group_by(["word"]).persistent_aggregate(
        memory_state("n", "transactional"), Count(), ["n"], name="n", at_least_once=True
    )
    kept = s.partition_persist(
        memory_state("k", "non_transactional"), ["word"], Keep(), name="k", at_least_once=True
    )
    # Then both persist steps are built and say so
    assert state.node.at_least_once is True
    assert kept.node.at_least_once is True
    assert sorted(t.states) == ["k", "n"]


def test_a_factory_without_a_known_state_type_is_not_refused() -> None:
    # Given a state factory that does not say its state type
    class Plain:
        def make_state(self, partition_index: int = 0, num_partitions: int = 1) -> Any:
            return memory_state("plain").make_state()

    _t, s = words("non_transactional")
    # When a non-transactional spout persists into it
    state = s.persistent_aggregate(Plain(), Count(), ["n"], name="plain")
    # Then it is accepted (nothing is known to be wrong)
    assert state.node.at_least_once is False


class _Length(Function):
    def execute(self, tuple_: Any, collector: Any) -> None:
        collector.emit((len(tuple_[0]),))
