"""A stream whose transactional spout is replaced by an opaque one (a topology's upgrade the
runbook warns about) is refused with what happened and the way on, not a ``KeyError``."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.errors import ConfigurationError
from airflow_trident.operation import Count
from airflow_trident.spout.memory import MemoryOpaqueSpout, MemoryTransactionalSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology


def _topology(name: str, spout: Any, kind: str) -> TridentTopology:
    t = TridentTopology(name)
    t.new_stream("s", spout).group_by(["w"]).persistent_aggregate(
        memory_state(f"{name}_{kind}", kind), Count(), ["n"], name="c"
    )
    return t


def test_an_opaque_spout_taking_over_a_transactional_stream_is_refused_by_name() -> None:
    data = {"p0": [("a",), ("b",), ("c",), ("d",)]}
    store = MemoryCoordinatorStore("switch")
    before = MemoryTransactionalSpout(data, ["w"], take_per_batch=2)
    steps = BatchSteps(_topology("switch", before, "transactional"), store, None)
    steps.run_batch()
    txid = int(steps.begin(None)["txid"])
    steps.emit(steps.plan(txid))  # txid 2 emitted, not committed (its records gone, say)
    after = MemoryOpaqueSpout(data, ["w"], take_per_batch=2)
    upgraded = BatchSteps(_topology("switch", after, "opaque"), store, None)
    with pytest.raises(ConfigurationError) as raised:
        upgraded.run_batch()
    said = str(raised.value)
    assert "partition 'p0'" in said
    assert "cannot take over a transactional stream's history" in said
    assert "docs/runbook.md" in said
