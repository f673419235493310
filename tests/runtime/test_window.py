"""Windows across batches on the in-process runtime, with failures and replays in between:
the committed results equal every window computed directly from the data, each once; a
retried txid emits exactly what its earlier attempts emitted; a committed txid changes
nothing; the window store keeps only what later batches need."""

from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_trident.batch.runner import LocalRunner
from airflow_trident.errors import BatchFailedError, TridentError
from airflow_trident.operation import Sum
from airflow_trident.operation.window import (
    SlidingCountWindow,
    SlidingDurationWindow,
    TumblingCountWindow,
    TumblingDurationWindow,
    WindowConfig,
)
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.sql import sql_state
from airflow_trident.state.window import sql_window_store
from airflow_trident.testing.fault_points import FaultInjector, FaultyStateFactory
from airflow_trident.topology import TridentTopology
from tests.runtime import window_topologies as wt

CONFIGS: dict[str, WindowConfig] = {
    "tumbling_count": TumblingCountWindow.of(4),
    "sliding_count": SlidingCountWindow.of(5, 2),
    "tumbling_duration": TumblingDurationWindow.of(timedelta(seconds=10), timestamp_field="ts"),
    "sliding_duration": SlidingDurationWindow.of(20, 5, timestamp_field="ts", lag=2),
}
FAULTS = ["upstream", "state.process.before", "state.process.after", "downstream",
          "state.commit.before"]  # fmt: skip


def committed(runner: LocalRunner, keys: list[str]) -> tuple[Counter[str], Counter[str]]:
    totals = runner.state("totals").multi_get([(k,) for k in keys])
    windows = runner.state("windows").multi_get([(k,) for k in keys])
    return (
        Counter({k: v for k, v in zip(keys, totals, strict=True) if v}),
        Counter({k: v for k, v in zip(keys, windows, strict=True) if v}),
    )


@pytest.mark.integration
@pytest.mark.parametrize("kind", list(CONFIGS))
def test_windows_across_failed_and_replayed_batches_equal_the_reference(
    kind: str, pg_url: str, unique_name: str
) -> None:
    # Given a window over two partitions, 3 tuples per partition and batch, with fault points
    # before the window, in its store (before/after it stored the batch, at its commit), after
    # it, and at the commit of a downstream state
    config = CONFIGS[kind]
    rows = wt.data(2, 27, seed=len(kind))
    injector = FaultInjector()
    topology, _ = wt.windowed(
        unique_name,
        config,
        rows,
        3,
        table=unique_name,
        injector=injector,
        store=wt.FaultyWindowStore(sql_window_store(None, table=unique_name), injector),
        windows=FaultyStateFactory(
            sql_state(None, f"{unique_name}_w", "transactional", key_fields=("key",),
                      value_type="bigint"),
            injector,
        ),
    )  # fmt: skip
    runner = LocalRunner(topology, states=StateBinding(pg_url))
    store = runner.state("win")
    wt.Recorder.attempts.clear()
    rnd = random.Random(kind)
    failures = replays = 0
    # When batches run with a fault in every other one, replays of committed txids and a
    # direct re-processing of a committed txid in between
    for _ in range(36):
        action = rnd.choice(["ok", "fault", "fault", "fault", "replay", "reprocess"])
        last = runner.store.commits.committed_txid()
        if action == "fault":
            injector.arm(rnd.choice(FAULTS), at=rnd.randint(1, 2))
            try:
                runner.run_batch()
            except TridentError:
                failures += 1
            injector.disarm()
        elif action in ("replay", "reprocess") and last > 0:
            txid = rnd.randint(max(1, last - 5), last)
            before = committed(runner, sorted(wt.reference(config, rows)[0]))
            held = store.held()
            if action == "replay":
                assert runner.replay(txid).committed is False
            else:  # a cleared process task of a committed txid: the window emits nothing,
                # or (the last committed txid, whose results are still kept) the same again
                wt.Recorder.paused = True
                try:
                    steps = runner.steps
                    result = steps.ctx.processor.process(txid, steps.emit(steps.plan(txid)))
                finally:
                    wt.Recorder.paused = False
                for p, emitted in enumerate(result.staged["win"].partitions):
                    first = wt.Recorder.attempts[(txid, p)][0]
                    assert emitted == (first if txid == last else [])
            replays += 1
            assert committed(runner, sorted(wt.reference(config, rows)[0])) == before
            assert store.held() == held
        else:
            runner.run_batch()
    while runner.store.commits.committed_txid() < 11:  # 9 batches hold the data; then empty ones
        runner.run_batch()

    # Then every window fired exactly once, with exactly its tuples
    totals, windows = wt.reference(config, rows)
    assert failures >= 5
    assert replays >= 3
    assert totals
    assert committed(runner, sorted(totals)) == (totals, windows)
    # and a retried txid emitted what its earlier attempts emitted (all of it, or the same)
    retried = {k: a for k, a in wt.Recorder.attempts.items() if len(a) > 1}
    assert retried
    for key, attempts in retried.items():
        assert all(a == attempts[0] for a in attempts), key
    # and the store holds the last txid's results only, and at most a window of tuples
    last = runner.store.commits.committed_txid()
    assert {txid for _, txid in store.pending()} <= {last}
    for part in store.held().values():
        if config.by_count:
            assert part[-1].pos - part[0].pos < config.length
        else:
            assert min(t.ts for t in part if t.ts is not None) >= part[-1].ts - config.length - 7


def test_processing_time_windows_fire_once_the_injected_clock_passes_their_end(
    tmp_path: Path,
) -> None:
    # Given a tumbling 10 s processing-time window with a clock the test sets per batch
    now = [0.0]
    t = TridentTopology("clocked")
    spout = MemoryTransactionalSpout({"p0": [(v,) for v in range(1, 9)]}, ["v"], 2)
    seen: list[tuple[int, Any]] = []
    out = t.new_stream("nums", spout).tumbling_window(
        timedelta(seconds=10), sql_window_store(None), ["v"], Sum(), ["total"],
        clock=lambda: now[0],
    )  # fmt: skip
    out.persistent_aggregate(
        sql_state(None, "clocked_total", "transactional", value_type="bigint"),
        ["total"], Sum(), ["sum"], name="sum",
    )  # fmt: skip
    runner = LocalRunner(t, states=StateBinding(f"sqlite:///{tmp_path}/state.db"))
    # When batches come at 1 s, 4 s, 12 s (the clock passed 10 s) and 35 s
    for at in (1.0, 4.0, 12.0, 35.0):
        now[0] = at
        report = runner.run_batch()
        seen.append((report.txid, runner.state("sum").get()))
    # Then [0, 10) fired at 12 s with the tuples of the batches at 1 s and 4 s (1+2+3+4), and
    # [10, 20) at 35 s with those of the batch at 12 s (5+6)
    assert seen == [(1, 0), (2, 0), (3, 10), (4, 21)]


def test_event_time_drops_tuples_older_than_the_watermark(tmp_path: Path) -> None:
    # Given an event-time tumbling window of 10 s; the second batch holds a tuple (ts 3)
    # older than the first batch's watermark (ts 12)
    t = TridentTopology("late")
    data = {"p0": [(1, 5), (2, 12), (4, 3), (8, 25)]}
    spout = MemoryTransactionalSpout(data, ["v", "ts"], 2)
    t.new_stream("nums", spout).tumbling_window(
        timedelta(seconds=10), sql_window_store(None), ["v"], Sum(), ["total"],
        timestamp_field="ts",
    ).persistent_aggregate(
        sql_state(None, "late_total", "transactional", value_type="bigint"),
        ["total"], Sum(), ["sum"], name="sum",
    )  # fmt: skip
    runner = LocalRunner(t, states=StateBinding(f"sqlite:///{tmp_path}/state.db"))
    # When both batches run
    runner.run(2)
    # Then [0, 10) fired in the first batch (1), [10, 20) in the second (2); the late tuple
    # (4) was dropped
    assert runner.state("sum").get() == 3


def test_a_bad_timestamp_fails_the_batch_naming_step_txid_and_record(tmp_path: Path) -> None:
    t = TridentTopology("badts")
    spout = MemoryTransactionalSpout({"p0": [(1, "noon")]}, ["v", "ts"], 1)
    t.new_stream("nums", spout).tumbling_window(
        timedelta(seconds=10), sql_window_store(None), ["v"], Sum(), ["total"],
        timestamp_field="ts",
    )  # fmt: skip
    runner = LocalRunner(t, states=StateBinding(f"sqlite:///{tmp_path}/state.db"))
    with pytest.raises(BatchFailedError, match=r"step 'window' failed in batch txid 1 .*'noon'"):
        runner.run_batch()


def test_a_state_fed_by_a_window_cannot_be_rebuilt_from_the_archive(tmp_path: Path) -> None:
    from airflow_trident.batch.ledger import CommitLedger
    from airflow_trident.batch.rebuild import rebuild_states
    from airflow_trident.errors import ConfigurationError

    topology, _ = wt.windowed("rebuilt", TumblingCountWindow.of(2), {"p0": []}, 1, table="rb")
    ledger = CommitLedger(f"sqlite:///{tmp_path}/ledger.db")
    with pytest.raises(ConfigurationError, match=r"state 'totals' .* is fed by window 'win'"):
        rebuild_states(topology, ledger, 1, 2, states=["totals"])
