"""Building windows: the step, its store's state and its plan; what is refused at once."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_trident.errors import ConfigurationError, TopologyError
from airflow_trident.graph import WindowNode
from airflow_trident.operation import Count, Split, Sum
from airflow_trident.operation.window import SlidingDurationWindow, TumblingCountWindow
from airflow_trident.planner.planner import build_plan
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.state.window import sql_window_store
from airflow_trident.stream import Stream
from airflow_trident.topology import TridentTopology


def events() -> Stream:
    spout = MemoryTransactionalSpout({"p0": [(1, 2.0)]}, ["v", "ts"], 1)
    return TridentTopology("win_build").new_stream("events", spout)


def test_a_window_is_a_step_with_its_store_as_state_and_a_sink_in_its_plan() -> None:
    # Given a window followed by a persistent aggregate
    s = events()
    w = s.tumbling_window(3, sql_window_store(None), ["v"], Sum(), ["total"])
    w.persistent_aggregate(memory_state("win_build_out"), ["total"], Sum(), ["sum"], name="out")
    # Then the window outputs its aggregator's fields, and its store is a state of the step
    node = s.topology.nodes["window"]
    assert isinstance(node, WindowNode)
    assert w.fields == ("total",)
    assert s.topology.states["window"] == "window"
    assert node.config == TumblingCountWindow(3)
    # and the plan stages the window's results for its store's commit beside the next steps
    assert build_plan(s.topology).describe().splitlines() == [
        "stage_1 [process, x1] events: window",
        "stage_2 [process, x1] stage_1: window",
        "stage_3 [process, x1] stage_1: out.partial",
        "stage_4 [process, x1] stage_3 global: out",
    ]


def test_a_renamed_window_names_its_state_after_itself() -> None:
    s = events()
    first = s.tumbling_window(3, sql_window_store(None), ["v"], Sum(), ["total"]).name("sums")
    second = s.tumbling_window(2, sql_window_store(None), ["v"], Count(), ["n"])
    assert (first.node_id, second.node_id) == ("sums", "window")
    assert sorted(s.topology.states) == ["sums", "window"]
    assert s.topology.nodes["sums"].factory.window == "sums"  # type: ignore[attr-defined]
    assert second.parallelism_hint(2).topology.nodes["window"].parallelism == 2


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (
            lambda s: s.tumbling_window(3, sql_window_store(None), ["x"], Sum(), ["t"]),
            TopologyError,
            r"step 'window': unknown field\(s\) \['x'\]",
        ),
        (
            lambda s: s.tumbling_window(3, memory_state("m"), ["v"], Sum(), ["t"]),
            TopologyError,
            r"is not a window store factory; hint: sql_window_store\(None\)",
        ),
        (
            lambda s: s.tumbling_window(3, sql_window_store(None), ["v"], Split(), ["t"]),
            TopologyError,
            r"is not a CombinerAggregator, ReducerAggregator or Aggregator",
        ),
        (
            lambda s: s.tumbling_window(
                3, sql_window_store(None), ["v"], Sum(), ["t"], timestamp_field="ts"
            ),
            TopologyError,
            r"timestamp_field and clock apply to duration windows",
        ),
        (
            lambda s: s.sliding_window(
                timedelta(seconds=5), 2, sql_window_store(None), ["v"], Sum(), ["t"]
            ),
            TopologyError,
            r"both as counts or as durations",
        ),
        (
            lambda s: s.sliding_window(2, 3, sql_window_store(None), ["v"], Sum(), ["t"]),
            ConfigurationError,
            r"the slide \(3\) must not exceed the window \(2\)",
        ),
        (
            lambda s: s.window(
                SlidingDurationWindow.of(10, 5, timestamp_field="when"),
                sql_window_store(None),
                ["v"],
                Sum(),
                ["t"],
            ),
            TopologyError,
            r"unknown field\(s\) \['when'\]",
        ),
        (
            lambda s: s.tumbling_window(timedelta(0), sql_window_store(None), ["v"], Sum(), ["t"]),
            ConfigurationError,
            r"window_duration must be positive",
        ),
    ],
)
def test_a_bad_window_is_refused_when_built(build: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        build(events())  # type: ignore[operator]


def test_a_window_on_a_drpc_stream_is_refused() -> None:
    t = TridentTopology("win_drpc")
    with pytest.raises(TopologyError, match=r"cannot follow a DRPC stream \(step 'drpc'\)"):
        t.new_drpc_stream("f").tumbling_window(2, sql_window_store(None), ["args"], Count(), ["n"])
