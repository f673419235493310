"""The Spark application of the process step: one batch of one topology.

``spark-submit airflow_trident/batch/spark_job.py --topology pkg.mod:attr --txid N
--staging-root DIR --zk-hosts HOSTS [--zk-root /trident] [--zk-chroot /x] [--zk-user U]
[--read-here-bytes N] [--commit]``

A thin ``__main__`` over :mod:`airflow_trident.batch.on_spark`: it reads the batch metadata
from ZooKeeper, records a new attempt, emits the batch, runs the plan with
:mod:`airflow_trident.runtime.spark` and stages the results (uncompressed Parquet, one file per
output partition) plus the manifest. Its command line is built by
:func:`airflow_trident.hooks.spark.job_arguments` (the ``spark-submit`` route).

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
import sys
import time
from collections.abc import Sequence

from airflow_trident.batch.job_report import reporting_errors
from airflow_trident.batch.lifecycle import zookeeper_batch_steps
from airflow_trident.batch.on_spark import commit_on_spark, process_on_spark
from airflow_trident.coordination.client import ZkConfig, connect, with_security_from_env
from airflow_trident.runtime.reference import load_topology
from airflow_trident.state.sql.factory import STATE_URL_ENV

__all__ = ["main"]

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
        "--read-here-records", type=int, default=None, help="[trident] spark_read_here_records"
    )
    parser.add_argument(
        "--no-inline", action="store_true", help="[trident] inline = false: nothing is inlined"
    )
    parser.add_argument(
        "--commit", action="store_true", help="commit the staged batch (commit_mode='spark')"
    )
    return parser.parse_args(argv)


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
                read_here_bytes=args.read_here_bytes, read_here_records=args.read_here_records,
                inline=False if args.no_inline else None,
            )  # fmt: skip
            shown = {k: summary.get(k) for k in ("applied", "records_in", "keys_written")}
            log.info(
                "txid %d commit done in %.1fs: %s", args.txid, time.monotonic() - started, shown
            )
        else:
            process_on_spark(
                steps, spark, args.txid, args.emit_wait, read_here_bytes=args.read_here_bytes,
                read_here_records=args.read_here_records, inline=False if args.no_inline else None,
            )  # fmt: skip
            log.info("txid %d processed in %.1fs", args.txid, time.monotonic() - started)
        return 0
    finally:
        client.stop()
        client.close()


if __name__ == "__main__":
    sys.exit(reporting_errors(main, sys.argv[1:]))
