"""Benchmark: a batch over 2,048 partitions against one over 4, at the same records per batch
(issue 55: coordinator phases within 1.5x, the whole batch within 2x).

Usage::

    eval "$(bash scripts/services.sh env)"
    flock /tmp/heavy.lock .venv/bin/python bench/scale_partitions.py [--rounds 7]
        [--small 4] [--large 2048] [--records 8192] [--kind transactional|opaque]
        [--source memory|file-log]

Two topologies, each a partitioned spout (``--kind``; ``--source``: the memory spout, or the
file log over one JSON-lines file per partition and batch in a temporary directory) feeding a
grouped count in memory state, run their batches in-process through
:class:`~airflow_trident.batch.steps.BatchSteps` on the real ZooKeeper (``TRIDENT_ZK_HOSTS``),
each batch bound to a run id. The same ``--records`` are spread over ``--small`` or ``--large``
partitions. After a warm-up batch each, rounds
alternate between the sizes; every batch's phases are timed (begin, emit, process, commit,
success) and its ZooKeeper requests and bytes written counted (a multi-op transaction is one
request). Printed per size: the median and the spread (min-max) of each, the largest znode of
the topology afterwards; then ``ratio_<what>=`` lines of large against small, the last one
``ratio=<batch large/small>``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.harness

from kazoo.client import KazooClient

from airflow_trident.batch.commit import MemoryBatch
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.operation import Count
from airflow_trident.spout.file_log import FileLogSpout, OpaqueFileLogSpout
from airflow_trident.spout.memory import MemoryOpaqueSpout, MemoryTransactionalSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology
from tests.harness.zk_requests import RequestCounter

ROOT = "/trident_bench_partitions"
PHASES = ("begin", "emit", "process", "commit", "success")
COORDINATOR = ("begin", "commit", "success")


def file_log(root: Path, rows: dict[str, list[tuple[str]]], take: int, kind: str) -> Any:
    """A file log of ``rows``: one file of ``take`` lines per partition and batch."""
    for partition, words in rows.items():
        (root / partition).mkdir(parents=True)
        for b in range(0, len(words), take):
            lines = "".join(json.dumps({"word": w}) + "\n" for (w,) in words[b : b + take])
            (root / partition / f"{b // take:06d}.jsonl").write_text(lines)
    spout_class = OpaqueFileLogSpout if kind == "opaque" else FileLogSpout
    return spout_class(root, ["word"], max_files=1)


def topology(
    store: CoordinatorStore,
    partitions: int,
    records: int,
    batches: int,
    kind: str,
    source: str = "memory",
    work: Path | None = None,
) -> BatchSteps:
    take = max(1, records // partitions)
    rows = {
        f"p{i:05d}": [(f"w{(i + j) % 97}",) for j in range(take * batches)]
        for i in range(partitions)
    }
    if source == "file-log":
        assert work is not None
        spout = file_log(work / f"log{partitions}", rows, take, kind)
    else:
        spout_class = MemoryOpaqueSpout if kind == "opaque" else MemoryTransactionalSpout
        spout = spout_class(rows, ["word"], take)
    t = TridentTopology(store.paths.topology)
    t.new_stream("words", spout).group_by(["word"]).persistent_aggregate(
        memory_state(f"{store.paths.topology}_n", kind), Count(), ["n"], name="counts"
    )
    return BatchSteps(t, store)


def one_batch(steps: BatchSteps, run_id: str, counter: RequestCounter) -> dict[str, float]:
    """One batch, phase by phase: seconds per phase, ZooKeeper requests and bytes."""
    spent: dict[str, float] = {}
    requests = written = 0

    def phase(name: str, started: float) -> None:
        nonlocal requests, written
        spent[name] = time.perf_counter() - started
        n, b = counter.reset()
        requests += n
        written += b
        spent[f"zk {name}"] = n

    counter.reset()
    started = time.perf_counter()
    txid = int(steps.begin(run_id)["txid"])
    phase("begin", started)
    started = time.perf_counter()
    plan = steps.new_attempt(txid)
    sources = steps.emit(plan)
    phase("emit", started)
    started = time.perf_counter()
    result = steps.processor.process(txid, sources)
    phase("process", started)
    started = time.perf_counter()
    batch = MemoryBatch(steps.commits, result)
    summary = steps.commits.commit_plan(plan, batch.manifest(), batch, reprocess_stale=True)
    assert summary["applied"], summary
    phase("commit", started)
    started = time.perf_counter()
    steps.success(txid)
    phase("success", started)
    spent["batch"] = sum(spent[p] for p in PHASES)
    spent["coordinator"] = sum(spent[p] for p in COORDINATOR)
    spent["zk requests"] = requests
    spent["zk bytes"] = written
    spent["records"] = batch.result.records_in
    return spent


def largest_znode(client: KazooClient, path: str) -> tuple[int, int]:
    """``(znodes, largest data in bytes)`` under ``path``."""
    data, _ = client.get(path)
    count, largest = 1, len(data or b"")
    for child in client.get_children(path):
        n, big = largest_znode(client, f"{path}/{child}")
        count, largest = count + n, max(largest, big)
    return count, largest


def spread(values: list[float], unit: str = "s") -> str:
    med = statistics.median(values)
    if unit == "s":
        return f"{med:.3f} s ({min(values):.3f}-{max(values):.3f})"
    return f"{med:,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--small", type=int, default=4)
    parser.add_argument("--large", type=int, default=2048)
    parser.add_argument("--records", type=int, default=8192)
    parser.add_argument("--kind", choices=("transactional", "opaque"), default="transactional")
    parser.add_argument("--source", choices=("memory", "file-log"), default="memory")
    args = parser.parse_args()
    hosts = os.environ.get("TRIDENT_ZK_HOSTS")
    if not hosts:
        print('TRIDENT_ZK_HOSTS unset: eval "$(bash scripts/services.sh env)"', file=sys.stderr)
        return 2
    client = connect(ZkConfig(hosts=hosts, root=ROOT, timeout=10.0))
    counter = RequestCounter(client)
    sizes = (args.small, args.large)
    stores = {
        n: CoordinatorStore(client, CoordinatorPaths(ROOT, f"p{n}_{uuid.uuid4().hex[:8]}"))
        for n in sizes
    }
    batches = args.rounds + 2
    seen: dict[int, dict[str, list[float]]] = {n: defaultdict(list) for n in sizes}
    first: dict[int, float] = {}
    work = Path(tempfile.mkdtemp(prefix="trident-scale-partitions-"))
    try:
        steps = {
            n: topology(stores[n], n, args.records, batches, args.kind, args.source, work)
            for n in sizes
        }
        for n in sizes:  # warm-up: the first batch of each
            first[n] = one_batch(steps[n], "warm-up", counter)["batch"]
        for r in range(args.rounds):
            for n in sizes if r % 2 == 0 else reversed(sizes):
                for key, value in one_batch(steps[n], f"round-{r}", counter).items():
                    seen[n][key].append(value)
        print(f"{args.kind} {args.source} spout, {args.records:,} records per batch, "
              f"{args.rounds} alternating rounds after a warm-up batch each")  # fmt: skip
        largest: dict[int, int] = {}
        for n in sizes:
            znodes, largest[n] = largest_znode(client, stores[n].paths.base)
            s = seen[n]
            print(f"-- {n:,} partitions ({int(statistics.median(s['records'])):,} records "
                  f"per batch; first batch {first[n]:.3f} s)")  # fmt: skip
            for key in ("batch", "coordinator", *PHASES):
                print(f"   {key:<12} {spread(s[key])}")
            for key in ("zk requests", *(f"zk {p}" for p in PHASES), "zk bytes"):
                print(f"   {key:<12} {spread(s[key], unit='n')} per txid")
            print(f"   znodes {znodes:,}, largest {largest[n]:,} B")
        small, large = seen[args.small], seen[args.large]
        for key in ("coordinator", "begin", "commit", "success", "zk requests"):
            ratio = statistics.median(large[key]) / max(statistics.median(small[key]), 1e-9)
            print(f"ratio_{key.replace(' ', '_')}={ratio:.2f}")
        print(f"ratio={statistics.median(large['batch']) / statistics.median(small['batch']):.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for store in stores.values():
            store.delete_all()
        client.stop()
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
