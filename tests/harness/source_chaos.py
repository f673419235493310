"""The source-chaos run's command line (``bash scripts/source-chaos.sh``): seeded schedules of
:mod:`tests.harness.source_chaos_schedule` for the database table source, in each mode
(transactional, opaque) and for the transactional file log, state backend (SQLite;
PostgreSQL: ``TRIDENT_PG_URL``) and runtime (in-process; Spark: a local session, PostgreSQL
ranges read by the executors through JDBC, files read by Spark; a small batch is read by the
driver as by default, unless ``spark-tasks``: every range by Spark's tasks)::

    python -m tests.harness.source_chaos --seed S --batches N
        [--runtime local|spark|spark-tasks|both] [--backend sqlite|postgresql|both]
        [--mode transactional|opaque|both] [--profile base|replay]
        [--source table|file_log|kafka|both]

``--source kafka`` (issues 35 and 36) runs the Kafka schedule (:mod:`tests.harness.kafka_chaos`):
``KafkaSpout`` (transactional) and ``OpaqueKafkaSpout`` over a topic of a broker the schedule
starts, kills and restarts itself, into the SQL states and a Kafka sink checked record by record
(``both`` is the table and the file log, as before).

``--profile replay`` (issue 32) runs the table source's replay profile instead: committed txids
replayed (older ones too) through the lifecycle and into each state, deployments with another
``parallelism_hint``, batches of 1 to 4,000 rows, and in transactional mode the Iceberg and Delta
sinks beside the SQL states (:meth:`SourceChaosConfig.replay_profile`).

The coordinator is ZooKeeper (``TRIDENT_ZK_HOSTS``) when set, else a memory store. Exit code 0
when every schedule found 0 keys different from its reference and no broken invariant.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from tests.harness.source_chaos_schedule import (
    MODES,
    SourceChaosConfig,
    SourceChaosReport,
    run_source_chaos,
)

__all__ = ["main"]


@contextlib.contextmanager
def spark_process(*, tasks_read: bool = False) -> Iterator[Any]:
    """``process(steps, txid)`` on a local Spark session (the JDBC driver on its spark.jars).
    ``tasks_read``: every range read by Spark's tasks, none by the driver (``read_here_bytes``
    and ``read_here_records`` 0: the runtime ``spark-tasks``), where by default a small batch
    is read by the driver as a deployment's default does."""
    from airflow_trident.batch.on_spark import process_on_spark
    from airflow_trident.runtime.spark.session import local_session
    from tests.harness.jars import require_jars, spark_jars_conf
    from tests.harness.jvm import quick_jit_conf

    require_jars("spark")
    spark = local_session(
        "local[2]", shuffle_partitions=4, app_name="source-chaos",
        conf=quick_jit_conf(spark_jars_conf()),  # C1 only: tests/harness/jvm.py
    )  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    try:
        limit = 0 if tasks_read else None
        yield lambda steps, txid: process_on_spark(
            steps, spark, txid, 0.0, read_here_bytes=limit, read_here_records=limit
        )
    finally:
        spark.stop()


@contextlib.contextmanager
def coordinator(name: str) -> Iterator[Any]:
    """A ZooKeeper coordinator store when ``TRIDENT_ZK_HOSTS`` is set, else ``None`` (memory)."""
    hosts = os.environ.get("TRIDENT_ZK_HOSTS")
    if not hosts:
        yield None
        return
    from airflow_trident.coordination.client import ZkConfig, connect
    from airflow_trident.coordination.paths import CoordinatorPaths
    from airflow_trident.coordination.store import CoordinatorStore

    client = connect(ZkConfig(hosts=hosts, root="/trident_source_chaos", timeout=30.0))
    store = CoordinatorStore(client, CoordinatorPaths("/trident_source_chaos", name))
    try:
        yield store
    finally:
        with contextlib.suppress(Exception):
            store.delete_all()
        client.stop()
        client.close()


def run_all(
    seed: int,
    batches: int,
    runtimes: Sequence[str],
    backends: Sequence[str],
    modes: Sequence[str],
    sources: Sequence[str] = ("table", "file_log"),
    profile: str = "base",
) -> list[SourceChaosReport]:
    if profile == "replay":
        sources = ("table",)
    cases = [(s, m) for s in sources for m in modes if s != "file_log" or m == "transactional"]
    reports = []
    for runtime in runtimes:
        with contextlib.ExitStack() as stack:
            process = None
            if runtime != "local":
                process = stack.enter_context(spark_process(tasks_read=runtime == "spark-tasks"))
            for backend in backends:
                for source, mode in cases:
                    work = stack.enter_context(tempfile.TemporaryDirectory(prefix="chaos-"))
                    url = (
                        os.environ["TRIDENT_PG_URL"]
                        if backend == "postgresql"
                        else f"sqlite:///{work}/chaos.db"
                    )
                    config = (
                        SourceChaosConfig.replay_profile(seed, mode, batches=batches)
                        if profile == "replay"
                        else SourceChaosConfig(seed=seed, mode=mode, source=source, batches=batches)
                    )
                    kind = "replay" if profile == "replay" else source
                    name = f"chaos_{uuid.uuid4().hex[:8]}"
                    with coordinator(name) as store:
                        reports.append(
                            run_source_chaos(
                                config, state_url=url, staging=f"{work}/staging", store=store,
                                process=process, label=f"{kind}/{runtime}/{backend}",
                            )
                        )  # fmt: skip
    return reports


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument(
        "--runtime", choices=["local", "spark", "spark-tasks", "both"], default="both",
        help="spark: small batches read by the driver (the default limits); spark-tasks: every "
        "range read by Spark's tasks",
    )  # fmt: skip
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--mode", choices=[*MODES, "both"], default="both")
    parser.add_argument("--source", choices=["table", "file_log", "kafka", "both"], default="both")
    parser.add_argument("--profile", choices=["base", "replay"], default="base")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    for noisy in ("airflow_trident", "py4j"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    runtimes = ["local", "spark"] if args.runtime == "both" else [args.runtime]
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    if "postgresql" in backends and not os.environ.get("TRIDENT_PG_URL"):
        print("TRIDENT_PG_URL unset: source scripts/env.sh (PostgreSQL)", file=sys.stderr)
        return 2
    modes = list(MODES) if args.mode == "both" else [args.mode]
    sources = ["table", "file_log"] if args.source == "both" else [args.source]
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    reports = run_all(seed, args.batches, runtimes, backends, modes, sources, args.profile)
    print(f"\nsummary (started {started}, seed {seed}, profile {args.profile})")
    for r in reports:
        if r.config.source == "kafka":
            print(f"  {r.label} {r.config.mode} faults: {dict(sorted(r.faults.items()))}")
            print(f"  {r.label} {r.config.mode} refused: {dict(sorted(r.refused.items()))}")
    for r in reports:
        unit = {"file_log": "files", "kafka": "records"}.get(r.config.source, "rows")
        kafka = r.config.source == "kafka"
        print(
            f"  {r.label:<27} mode={r.config.mode:<13} seed={r.config.seed} batches={r.batches} "
            f"{unit}={r.rows} faults={sum(r.faults.values())} "
            f"refused={sum(r.refused.values())} keys different={len(r.differences)} "
            + (f"rows different={r.rows_different} " if r.config.sinks else "")
            + (
                f"lost(opaque)={r.lost} sink records={r.sink_records} sink records different="
                f"{r.rows_different} "
                if kafka
                else ""
            )
            + f"violations={len(r.violations)} ({r.elapsed_s:.0f}s)"
        )
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
