"""The seed's word count, run in-process on the real coordinator (ZooKeeper) and SQLite state.

Each batch is one transaction: the coordinator binds a run to a txid and stores the spout's
metadata in ZooKeeper, the emitter emits the sentences, the words are counted per batch, and the
partial counts are applied to transactional state strictly in txid order. Half-way through, a
batch "crashes" after its state commit but before the coordinator marks it committed; it is then
replayed under the same txid, and the counts do not double.

Run it with ``bash scripts/main.sh`` (starts ZooKeeper first) or::

    python -m airflow_trident.examples.word_count --batches 4
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any

from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.coordinator import BatchPlan, TransactionalCoordinator
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.spout_state import ZkPartitionState
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.spout.partitioned import PartitionedTransactionalSpoutExecutor
from airflow_trident.state.base import StateType
from airflow_trident.state.combine import CombineOp
from airflow_trident.state.map.base import MapState
from airflow_trident.state.sql import sql_state

__all__ = ["SENTENCES", "main", "run_batch"]

log = logging.getLogger("word_count")

SENTENCES = {
    "p0": [
        ("the cow jumped over the moon",),
        ("the man went to the store and bought some candy",),
        ("four score and seven years ago",),
    ],
    "p1": [
        ("how many apples can you eat",),
        ("to be or not to be the person",),
        ("the moon is made of cheese",),
    ],
}


def count_words(tuples: Sequence[tuple[Any, ...]]) -> Counter[str]:
    """The batch's partial counts (what the processing step computes)."""
    return Counter(word for (sentence,) in tuples for word in sentence.split())


def run_batch(
    coordinator: TransactionalCoordinator,
    counts: MapState,
    run_id: str,
    *,
    crash_before_coordinator_commit: bool = False,
) -> tuple[BatchPlan, Counter[str]]:
    """Begin, emit, count and commit one batch; optionally crash after the state commit."""
    plan = coordinator.begin(run_id=run_id)
    partial = count_words(coordinator.emit(plan, "sentences"))
    keys = [(w,) for w in partial]

    def apply() -> None:
        counts.multi_combine(keys, list(partial.values()), CombineOp.SUM)

    if crash_before_coordinator_commit:
        counts.begin_commit(plan.txid)
        apply()
        counts.commit(plan.txid)
        return plan, partial
    coordinator.commit(plan, [(counts, apply)])
    coordinator.success(plan.txid)
    return plan, partial


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; return 0 when the final counts equal a recount of every emitted word."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--zk-hosts", default=os.environ.get("TRIDENT_ZK_HOSTS", "127.0.0.1:2181"))
    parser.add_argument("--state-url", default="sqlite:///.work/word_count.db")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.state_url.startswith("sqlite:///"):
        os.makedirs(
            os.path.dirname(args.state_url.removeprefix("sqlite:///")) or ".", exist_ok=True
        )

    topology = f"word_count_{uuid.uuid4().hex[:8]}"
    client = connect(ZkConfig(hosts=args.zk_hosts))
    store = CoordinatorStore(client, CoordinatorPaths("/trident", topology))
    spout = PartitionedTransactionalSpoutExecutor(
        MemoryTransactionalSpout(SENTENCES, ["sentence"], take_per_batch=1),
        ZkPartitionState(store, "sentences"),
    )
    coordinator = TransactionalCoordinator(store, {"sentences": spout})
    factory = sql_state(
        args.state_url,
        topology,
        StateType.TRANSACTIONAL,
        key_fields=("word",),
        value_type="bigint",
    )
    counts = factory.make_state()
    expected: Counter[str] = Counter()
    try:
        for i in range(1, args.batches + 1):
            crash = i == 2
            plan, partial = run_batch(
                coordinator, counts, f"demo__{i}", crash_before_coordinator_commit=crash
            )
            if crash:
                print(
                    f"txid {plan.txid}: state committed, then the task 'crashed' "
                    f"before ZooKeeper's commit (committed txid still "
                    f"{store.committed_txid()}); replaying the same run"
                )
                plan, partial = run_batch(coordinator, counts, f"demo__{i}")
            expected += partial
            print(
                f"txid {plan.txid} attempt {plan.attempt.attempt_id}: "
                f"{sum(partial.values())} words, committed txid {store.committed_txid()}"
            )
        words = sorted(expected)
        got = dict(zip(words, counts.multi_get([(w,) for w in words]), strict=True))
        print("counts:", ", ".join(f"{w}={got[w]}" for w in words))
        ok = got == dict(expected)
        print("OK: no batch counted twice" if ok else f"MISMATCH: expected {dict(expected)}")
        return 0 if ok else 1
    finally:
        store.delete_all()
        client.stop()


if __name__ == "__main__":
    sys.exit(main())
