"""The commit phase on Spark, for batches too large for one Airflow worker.

:class:`SparkBatchApplier` is a :class:`~airflow_trident.batch.steps.StagedBatchApplier`:
the driver still does what must happen once (the order check, the stale-opaque check, the
compare-and-set of the committed txid: :meth:`BatchSteps.commit
<airflow_trident.batch.steps.BatchSteps.commit>`), while each staged partition of each state
is applied by one Spark task: the task reads its Parquet file (checking the row count the
manifest lists), makes that partition's state (``make_state(index, count)``) and applies the rows
in one state commit with the state's exactly-once rule — the same code as the worker-side commit
(:meth:`StateCommitter.apply_partition
<airflow_trident.runtime.commit.StateCommitter.apply_partition>`).

A failed task may be retried by Spark, a failed job by Airflow: partitions already applied skip
the batch by their stored txids (Trident's rule), so a partial commit is finished exactly once.

Executors load the topology by reference (their Python must import it, as for any PySpark job)
and need the state database: the run's :class:`~airflow_trident.state.binding.StateBinding`
travels inside the task closure (Spark's serialized task, never its conf, command line or logs).
Before the tasks run, the driver puts back the keys of opaque states that an earlier attempt of
the txid wrote and this one does not (see :mod:`airflow_trident.runtime.commit`).

>>> from airflow_trident.runtime.spark.commit import commit_tasks
>>> commit_tasks({"states": {"counts": {"files": [{"rows": 3}, {"rows": 0}]}}})
[CommitTask(state='counts', index=0, count=2), CommitTask(state='counts', index=1, count=2)]
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from airflow_trident.coordination.coordinator import BatchPlan
from airflow_trident.errors import BatchFailedError, TridentError
from airflow_trident.graph import PersistNode
from airflow_trident.runtime.commit import StateCommitter
from airflow_trident.runtime.reference import cached_topology
from airflow_trident.runtime.result import Partitions, StagedState
from airflow_trident.runtime.spark.iceberg import ICEBERG
from airflow_trident.runtime.spark.lakehouse import DELTA, SparkWriter, table_format
from airflow_trident.runtime.spark.python_ops import batch_failure, failure_text
from airflow_trident.runtime.spark.settle import settled_job
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.state.binding import StateBinding

__all__ = ["CommitTask", "SparkBatchApplier", "commit_tasks"]

log = logging.getLogger(__name__)

_SCHEMA = pa.schema(
    [
        pa.field("task", pa.int64()),
        pa.field("rows", pa.int64()),
        pa.field("new_values", pa.binary()),
    ]
)
_DDL = "task long, rows long, new_values binary"


@dataclass(frozen=True)
class CommitTask:
    """One Spark task of the commit: partition ``index`` of ``count`` of ``state``."""

    state: str
    index: int
    count: int


def commit_tasks(manifest: Mapping[str, Any]) -> list[CommitTask]:
    """The tasks of a staged batch: one per staged file of each state (a state with no file
    still gets one, so its state sees the commit, as in the worker-side commit)."""
    tasks = []
    for name, entry in manifest["states"].items():
        count = max(1, len(entry["files"]))
        tasks += [CommitTask(name, i, count) for i in range(count)]
    return tasks


@dataclass(frozen=True)
class _ApplyPartitions:
    """The ``mapInArrow`` function: applies the commit tasks whose ids it receives."""

    topology: str
    staging_root: str
    manifest: Mapping[str, Any]
    tasks: tuple[CommitTask, ...]
    txid: int
    new_values: frozenset[str]
    states: StateBinding

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        try:
            topology = cached_topology(self.topology)
            committer = StateCommitter(topology, self.states)
            staging = StagingArea(self.staging_root, topology.name)
            for batch in batches:
                for task_id in batch.column(0).to_pylist():
                    yield self._apply(committer, staging, task_id)
        except TridentError as exc:
            raise _ExecutorFailure(failure_text(exc)) from None

    def _apply(
        self, committer: StateCommitter, staging: StagingArea, task_id: int
    ) -> pa.RecordBatch:
        task = self.tasks[task_id]
        entry = self.manifest["states"][task.state]
        rows = (
            staging.read_partition(self.manifest, task.state, task.index) if entry["files"] else []
        )
        stage = StagedState(task.state, entry["kind"], tuple(entry["fields"]), [rows])
        values = committer.apply_partition(stage, rows, task.index, task.count, self.txid)
        blob = pickle.dumps(values) if task.state in self.new_values else None
        return pa.RecordBatch.from_pydict(
            {"task": [task_id], "rows": [len(rows)], "new_values": [blob]}, schema=_SCHEMA
        )


class _ExecutorFailure(Exception):
    """Raised in an executor; its message carries the marked error."""


class SparkBatchApplier:
    """Applies a verified staged batch on Spark executors, one task per staged partition.

    Parameters
    ----------
    spark:
        Any SparkSession (classic or Spark Connect: only ``range`` + ``mapInArrow`` are used).
    topology:
        The topology's reference, ``package.module:attribute`` (executors import it).
    staging:
        The staging area the process step wrote (executors read their files from it).
    reprocess:
        Processes a txid again and stages it (for a stale opaque batch); returns the manifest.
    states:
        The run's state database.
    """

    def __init__(
        self,
        spark: Any,
        topology: str,
        staging: StagingArea,
        reprocess: Callable[[int], Mapping[str, Any]],
        states: StateBinding | None = None,
    ) -> None:
        self.spark = spark
        self.topology = topology
        self.staging = staging
        self._reprocess = reprocess
        self.states = states or StateBinding()

    def apply_staged(
        self, plan: BatchPlan, manifest: Mapping[str, Any], *, revert: bool = True
    ) -> dict[str, Partitions]:
        """Apply every staged partition of ``manifest`` in its own Spark task; the new values
        by state (only for states a new-values stream reads).

        Raises
        ------
        TridentError
            The executor's own error (e.g. ``StateBehindError``, ``BatchIncompleteError``,
            ``StateStoreUnavailableError``), or :class:`BatchFailedError` for any other failure
            of the Spark job. Partitions applied before it stay applied; the retry skips them.
        """
        topology = cached_topology(self.topology)
        writers = _spark_writers(self.spark, topology, manifest)
        for name, (node, writer) in writers.items():  # lakehouse appends: Spark's own writers
            entry = manifest["states"][name]
            try:
                done = writer.commit(self.spark, node, entry, plan.txid, self.states)
            except TridentError:
                raise
            except Exception as exc:
                raise _commit_failure(exc, plan.txid) from exc
            log.info(
                "txid %d: state %s: %d of %d partitions appended by Spark's %s writer",
                plan.txid, name, done, max(1, len(entry["files"])), writer.name,
            )  # fmt: skip
        rest = {
            **manifest,
            "states": {n: e for n, e in manifest["states"].items() if n not in writers},
        }
        tasks = tuple(commit_tasks(rest))
        committer = StateCommitter(topology, self.states)
        wanted = frozenset(n for n in manifest["states"] if committer.wants_new_values(n))
        lake_values: dict[str, Partitions] = {
            n: [[] for _ in range(max(1, len(manifest["states"][n]["files"])))]
            for n in writers
            if n in wanted
        }
        if not tasks:
            return lake_values
        manifest = rest
        wanted = wanted - set(writers)
        if revert:  # an earlier commit of this txid started: undo what only it wrote
            self._revert_unwritten(committer, plan.txid, manifest)
        apply = _ApplyPartitions(
            self.topology, self.staging.root, dict(manifest), tasks, plan.txid, wanted, self.states
        )
        log.info(
            "txid %d: applying %d staged partitions on Spark (%s)",
            plan.txid,
            len(tasks),
            ", ".join(f"{n}: {len(e['files'])} files" for n, e in manifest["states"].items()),
        )
        frame = self.spark.range(0, len(tasks), 1, len(tasks)).mapInArrow(apply, _DDL)
        try:
            with settled_job(self.spark, f"trident {self.topology}: commit txid {plan.txid}"):
                results = frame.collect()
        except Exception as exc:
            raise _commit_failure(exc, plan.txid) from exc
        return {**self._new_values(tasks, results, wanted), **lake_values}

    def _revert_unwritten(
        self, committer: StateCommitter, txid: int, manifest: Mapping[str, Any]
    ) -> None:
        """On the driver: opaque states get back their value before ``txid`` for the keys an
        earlier attempt wrote and this batch does not (read from the staged files)."""
        for name, entry in manifest["states"].items():
            if entry["kind"] == "update" or not committer.is_opaque(name):
                continue
            parts = [
                self.staging.read_partition(manifest, name, i) for i in range(len(entry["files"]))
            ]
            stage = StagedState(name, entry["kind"], tuple(entry["fields"]), parts)
            committer.revert_unwritten(txid, name, committer.written_keys(stage))

    def reprocess(self, txid: int) -> Mapping[str, Any]:
        """Process ``txid`` again on Spark (a new attempt); return its manifest."""
        return self._reprocess(txid)

    @staticmethod
    def _new_values(
        tasks: tuple[CommitTask, ...], results: list[Any], wanted: frozenset[str]
    ) -> dict[str, Partitions]:
        done = sorted(int(r["task"]) for r in results)
        if done != list(range(len(tasks))):
            msg = f"the Spark commit returned tasks {done}, expected 0..{len(tasks) - 1}"
            raise BatchFailedError(msg)
        new_values: dict[str, Partitions] = {
            t.state: [[] for _ in range(t.count)] for t in tasks if t.state in wanted
        }
        for row in results:
            task = tasks[int(row["task"])]
            if task.state in wanted:
                new_values[task.state][task.index] = pickle.loads(row["new_values"])
        return new_values


_WRITERS: dict[str, SparkWriter] = {"delta": DELTA, "iceberg": ICEBERG}
"""Spark's own writer of each table format a state factory may name (``spark_append``)."""


def _spark_writers(
    spark: Any, topology: Any, manifest: Mapping[str, Any]
) -> dict[str, tuple[PersistNode, SparkWriter]]:
    """The staged states appended by Spark's own lakehouse writers, by state: its node and the
    writer of the table format its factory names (Delta: :mod:`.lakehouse`, Iceberg:
    :mod:`.iceberg`), for the connectors the session runs."""
    writers: dict[str, tuple[PersistNode, SparkWriter]] = {}
    runs: dict[str, bool] = {}  # by format: whether the session runs its connector
    for name, entry in manifest["states"].items():
        node = topology.nodes[topology.states[name]]
        if not isinstance(node, PersistNode):
            continue
        writer = _WRITERS.get(table_format(node, entry) or "")
        if writer is None:
            continue
        if writer.name not in runs:
            runs[writer.name] = writer.runs_in(spark)
        if runs[writer.name]:
            writers[name] = (node, writer)
    return writers


def _commit_failure(exc: BaseException, txid: int) -> TridentError:
    error = batch_failure(exc, txid)
    if isinstance(error, BatchFailedError) and str(error).startswith("Spark failed processing"):
        first = next((ln for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        msg = (
            f"Spark failed committing batch txid {txid}: {first[:500]}; partitions applied "
            f"so far keep their txid and a retry of the commit skips them"
        )
        return BatchFailedError(msg)
    return error
