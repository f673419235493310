"""Profile: where one Connect-mode batch's time goes, phase by phase (``bench/sss.py``'s work).

Runs ``--rounds`` batches of each size (after a warm-up) through the same lifecycle as
``bench/sss.py``'s *ours* (begin on ZooKeeper, a Spark Connect session, emit, the plan on
Spark, staging, the worker commit into PostgreSQL, success), with every step timed on its own
and every ZooKeeper request counted. After each committed batch, the same batch's plan is run
again on Spark without staging (``toArrow()`` of the staged frame): the Spark job alone, to
split "Spark job + staging". Printed per size: the median, min and max of each phase.

    source scripts/env.sh
    flock /tmp/heavy.lock .venv/bin/python bench/batch_profile.py --rounds 5
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sss  # bench/sss.py: the data, the topology

ZK_ROOT = "/trident_bench_profile"
ZK_CALLS = ("get", "set", "create", "exists", "get_children", "delete", "ensure_path")


class Timer:
    """Seconds per phase name, summed within one batch."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self.zk = 0

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.spent[name] += time.perf_counter() - start

    def wrap(self, owner: Any, attribute: str, name: str) -> None:
        """Time every call of ``owner.attribute`` as phase ``name``."""
        inner: Callable[..., Any] = getattr(owner, attribute)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name):
                return inner(*args, **kwargs)

        object.__setattr__(owner, attribute, timed)  # a frozen dataclass's too

    def count(self, client: Any) -> None:
        """Count ZooKeeper requests (each is a round trip; a transaction is one)."""
        for attribute in ZK_CALLS:
            inner = getattr(client, attribute)

            def counted(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
                self.zk += 1
                return _inner(*args, **kwargs)

            setattr(client, attribute, counted)
        transaction = client.transaction

        def counted_transaction(*args: Any, **kwargs: Any) -> Any:
            tx = transaction(*args, **kwargs)
            commit = tx.commit

            def counted_commit() -> Any:
                self.zk += 1
                return commit()

            tx.commit = counted_commit
            return tx

        client.transaction = counted_transaction


def previous_staging(result: Any, frame: Any, directory: str) -> None:
    """What staging did before: Spark's Parquet writer (snappy, the Hadoop output committer),
    then a listing and every file's footer read for its row count."""
    import pyarrow.parquet as pq
    from pyarrow import fs

    result.run(lambda: frame.write.mode("overwrite").parquet(f"file://{directory}"))
    local = fs.LocalFileSystem()
    for info in local.get_file_info(fs.FileSelector(directory)):
        if info.base_name.endswith(".parquet"):
            pq.ParquetFile(info.path).metadata.num_rows  # noqa: B018


def one_batch(steps: Any, url: str, run_id: str, timer: Timer, kept: Any = None) -> None:
    """One batch, timed; ``kept``: a Connect session kept across batches (else a new one per
    batch, as the process task opens it)."""
    from airflow_trident.batch.on_spark import stage_frames
    from airflow_trident.runtime.spark import SparkBatchProcessor
    from airflow_trident.runtime.spark.session import remote_session

    with timer.phase("begin (ZooKeeper)"):
        txid = int(steps.begin(run_id)["txid"])
    opened = time.perf_counter()
    with remote_session(url) if kept is None else contextlib.nullcontext(kept) as spark:
        timer.spent["session open"] += time.perf_counter() - opened
        with timer.phase("new attempt + emit"):
            plan = steps.begins.new_attempt(txid)
            sources = steps.emit(plan)
        processor = SparkBatchProcessor(steps.topology, states=steps.states)
        with timer.phase("plan on Spark (no job)"):
            result = processor.process(spark, plan.txid, sources)
        with result, timer.phase("Spark job + staging (all)"):
            stage_frames(steps.staging, plan, result)
        with timer.phase("Spark job alone (same plan again, toArrow)"):
            again = processor.process(spark, plan.txid, sources)
            with again:
                frame = next(iter(again.staged.values())).frame
                again.run(frame.toArrow)
        with timer.phase("previous staging (Spark's Parquet writer + footers), same plan"):
            again = processor.process(spark, plan.txid, sources)
            with again:
                frame = next(iter(again.staged.values())).frame
                previous_staging(again, frame, f"{steps.staging.path(plan.attempt)}-previous")
        closing = time.perf_counter()
    timer.spent["session close"] += time.perf_counter() - closing
    with timer.phase("commit (all)"):
        steps.commit(txid)
    with timer.phase("success"):
        steps.success(txid)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", default="small,large")
    parser.add_argument(
        "--keep-session", action="store_true", help="one Connect session for every batch"
    )
    parser.add_argument("--small-words", type=int, default=10_000)
    parser.add_argument("--large-words", type=int, default=5_000_000)
    args = parser.parse_args()
    pg_url, hosts = os.environ.get("TRIDENT_PG_URL"), os.environ.get("TRIDENT_ZK_HOSTS")
    if not pg_url or not hosts:
        print("TRIDENT_PG_URL / TRIDENT_ZK_HOSTS unset: source scripts/env.sh", file=sys.stderr)
        return 2
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import sqlalchemy as sa

    from airflow_trident.batch.lifecycle import zookeeper_batch_steps
    from airflow_trident.coordination.client import ZkConfig, connect
    from tests.harness.connect import running_connect_server

    table = f"bench_profile_{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix="trident-profile-"))
    root = work / "log"
    root.mkdir()
    client = connect(ZkConfig(hosts=hosts, root=ZK_ROOT))
    steps = zookeeper_batch_steps(
        sss.topology(root, table), client, root=ZK_ROOT,
        staging_root=str(work / "staging"), state_url=pg_url,
    )  # fmt: skip
    timer = Timer()
    timer.count(client)
    staging = steps.staging
    for attribute, name in (
        ("verified_manifest", "commit: read + verify manifest"),
        ("read_states", "commit: read staged files back"),
    ):
        timer.wrap(staging, attribute, name)
    timer.wrap(steps, "apply_result", "commit: encode + upsert (PostgreSQL)")
    timer.wrap(steps.store, "mark_commit_started", "commit: mark started (ZooKeeper)")
    if steps.ledger is not None:
        timer.wrap(steps.ledger, "record", "commit: ledger row (PostgreSQL)")
    import pyarrow.parquet as pq

    timer.wrap(pq, "read_metadata", "staging: Parquet footers read")
    timer.wrap(staging, "write_manifest", "staging: manifest write")
    expected: Counter[str] = Counter()
    sizes = {"small": args.small_words, "large": args.large_words}
    index = 0
    try:
        with contextlib.ExitStack() as stack:
            url = stack.enter_context(running_connect_server(work / "connect", quick_jit=False))
            kept = None
            if args.keep_session:
                from airflow_trident.runtime.spark.session import remote_session

                kept = stack.enter_context(remote_session(url))
            print(f"Connect session: {'one kept across batches' if kept else 'new per batch'}")
            for size in [s for s in ("small", "large") if s in args.sizes.split(",")]:
                runs: dict[str, list[float]] = defaultdict(list)
                zk: list[int] = []
                for r in range(args.rounds + 1):
                    index += 1
                    sss.land(root, index, sizes[size], expected)
                    timer.spent.clear()
                    timer.zk = 0
                    started = time.perf_counter()
                    one_batch(steps, url, f"profile-{index}", timer, kept)
                    total = time.perf_counter() - started
                    if r:
                        for name, value in timer.spent.items():
                            runs[name].append(value)
                        runs["per batch (incl. the extra job)"].append(total)
                        zk.append(timer.zk)
                print(f"{size} ({sizes[size]:,} words), {args.rounds} rounds: median [min, max] s")
                for name, values in runs.items():
                    print(f"  {name:52s} {statistics.median(values):.3f} "
                          f"[{min(values):.3f}, {max(values):.3f}]")  # fmt: skip
                print(f"  ZooKeeper requests per batch: {statistics.median(zk):.0f}", flush=True)
        engine = sa.create_engine(pg_url)
        with engine.begin() as conn:
            rows = dict(conn.execute(sa.text(f'SELECT word, val FROM "{table}"')).all())
            conn.execute(sa.text(f'DROP TABLE IF EXISTS "{table}"'))
        engine.dispose()
        print(f"table equals the expected counts: {rows == dict(expected)}")
    finally:
        with contextlib.suppress(Exception):
            steps.store.delete_all()
        client.stop()
        client.close()
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
