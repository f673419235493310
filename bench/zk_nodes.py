"""Benchmark: the topology's ZooKeeper znodes after 1,000 txids vs after 10 (target <= 1.1x).

Usage::

    eval "$(bash scripts/services.sh env)"
    .venv/bin/python bench/zk_nodes.py [--small 10] [--large 1000] [--keep-txids 16]
        [--keep-runs 1000]

A small topology (a memory transactional spout, a count in memory state) runs its batches
in-process with :class:`~airflow_trident.batch.steps.BatchSteps` against the real ZooKeeper
(``TRIDENT_ZK_HOSTS``), each batch bound to a run id as Airflow gives one
(``scheduled__<date>``). After ``--small`` batches and again after ``--large`` the znodes under
the topology's base path are counted (recursively, the base included), and broken down by the
coordinator's first-level children. The last line is ``ratio=<large/small>``.

The counts stop growing once txids pass the keep bounds: metadata, attempts and commit markers
for ``keep_txids`` txids, run bindings and their txid -> runs index for ``keep_runs`` txids. With
``--small`` below a bound the ratio measures how far the topology is from that steady state, not
growth: pass ``--keep-runs`` (and ``--keep-txids``) at or below ``--small`` to see the plateau.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections import Counter as Tally
from datetime import UTC, datetime, timedelta

from kazoo.client import KazooClient

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.operation import Count
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology

ROOT = "/trident_bench"


def count_znodes(client: KazooClient, path: str, tally: Tally[str], group: str = "") -> int:
    """Count ``path`` and every node below it; tally them by their group (first level)."""
    tally[group or "(base)"] += 1
    total = 1
    for child in client.get_children(path):
        below = group or child
        if group == "coordinator" or (not group and child == "coordinator"):
            below = f"coordinator/{child}" if group else "coordinator"
        total += count_znodes(client, f"{path}/{child}", tally, below)
    return total


def steps_for(store: CoordinatorStore, batches: int, keep_txids: int, keep_runs: int) -> BatchSteps:
    t = TridentTopology(store.paths.topology)
    spout = MemoryTransactionalSpout({"p0": [(str(i % 7),) for i in range(batches)]}, ["x"], 1)
    t.new_stream("xs", spout).persistent_aggregate(
        memory_state(f"{t.name}_n", "transactional"), Count(), ["n"], name="n"
    )
    steps = BatchSteps(t, store, keep_txids=keep_txids)
    steps.ctx.coordinator.keep_runs = keep_runs
    return steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument("--large", type=int, default=1000)
    parser.add_argument("--keep-txids", type=int, default=16)
    parser.add_argument("--keep-runs", type=int, default=1000)
    args = parser.parse_args()
    hosts = os.environ.get("TRIDENT_ZK_HOSTS")
    if not hosts:
        print('TRIDENT_ZK_HOSTS unset: eval "$(bash scripts/services.sh env)"', file=sys.stderr)
        return 2
    client = connect(ZkConfig(hosts=hosts, root=ROOT, timeout=10.0))
    store = CoordinatorStore(client, CoordinatorPaths(ROOT, f"zk_nodes_{uuid.uuid4().hex[:8]}"))
    steps = steps_for(store, args.large, args.keep_txids, args.keep_runs)
    day = datetime(2026, 1, 1, tzinfo=UTC)
    counts: dict[int, int] = {}
    try:
        started = time.perf_counter()
        for i in range(1, args.large + 1):
            run_id = f"scheduled__{(day + timedelta(minutes=i)).isoformat()}"
            result = steps.run_batch(run_id)
            assert result.txid == i, (i, result)
            assert result.committed, (i, result)
            if i in (args.small, args.large):
                tally: Tally[str] = Tally()
                counts[i] = count_znodes(client, store.paths.base, tally)
                groups = " ".join(f"{k}={v}" for k, v in sorted(tally.items()))
                print(f"after {i} txids: znodes={counts[i]} ({groups})", flush=True)
        elapsed = time.perf_counter() - started
        assert steps.query_state("n").get() == args.large
        each_ms = elapsed / args.large * 1000
        print(
            f"keep_txids={args.keep_txids} keep_runs={args.keep_runs}; "
            f"{args.large} batches in {elapsed:.1f} s ({each_ms:.0f} ms each)"
        )
        print(f"ratio={counts[args.large] / counts[args.small]:.3f}")
    finally:
        store.delete_all()
        client.stop()
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
