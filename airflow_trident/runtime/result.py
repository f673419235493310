"""What the processing phase of a batch produces, whichever runtime ran it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_trident.tuple import Fields

__all__ = ["Partitions", "ProcessResult", "StagedState"]

Partitions = list[list[tuple[Any, ...]]]


@dataclass
class StagedState:
    """Rows staged for one state's commit, per output partition (see ``PersistSink``)."""

    state: str
    kind: Literal["combine", "reduce", "update"]
    fields: Fields
    partitions: Partitions

    @property
    def rows(self) -> int:
        """How many rows are staged."""
        return sum(len(p) for p in self.partitions)


@dataclass
class ProcessResult:
    """The processing phase's output: staged state updates, stage outputs and counts."""

    txid: int
    staged: dict[str, StagedState] = field(default_factory=dict)
    outputs: dict[str, Partitions] = field(default_factory=dict)
    emitted: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def records_in(self) -> int:
        """Tuples the spouts emitted."""
        return sum(sum(p.values()) for p in self.emitted.values())
