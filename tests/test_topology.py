"""Default step names: what users recognise (the operation's name), numbered only when repeated."""

from __future__ import annotations

import pytest

from airflow_trident.batch.runner import LocalRunner
from airflow_trident.errors import BatchFailedError
from airflow_trident.operation import Count, Filter, Split
from airflow_trident.spout.memory import FixedBatchSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentTuple


class Short(Filter):
    def is_keep(self, tuple_: TridentTuple) -> bool:
        return len(tuple_[0]) < 4


class Boom(Filter):
    def is_keep(self, tuple_: TridentTuple) -> bool:
        if tuple_[0] == "cow":
            raise ValueError("no cows")
        return True


def test_unnamed_steps_are_named_after_their_operation_and_numbered_when_repeated() -> None:
    # Given a stream with two Splits, two Short filters, a named step and an aggregation
    t = TridentTopology("names")
    s = t.new_stream("lines", FixedBatchSpout(["line"], 2, ("a b",)))
    # When the steps are added without names (but one)
    s = s.each(["line"], Split(), ["w1"]).each(["line"], Split(), ["w2"])
    s = s.each(["w1"], Short()).each(["w2"], Short()).each(["w1"], Short(), name="mine")
    s.group_by(["w1"]).persistent_aggregate(
        memory_state("c"), Count(), ["n"], name="counts", at_least_once=True
    )
    # Then each step is the operation's class name, numbered from _2 only when repeated
    assert list(t.nodes) == ["lines", "Split", "Split_2", "Short", "Short_2", "mine", "counts"]


def test_a_failing_step_is_reported_under_its_operation_name() -> None:
    # Given a topology whose filter raises on one record
    t = TridentTopology("names_fail")
    spout = FixedBatchSpout(["line"], 5, ("the cow",))
    words = t.new_stream("lines", spout).each(["line"], Split(), ["word"]).each(["word"], Boom())
    words.group_by(["word"]).persistent_aggregate(
        memory_state("c"), Count(), ["n"], name="c", at_least_once=True
    )
    # When a batch runs, Then the error names the step as the user wrote it
    with pytest.raises(BatchFailedError, match=r"step 'Boom' failed in batch txid 1 on record"):
        LocalRunner(t).run_batch()
