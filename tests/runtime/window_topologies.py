"""Window topologies shared by the window tests (importable by Spark's Python workers), and
the reference: every window's results computed directly from the data, batches ignored."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, ClassVar

from airflow_trident.operation import Aggregator, Consumer, Count, Filter, Sum
from airflow_trident.operation.base import OperationContext
from airflow_trident.operation.window import WindowConfig
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.state.window import sql_window_store
from airflow_trident.stream import Stream
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentCollector, TridentTuple

Row = tuple[Any, ...]


class WindowKey(Aggregator[list[Any]]):
    """One result per window: ``("<first seq>-<last seq>", sum of v, tuples)``."""

    def init(self, batch_id: int, collector: TridentCollector) -> list[Any]:
        return [None, None, 0, 0]

    def aggregate(
        self, state: list[Any], tuple_: TridentTuple, collector: TridentCollector
    ) -> list[Any]:
        seq, v = tuple_[0], tuple_[1]
        state[0] = seq if state[0] is None else min(state[0], seq)
        state[1] = seq if state[1] is None else max(state[1], seq)
        state[2] += v
        state[3] += 1
        return state

    def complete(self, state: list[Any], collector: TridentCollector) -> None:
        collector.emit((f"{state[0]}-{state[1]}", state[2], state[3]))


def window_key(rows: list[Row]) -> Row:
    """What :class:`WindowKey` emits for the ``(seq, v)`` rows of one window."""
    seqs = [r[0] for r in rows]
    return (f"{min(seqs)}-{max(seqs)}", sum(r[1] for r in rows), len(rows))


class Recorder(Consumer):
    """Records, per ``(txid, partition)``, each attempt's tuples (one list per ``prepare``)."""

    attempts: ClassVar[dict[tuple[int, int], list[list[Row]]]] = {}
    paused: ClassVar[bool] = False

    def prepare(self, context: OperationContext) -> None:
        self._key = (context.txid, context.partition_index)
        if not Recorder.paused:
            Recorder.attempts.setdefault(self._key, []).append([])

    def accept(self, tuple_: TridentTuple) -> None:
        if not Recorder.paused:
            Recorder.attempts[self._key][-1].append(tuple(tuple_.values))


class FaultFilter(Filter):
    """Keeps every tuple; calls ``injector.hit(point)`` first (a fault point)."""

    def __init__(self, injector: Any, point: str) -> None:
        self.injector = injector
        self.point = point

    def is_keep(self, tuple_: TridentTuple) -> bool:
        if self.injector is not None:
            self.injector.hit(self.point)
        return True


def data(partitions: int, per_partition: int, seed: int) -> dict[str, list[Row]]:
    """``(seq, v, ts)`` tuples: seq unique, ts non-decreasing within a partition (no tuple is
    late, so the reference needs no batches)."""
    import random

    rnd = random.Random(seed)
    out: dict[str, list[Row]] = {}
    seq = 0
    for p in range(partitions):
        ts = rnd.randint(0, 7)
        rows = []
        for _ in range(per_partition):
            rows.append((seq, rnd.randint(1, 9), ts))
            seq += 1
            ts += rnd.choice([0, 1, 2, 3, 7])
        out[f"p{p}"] = rows
    return out


def windowed(
    name: str,
    config: WindowConfig,
    rows: dict[str, list[Row]],
    take: int,
    *,
    table: str,
    injector: Any = None,
    store: Any = None,
    totals: Any = None,
    windows: Any = None,
) -> tuple[TridentTopology, Stream]:
    """spout -> fault point -> window(WindowKey) -> Recorder -> fault point -> two states
    (``totals``: sum of v per window key; ``windows``: how often each key came)."""
    t = TridentTopology(name)
    spout = MemoryTransactionalSpout(rows, ["seq", "v", "ts"], take)
    out = (
        t.new_stream("events", spout)
        .filter(["seq"], FaultFilter(injector, "upstream"))
        .window(
            config,
            store or sql_window_store(None, table=table),
            ["seq", "v"],
            WindowKey(),
            ["key", "total", "n"],
            name="win",
        )
        .peek(Recorder())
        .filter(["key"], FaultFilter(injector, "downstream"))
    )
    keyed = out.group_by(["key"])
    keyed.persistent_aggregate(
        totals
        or sql_state(None, f"{table}_totals", "transactional", key_fields=("key",),
                     value_type="bigint"),
        ["total"],
        Sum(),
        ["total"],
        name="totals",
    )  # fmt: skip
    keyed.persistent_aggregate(
        windows
        or sql_state(None, f"{table}_windows", "transactional", key_fields=("key",),
                     value_type="bigint"),
        Count(),
        ["n"],
        name="windows",
    )  # fmt: skip
    return t, out


def reference(
    config: WindowConfig, rows: dict[str, list[Row]]
) -> tuple[Counter[str], Counter[str]]:
    """Every window of every partition that fires once all ``rows`` were processed:
    ``(sum of v per key, windows per key)``."""
    totals: Counter[str] = Counter()
    windows: Counter[str] = Counter()
    for part in rows.values():
        for members in _windows(config, part):
            key, total, _ = window_key([(r[0], r[1]) for r in members])
            totals[key] += total
            windows[key] += 1
    return totals, windows


def _windows(config: WindowConfig, part: list[Row]) -> list[list[Row]]:
    length, slide = config.length, config.slide
    if config.by_count:
        ends = range(int(slide), len(part) + 1, int(slide))
        return [part[max(0, end - int(length)) : end] for end in ends]
    if not part:
        return []
    mark = max(r[2] for r in part) - float(getattr(config, "lag", 0.0))
    out = []
    k = math.floor(min(r[2] for r in part) / slide) + 1
    while k * slide <= mark:
        members = [r for r in part if k * slide - length <= r[2] < k * slide]
        if members:
            out.append(members)
        k += 1
    return out


class FaultyWindowStore:
    """A window store whose window states are ``FaultyState`` s: ``state.process.before`` /
    ``.after`` (the batch fails before / right after the window stored it) and
    ``state.commit.before`` are fault points."""

    def __init__(self, inner: Any, injector: Any) -> None:
        self.inner = inner
        self.injector = injector

    def for_window(self, topology: str, window: str) -> Any:
        from airflow_trident.testing.fault_points import FaultyStateFactory

        return FaultyStateFactory(self.inner.for_window(topology, window), self.injector)


class FileClock:
    """A processing-time clock that reads the time from a file (the test sets it; Spark's
    Python workers read the same file)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self) -> float:
        from pathlib import Path

        return float(Path(self.path).read_text())
