"""Which Spark Connect session the Connect tasks of a topology share
(:func:`airflow_trident.hooks.spark.connect_share_key`, ``[trident] connect_session_reuse``)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.errors import ConfigurationError
from airflow_trident.hooks.spark import connect_share_key
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.memory import FixedBatchSpout
from airflow_trident.topology import TridentTopology


def _steps(tmp_path: Path, name: str) -> BatchSteps:
    topology = TridentTopology(name)
    topology.new_stream("s", FixedBatchSpout(["x"], 1, ("a",)))
    return BatchSteps(
        topology, MemoryCoordinatorStore(name), StagingArea(str(tmp_path / "staging"), name)
    )


def test_the_key_names_the_topology_and_changes_with_the_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the Connect tasks of two topologies
    first, other = _steps(tmp_path, "wc_a"), _steps(tmp_path, "wc_b")
    key = connect_share_key(first)
    # Then each topology has its own shared session, the same on every call
    assert key is not None
    assert key.startswith("wc_a|")
    assert key == connect_share_key(first)
    assert connect_share_key(other) not in (None, key)
    # When the task imported a user module whose source changed
    module_file = tmp_path / "user_topology_code.py"
    module_file.write_text("X = 1\n")
    module = types.ModuleType("user_topology_code")
    module.__file__ = str(module_file)
    monkeypatch.setitem(sys.modules, "user_topology_code", module)
    before = connect_share_key(first)
    module_file.write_text("X = 2\n")
    # Then the key changes: reused Python workers would run the old code
    assert connect_share_key(first) != before


@pytest.mark.parametrize(("value", "shared"), [("false", False), ("true", True), ("", True)])
def test_reuse_follows_the_trident_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, shared: bool
) -> None:
    monkeypatch.setenv("AIRFLOW__TRIDENT__CONNECT_SESSION_REUSE", value)
    assert (connect_share_key(_steps(tmp_path, "wc")) is not None) is shared


def test_a_mistyped_reuse_setting_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__TRIDENT__CONNECT_SESSION_REUSE", "sometimes")
    with pytest.raises(
        ConfigurationError, match=r"\[trident\] connect_session_reuse is 'sometimes'"
    ):
        connect_share_key(_steps(tmp_path, "wc"))


def test_the_key_follows_a_source_edited_after_it_was_read_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    # Given a user module whose source was read for a key long after it was written
    steps = _steps(tmp_path, "wc_c")
    module_file = tmp_path / "user_topology_old.py"
    module_file.write_text("X = 1\n")
    os.utime(module_file, ns=(1_000_000_000, 1_000_000_000))
    module = types.ModuleType("user_topology_old")
    module.__file__ = str(module_file)
    monkeypatch.setitem(sys.modules, "user_topology_old", module)
    before = connect_share_key(steps)
    assert connect_share_key(steps) == before
    # When it is edited (the same size; its mtime moves on)
    module_file.write_text("X = 2\n")
    # Then the key changes
    assert connect_share_key(steps) != before
