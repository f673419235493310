"""A batch's phases with Spark as the driver's engine: process (emit, run the plan, stage) and
commit (the staged partitions applied by Spark tasks), on any SparkSession — a Connect
server's (:class:`~airflow_trident.batch.routes.OnSpark`, this process is the driver's client)
or the ``spark-submit`` job's own (:mod:`airflow_trident.batch.spark_job`, its driver).

The order check, the stale-opaque check, ZooKeeper's compare-and-set and the ledger row are the
lifecycle's (:meth:`BatchSteps.commit <airflow_trident.batch.steps.BatchSteps.commit>`) wherever
the driver runs.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.coordinator import BatchPlan
from airflow_trident.errors import BatchFailedError
from airflow_trident.runtime.staging import StagingArea

if TYPE_CHECKING:
    from airflow_trident.runtime.spark import SparkProcessResult

__all__ = ["SparkStager", "commit_on_spark", "process_on_spark", "stage_frames"]

log = logging.getLogger("airflow_trident.spark_job")


def stage_frames(
    staging: StagingArea, plan: BatchPlan, result: SparkProcessResult
) -> dict[str, Any]:
    """Write each state's staged DataFrame as uncompressed Parquet (Spark writes the
    partitions), then the manifest (last) listing every file with its row count (read from the
    Parquet footers).

    A small batch's aggregate (its input read by the driver, no fixed commit partitions,
    columns of simple types: :meth:`SparkProcessResult.staged_here
    <airflow_trident.runtime.spark.SparkProcessResult.staged_here>`) is collected and written
    here instead, a file per Spark partition as Spark's writer writes them: a Spark write job
    costs ~0.1 s more than the collect, a quarter of a 10,000-record batch's Spark time.

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
        here = result.staged_here(name)
        if here is not None:
            files = _write_here(staging, path, here)
        else:
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


def _write_here(staging: StagingArea, path: str, parts: dict[int, Any]) -> list[dict[str, Any]]:
    """A staged state's rows, collected by Spark partition, as the files Spark's writer would
    write under ``path`` (one per partition, ``part-<i>-...``, in order), which then holds
    nothing else (a retry of the attempt writes them again)."""
    import pyarrow.parquet as pq

    filesystem, _ = staging.filesystem()
    filesystem.create_dir(path, recursive=True)
    filesystem.delete_dir_contents(path, missing_dir_ok=True)
    files = []
    for index, table in sorted(parts.items()):
        target = f"{path}/part-{index:05d}-here.parquet"
        pq.write_table(table, target, filesystem=filesystem, compression="none")
        files.append({"path": target, "rows": table.num_rows})
    return files


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


class SparkStager:
    """The plan run on ``spark`` by :class:`~airflow_trident.runtime.spark.SparkBatchProcessor`,
    its results staged by Spark's writer (:func:`stage_frames`): the process phase's
    :class:`~airflow_trident.batch.process.Stager` on Spark."""

    def __init__(
        self,
        steps: BatchSteps,
        spark: Any,
        *,
        read_here_bytes: int | None = None,
        read_here_records: int | None = None,
        inline: bool | None = None,
    ) -> None:
        from airflow_trident.runtime.spark import SparkBatchProcessor

        self.steps = steps
        self.spark = spark
        self.processor = SparkBatchProcessor(
            steps.topology, states=steps.states, read_here_bytes=read_here_bytes,
            read_here_records=read_here_records, inline=inline,
        )  # fmt: skip

    def stage(self, plan: BatchPlan, sources: dict[str, dict[str, list[Any]]]) -> dict[str, Any]:
        """Process on Spark and stage (see :class:`~airflow_trident.batch.process.Stager`)."""
        with self.processor.process(self.spark, plan.txid, sources) as result:
            return stage_frames(self.steps.staging, plan, result)


def process_on_spark(
    steps: BatchSteps,
    spark: Any,
    txid: int,
    emit_wait: float,
    *,
    read_here_bytes: int | None = None,
    read_here_records: int | None = None,
    inline: bool | None = None,
) -> dict[str, Any]:
    """Emit batch ``txid`` (a new attempt), run its plan on ``spark`` and stage it; return the
    manifest. ``read_here_bytes``, ``read_here_records``, ``inline``: see
    :class:`~airflow_trident.runtime.spark.SparkBatchProcessor` (``None``: its default)."""
    stager = SparkStager(
        steps, spark, read_here_bytes=read_here_bytes, read_here_records=read_here_records,
        inline=inline,
    )  # fmt: skip
    return steps.processing.run(txid, stager, wait_s=emit_wait)


def commit_on_spark(
    steps: BatchSteps,
    spark: Any,
    reference: str,
    txid: int,
    emit_wait: float,
    *,
    read_here_bytes: int | None = None,
    read_here_records: int | None = None,
    inline: bool | None = None,
) -> dict[str, Any]:
    """Commit staged batch ``txid`` with its partitions applied by Spark tasks; write and
    return the commit summary (a stale staged batch is processed again, as
    :func:`process_on_spark` with ``read_here_bytes`` and ``read_here_records`` does)."""
    from airflow_trident.runtime.spark.commit import SparkBatchApplier

    def reprocess(stale: int) -> dict[str, Any]:
        return process_on_spark(
            steps, spark, stale, emit_wait, read_here_bytes=read_here_bytes,
            read_here_records=read_here_records, inline=inline,
        )  # fmt: skip

    applier = SparkBatchApplier(spark, reference, steps.staging, reprocess, steps.states)
    summary = steps.commit(txid, applier=applier)
    steps.staging.write_commit_summary(txid, summary)
    return summary
