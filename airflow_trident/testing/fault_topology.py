"""The topology a fault schedule runs, its source data, and the reference it is checked against.

Lines of words with an amount are split into words, pass a :class:`~airflow_trident.testing.
fault_points.FailWhenArmed` step, and are grouped by word into two SQL states of the run's state
database: ``counts`` (``Count``) and ``sums`` (``Sum`` of the line's amount), in a few state
partitions. The spout and the states' rule come from the *combination*:

=================  ========================================  ============
combination        spout                                     states
=================  ========================================  ============
``tx-tx``          ``MemoryTransactionalSpout``               transactional
``tx-opaque``      ``MemoryTransactionalSpout``               opaque
``opaque-opaque``  ``MemoryOpaqueSpout`` (partition outages)  opaque
=================  ========================================  ============

Once txid ``T`` is committed the states must equal the reference computed from the source data
each partition had read up to ``T`` (:meth:`FaultTopology.committed_ends`), key by key: that is
how the harness names the txid where a difference first appears.

Examples
--------
>>> import random
>>> data = SourceData.generate(random.Random(7), partitions=2, rows_per_partition=3, vocabulary=5)
>>> sorted(data.partitions), len(data.partitions["p00"])
(['p00', 'p01'], 3)
>>> ref = data.reference({"p00": 1, "p01": 0})
>>> sum(ref["counts"].values()) == len(data.partitions["p00"][0][0].split())
True
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_trident.coordination.protocol import CoordinatorStoreProtocol
from airflow_trident.errors import ConfigurationError
from airflow_trident.operation import Count, Split, Sum
from airflow_trident.spout.memory import MemoryOpaqueSpout, MemoryTransactionalSpout
from airflow_trident.state.base import Key
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.sql import sql_state
from airflow_trident.state.sql.factory import SqlMapStateFactory
from airflow_trident.testing.fault_points import (
    FailWhenArmed,
    FaultInjector,
    FaultyStateFactory,
    faulty_spout,
)
from airflow_trident.topology import TridentTopology

__all__ = ["COMBOS", "Difference", "FaultTopology", "SourceData"]

COMBOS: dict[str, tuple[str, str]] = {
    "tx-tx": ("transactional", "transactional"),
    "tx-opaque": ("transactional", "opaque"),
    "opaque-opaque": ("opaque", "opaque"),
}
"""Combination name -> (spout kind, state type)."""

STATES = ("counts", "sums")
SPOUT = "lines"

Row = tuple[str, int]


@dataclass(frozen=True)
class SourceData:
    """Lines ``(text, amount)`` per source partition, generated from a seed."""

    partitions: Mapping[str, list[Row]]

    @classmethod
    def generate(
        cls,
        rng: random.Random,
        *,
        partitions: int = 4,
        rows_per_partition: int = 100,
        vocabulary: int = 300,
        words_per_line: tuple[int, int] = (2, 9),
    ) -> SourceData:
        """Random lines over ``vocabulary`` words (skewed: a few words are frequent, so most
        batches update keys that earlier batches wrote, and rare words make key sets differ)."""
        words = [f"w{i:03d}" for i in range(vocabulary)]
        weights = [1.0 / (1 + i) ** 0.8 for i in range(vocabulary)]
        data: dict[str, list[Row]] = {}
        for p in range(partitions):
            rows = []
            for _ in range(rows_per_partition):
                n = rng.randint(*words_per_line)
                line = " ".join(rng.choices(words, weights, k=n))
                rows.append((line, rng.randint(1, 9)))
            data[f"p{p:02d}"] = rows
        return cls(data)

    @property
    def keys(self) -> list[Key]:
        """Every word of the data, as state keys (sorted)."""
        return sorted(
            {(w,) for rows in self.partitions.values() for line, _ in rows for w in line.split()}
        )

    def total_rows(self) -> int:
        """Lines in every partition."""
        return sum(len(rows) for rows in self.partitions.values())

    def reference(self, ends: Mapping[str, int] | None = None) -> dict[str, dict[Key, int]]:
        """``counts`` and ``sums`` by word over the first ``ends[p]`` lines of each partition
        (all lines by default)."""
        counts: Counter[Key] = Counter()
        sums: Counter[Key] = Counter()
        for partition, rows in self.partitions.items():
            end = len(rows) if ends is None else ends.get(partition, 0)
            for line, amount in rows[:end]:
                for word in line.split():
                    counts[(word,)] += 1
                    sums[(word,)] += amount
        return {"counts": dict(counts), "sums": dict(sums)}


@dataclass(frozen=True)
class Difference:
    """One key of one state whose value differs from the reference after ``txid`` committed."""

    seed: int
    combo: str
    txid: int
    state: str
    key: Key
    expected: int | None
    got: int | None
    stored_txid: int | None

    def __str__(self) -> str:
        return (
            f"seed={self.seed} combo={self.combo} txid={self.txid} state={self.state} "
            f"key={self.key!r} expected={self.expected} got={self.got} "
            f"(value written by txid {self.stored_txid})"
        )


class FaultTopology:
    """The word/amount topology of one combination, with fault points wired in.

    Parameters
    ----------
    name:
        Topology name (also prefixes the state tables).
    combo:
        ``tx-tx``, ``tx-opaque`` or ``opaque-opaque``.
    data:
        Source data.
    injector:
        Fault points of the spout, the Function step and the states.
    take_per_batch:
        Lines a batch takes per partition.
    parallelism:
        State partitions (each one state commit).
    hidden:
        State methods hidden from the runtime (mutation tests of the harness, see
        :class:`~airflow_trident.testing.fault_points.FaultyStateFactory`).
    """

    def __init__(
        self,
        name: str,
        combo: str,
        data: SourceData,
        injector: FaultInjector,
        *,
        take_per_batch: int = 3,
        parallelism: int = 3,
        hidden: frozenset[str] = frozenset(),
    ) -> None:
        if combo not in COMBOS:
            msg = f"unknown combination {combo!r}: use one of {', '.join(COMBOS)}"
            raise ConfigurationError(msg)
        self.name = name
        self.combo = combo
        self.data = data
        spout_kind, state_type = COMBOS[combo]
        inner: MemoryTransactionalSpout | MemoryOpaqueSpout
        if spout_kind == "opaque":
            inner = MemoryOpaqueSpout(data.partitions, ["line", "amount"], take_per_batch)
        else:
            inner = MemoryTransactionalSpout(data.partitions, ["line", "amount"], take_per_batch)
        self.spout = inner
        self.factories: dict[str, SqlMapStateFactory] = {
            state: sql_state(
                None, f"{name}_{state}", state_type, key_fields=("word",), value_type="bigint"
            )
            for state in STATES
        }
        topology = TridentTopology(name)
        words = (
            topology.new_stream(SPOUT, faulty_spout(inner, injector))
            .each(["line"], Split(), ["word"])
            .each(["word"], FailWhenArmed(injector), ["checked"])
            .project(["word", "amount"])
            .parallelism_hint(parallelism)
            .group_by(["word"])
        )
        words.persistent_aggregate(
            FaultyStateFactory(self.factories["counts"], injector, hidden=hidden),
            Count(),
            ["count"],
            name="counts",
        )
        words.persistent_aggregate(
            FaultyStateFactory(self.factories["sums"], injector, hidden=hidden),
            ["amount"],
            Sum(),
            ["total"],
            name="sums",
        )
        self.topology = topology

    @property
    def opaque_spout(self) -> MemoryOpaqueSpout | None:
        """The opaque spout (its partitions can be made unreadable), if this combination has one."""
        return self.spout if isinstance(self.spout, MemoryOpaqueSpout) else None

    def committed_ends(self, store: CoordinatorStoreProtocol) -> dict[str, int]:
        """Lines of each partition that committed batches have read (``store``: the real,
        unwrapped store)."""
        state = store.partition_state(SPOUT)
        committed = store.commits.committed_txid()
        ends: dict[str, int] = {}
        for partition in self.data.partitions:
            if isinstance(self.spout, MemoryOpaqueSpout):
                value = state.get_committed(partition) or {"meta": None}
                ends[partition] = int((value["meta"] or {"next_offset": 0})["next_offset"])
                continue
            found = state.latest_before(partition, committed + 1)
            meta: Any = None if found is None else found[1]
            if isinstance(meta, dict) and "last" in meta:  # a partition a batch skipped
                meta = meta["last"]
            ends[partition] = 0 if meta is None else int(meta["offset"]) + int(meta["count"])
        return ends

    def read_states(self, url: str) -> dict[str, dict[Key, tuple[int, int]]]:
        """Every stored key of each state: ``(value, txid that wrote it)`` (no fault points)."""
        binding = StateBinding(url)
        keys = self.data.keys
        found: dict[str, dict[Key, tuple[int, int]]] = {}
        for state_name, factory in self.factories.items():
            state: Any = binding.make_state(factory, 0, 1)
            values = state.backing.multi_get(keys)
            found[state_name] = {
                key: _value_and_txid(value)
                for key, value in zip(keys, values, strict=True)
                if value is not None
            }
        return found

    def differences(
        self, seed: int, txid: int, url: str, ends: Mapping[str, int]
    ) -> list[Difference]:
        """Keys whose stored value differs from the reference of ``ends`` (after ``txid``)."""
        expected = self.data.reference(ends)
        got = self.read_states(url)
        diffs: list[Difference] = []
        for state_name in STATES:
            want, have = expected[state_name], got[state_name]
            for key in sorted(set(want) | set(have)):
                value, stored = have.get(key, (None, None))
                if want.get(key) != value:
                    diffs.append(
                        Difference(
                            seed, self.combo, txid, state_name, key, want.get(key), value, stored
                        )
                    )
        return diffs


def _value_and_txid(value: Any) -> tuple[int, int]:
    if hasattr(value, "curr_txid"):
        return int(value.curr), int(value.curr_txid)
    return int(value.val), int(value.txid)
