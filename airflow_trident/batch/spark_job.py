"""The Spark application of the process step: one batch of one topology.

``spark-submit airflow_trident/batch/spark_job.py --topology pkg.mod:attr --txid N
--staging-root DIR --zk-hosts HOSTS [--zk-root /trident] [--zk-chroot /x] [--zk-user U]
[--read-here-bytes N] [--commit]``

It reads the batch metadata from ZooKeeper, records a new attempt, emits the batch, runs the
plan with :mod:`airflow_trident.runtime.spark` and stages the results (uncompressed Parquet, one
file per output partition) plus the manifest.

With ``--commit`` it is the commit step of ``commit_mode="spark"`` instead: the driver checks
that txid-1 is committed and the staged batch complete, Spark tasks apply the staged partitions
to the states (:mod:`airflow_trident.runtime.spark.commit`), the driver advances the committed
txid by compare-and-set and writes the commit summary next to the staged batch
(:meth:`~airflow_trident.runtime.staging.StagingArea.write_commit_summary`).

Secrets come from the environment, never the command line: ``TRIDENT_ZK_PASSWORD`` (ZooKeeper
digest) and ``TRIDENT_STATE_URL`` (state database).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_trident.batch.job_report import reporting_errors
from airflow_trident.batch.lifecycle import zookeeper_batch_steps
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.client import ZkConfig, connect, with_security_from_env
from airflow_trident.coordination.coordinator import BatchPlan
from airflow_trident.errors import BatchFailedError
from airflow_trident.runtime.reference import load_topology
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.state.sql.factory import STATE_URL_ENV

if TYPE_CHECKING:
    from airflow_trident.runtime.spark import SparkProcessResult

__all__ = ["commit_on_spark", "main", "process_on_spark", "stage_frames"]

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
    parser.add_argument(
        "--read-here-bytes", type=int, default=None, help="[trident] spark_read_here_bytes"
    )
    parser.add_argument(
        "--no-inline", action="store_true", help="[trident] inline = false: nothing is inlined"
    )
    parser.add_argument(
        "--commit", action="store_true", help="commit the staged batch (commit_mode='spark')"
    )
    return parser.parse_args(argv)


def stage_frames(
    staging: StagingArea, plan: BatchPlan, result: SparkProcessResult
) -> dict[str, Any]:
    """Write each state's staged DataFrame as uncompressed Parquet (Spark writes the
    partitions), then the manifest (last) listing every file with its row count (read from the
    Parquet footers).

    A state whose commit partitions are fixed (``SparkStagedState.partitions``) lists exactly
    that many, in order: Spark's file ``part-<i>-...`` is commit partition ``i``, and a
    partition Spark wrote no file for (it had no rows) is listed with ``"path": None`` — so its
    partition count is the in-process runtime's, whatever Spark's settings and the batch's size.

    Spark's own writer, not a Python function per task: on Spark Connect every session starts
    its own Python workers (seconds), which a plan of built-ins otherwise never needs. No
    compression: the files are read once, by the commit, usually from a local disk."""
    from airflow_trident.runtime.spark.compile import col

    directory = staging.path(plan.attempt)
    states: dict[str, dict[str, Any]] = {}
    for name, staged in result.staged.items():
        path = f"{directory}/{name}"
        frame = staged.frame.select(*[col(f) for f in staged.fields])
        result.run(_writer(frame, _uri(staging, path)))
        files = _staged_files(staging, path, staged.partitions, plan.txid, name)
        states[name] = {
            "kind": staged.kind,
            "fields": list(staged.fields),
            "files": files,
            "partitions": max(1, len(files)),
            "pickled": sorted(staged.pickled),
        }
    return staging.write_manifest(plan.attempt, result.emitted, states, plan.metas, "spark")


def _staged_files(
    staging: StagingArea, path: str, partitions: int | None, txid: int, state: str
) -> list[dict[str, Any]]:
    """The Parquet files Spark wrote under ``path`` with their row counts: in name order, or,
    with fixed ``partitions``, one entry per commit partition (``None`` path: no rows)."""
    import pyarrow.parquet as pq

    filesystem, _ = staging.filesystem()
    files = []
    for info in sorted(filesystem.get_file_info(_selector(path)), key=lambda i: i.path):
        if info.base_name.endswith(".parquet"):
            rows = pq.read_metadata(info.path, filesystem=filesystem).num_rows
            files.append({"path": info.path, "rows": rows})
    if partitions is None:
        return files
    by_index: list[dict[str, Any]] = [{"path": None, "rows": 0} for _ in range(partitions)]
    for entry in files:
        match = _PART.match(entry["path"].rsplit("/", 1)[-1])
        index = int(match.group(1)) if match else -1
        if not 0 <= index < partitions or by_index[index]["path"] is not None:
            msg = (
                f"txid {txid}: Spark staged state {state!r} in {entry['path']}, which is not "
                f"one of its {partitions} commit partitions' files (part-00000.. part-"
                f"{partitions - 1:05d}, one each); nothing was committed"
            )
            raise BatchFailedError(msg)
        by_index[index] = entry
    return by_index


_PART = re.compile(r"part-(\d+)-")


def _writer(frame: Any, uri: str) -> Any:
    def write() -> None:
        # one file per Spark partition (spark.sql.files.maxRecordsPerFile would split them)
        writer = frame.write.mode("overwrite").option("compression", "none")
        writer.option("maxRecordsPerFile", 0).parquet(uri)

    return write


def _selector(path: str) -> Any:
    from pyarrow import fs

    return fs.FileSelector(path, allow_not_found=True)


def _uri(staging: StagingArea, path: str) -> str:
    if "://" in staging.root:
        scheme = staging.root.split("://", 1)[0]
        return f"{scheme}://{path}" if not path.startswith(f"{scheme}://") else path
    return f"file://{path}"


def process_on_spark(
    steps: BatchSteps,
    spark: Any,
    txid: int,
    emit_wait: float,
    *,
    read_here_bytes: int | None = None,
    inline: bool | None = None,
) -> dict[str, Any]:
    """Emit batch ``txid`` (a new attempt), run its plan on ``spark`` and stage it; return the
    manifest. ``read_here_bytes``, ``inline``: see
    :class:`~airflow_trident.runtime.spark.SparkBatchProcessor` (``None``: its default)."""
    from airflow_trident.runtime.spark import SparkBatchProcessor

    plan = steps.new_attempt(txid)
    log.info("txid %d attempt %d: emitting", plan.txid, plan.attempt.attempt_id)
    sources = steps.emit(plan, wait_s=emit_wait)
    processor = SparkBatchProcessor(
        steps.topology, states=steps.states, read_here_bytes=read_here_bytes, inline=inline
    )
    with processor.process(spark, plan.txid, sources) as result:
        manifest = stage_frames(steps.staging, plan, result)
    log.info(
        "txid %d attempt %d staged: %s",
        plan.txid,
        plan.attempt.attempt_id,
        {n: sum(f["rows"] for f in s["files"]) for n, s in manifest["states"].items()},
    )
    return manifest


def commit_on_spark(
    steps: BatchSteps,
    spark: Any,
    reference: str,
    txid: int,
    emit_wait: float,
    *,
    read_here_bytes: int | None = None,
    inline: bool | None = None,
) -> dict[str, Any]:
    """Commit staged batch ``txid`` with its partitions applied by Spark tasks; write and
    return the commit summary (a stale staged batch is processed again, as
    :func:`process_on_spark` with ``read_here_bytes`` does)."""
    from airflow_trident.runtime.spark.commit import SparkBatchApplier

    def reprocess(stale: int) -> dict[str, Any]:
        return process_on_spark(
            steps, spark, stale, emit_wait, read_here_bytes=read_here_bytes, inline=inline
        )

    applier = SparkBatchApplier(spark, reference, steps.staging, reprocess, steps.states)
    summary = steps.commit(txid, applier=applier)
    steps.staging.write_commit_summary(txid, summary)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """Process (or, with ``--commit``, commit) one batch; exit status 0 when done."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = _args(argv)
    topology = load_topology(args.topology)
    config = with_security_from_env(ZkConfig(  # TLS/SASL: a secret, in the environment
        hosts=args.zk_hosts,
        chroot=args.zk_chroot,
        root=args.zk_root,
        username=args.zk_user,
        password=os.environ.get("TRIDENT_ZK_PASSWORD") if args.zk_user else None,
    ))  # fmt: skip
    client = connect(config)
    started = time.monotonic()
    try:
        steps = zookeeper_batch_steps(
            topology,
            client,
            root=config.root,
            staging_root=args.staging_root,
            state_url=os.environ.get(STATE_URL_ENV) or None,
        )
        from airflow_trident.runtime.spark.session import spark_session

        step = "commit" if args.commit else "process"
        spark = spark_session(f"trident-{topology.name}-{args.txid}-{step}")
        if args.commit:
            summary = commit_on_spark(
                steps, spark, args.topology, args.txid, args.emit_wait,
                read_here_bytes=args.read_here_bytes, inline=False if args.no_inline else None,
            )  # fmt: skip
            shown = {k: summary.get(k) for k in ("applied", "records_in", "keys_written")}
            log.info(
                "txid %d commit done in %.1fs: %s", args.txid, time.monotonic() - started, shown
            )
        else:
            process_on_spark(
                steps, spark, args.txid, args.emit_wait, read_here_bytes=args.read_here_bytes,
                inline=False if args.no_inline else None,
            )  # fmt: skip
            log.info("txid %d processed in %.1fs", args.txid, time.monotonic() - started)
        return 0
    finally:
        client.stop()
        client.close()


if __name__ == "__main__":
    sys.exit(reporting_errors(main, sys.argv[1:]))
