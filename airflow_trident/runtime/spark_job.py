"""The Spark application of the process step: one batch of one topology.

``spark-submit airflow_trident/runtime/spark_job.py --topology pkg.mod:attr --txid N
--staging-root DIR --zk-hosts HOSTS [--zk-root /trident] [--zk-chroot /x] [--zk-user U]``

It reads the batch metadata from ZooKeeper, records a new attempt, emits the batch, runs the
plan with :mod:`airflow_trident.runtime.spark` and stages the results (Parquet, one file per
output partition) plus the manifest. Secrets come from the environment, never the command line:
``TRIDENT_ZK_PASSWORD`` (ZooKeeper digest) and ``TRIDENT_STATE_URL`` (state database).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.coordinator import BatchPlan
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.runtime.reference import load_topology
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.runtime.steps import BatchSteps

if TYPE_CHECKING:
    from airflow_trident.runtime.spark import SparkProcessResult

__all__ = ["main", "stage_frames"]

log = logging.getLogger("airflow_trident.spark_job")


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Process one Trident batch on Spark.")
    parser.add_argument("--topology", required=True, help="package.module:attribute")
    parser.add_argument("--txid", type=int, required=True)
    parser.add_argument("--staging-root", required=True)
    parser.add_argument("--zk-hosts", required=True)
    parser.add_argument("--zk-root", default="/trident")
    parser.add_argument("--zk-chroot", default=None)
    parser.add_argument("--zk-user", default=None)
    parser.add_argument("--emit-wait", type=float, default=600.0)
    return parser.parse_args(argv)


def stage_frames(
    staging: StagingArea, plan: BatchPlan, result: SparkProcessResult
) -> dict[str, Any]:
    """Write each state's staged DataFrame as Parquet (Spark writes the partitions), then the
    manifest (last) listing every file with its row count (read from the Parquet footers)."""
    import pyarrow.parquet as pq

    from airflow_trident.runtime.spark.compile import col

    filesystem, _ = staging.filesystem()
    directory = staging.path(plan.attempt)
    states: dict[str, dict[str, Any]] = {}
    for name, staged in result.staged.items():
        path = f"{directory}/{name}"
        frame = staged.frame.select(*[col(f) for f in staged.fields])
        result.run(_writer(frame, _uri(staging, path)))
        files = []
        for info in sorted(filesystem.get_file_info(_selector(path)), key=lambda i: i.path):
            if info.base_name.endswith(".parquet"):
                rows = pq.read_metadata(info.path, filesystem=filesystem).num_rows
                files.append({"path": info.path, "rows": rows})
        states[name] = {
            "kind": staged.kind,
            "fields": list(staged.fields),
            "files": files,
            "pickled": sorted(staged.pickled),
        }
    return staging.write_manifest(plan.attempt, result.emitted, states, plan.metas)


def _writer(frame: Any, uri: str) -> Any:
    def write() -> None:
        frame.write.mode("overwrite").parquet(uri)

    return write


def _selector(path: str) -> Any:
    from pyarrow import fs

    return fs.FileSelector(path, allow_not_found=True)


def _uri(staging: StagingArea, path: str) -> str:
    if "://" in staging.root:
        scheme = staging.root.split("://", 1)[0]
        return f"{scheme}://{path}" if not path.startswith(f"{scheme}://") else path
    return f"file://{path}"


def main(argv: Sequence[str] | None = None) -> int:
    """Process one batch; exit status 0 when staged."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = _args(argv)
    topology = load_topology(args.topology)
    config = ZkConfig(
        hosts=args.zk_hosts,
        chroot=args.zk_chroot,
        root=args.zk_root,
        username=args.zk_user,
        password=os.environ.get("TRIDENT_ZK_PASSWORD") if args.zk_user else None,
    )
    client = connect(config)
    started = time.monotonic()
    try:
        store = CoordinatorStore(client, CoordinatorPaths(config.root, topology.name))
        steps = BatchSteps(topology, store, StagingArea(args.staging_root, topology.name))
        plan = steps.new_attempt(args.txid)
        log.info("txid %d attempt %d: emitting", plan.txid, plan.attempt.attempt_id)
        sources = steps.emit(plan, wait_s=args.emit_wait)
        from airflow_trident.runtime.spark import SparkBatchProcessor
        from airflow_trident.runtime.spark.session import spark_session

        spark = spark_session(f"trident-{topology.name}-{plan.txid}")
        with SparkBatchProcessor(topology).process(spark, plan.txid, sources) as result:
            manifest = stage_frames(steps.staging, plan, result)
        log.info(
            "txid %d attempt %d staged in %.1fs: %s",
            plan.txid,
            plan.attempt.attempt_id,
            time.monotonic() - started,
            {n: sum(f["rows"] for f in s["files"]) for n, s in manifest["states"].items()},
        )
        return 0
    finally:
        client.stop()
        client.close()


if __name__ == "__main__":
    sys.exit(main())
