"""The DAG factory: one DAG run = one batch (one txid) of a topology.

``wait_ready >> begin >> process >> commit >> success``, where ``commit`` runs strictly in txid
order and every other step may overlap with other runs' (``max_active_batches``). The
``layout="compact"`` has three tasks, ``begin >> process >> commit``: ``begin`` waits for
readiness and begins, ``commit`` does the success step too — two task processes and two
scheduling hand-offs fewer per batch, for short batch intervals (``docs/performance.md``).
``layout="express"`` (Spark Connect processing) runs the whole batch in one task, ``run``.
A layout is a row of :data:`airflow_trident.batch.layouts.LAYOUTS` (its tasks and the slice of
steps each runs): :func:`trident_batch` builds one task per row, each by the builder of its
task type, and chains them in order.

Examples
--------
A DAG file::

    from airflow_trident.dag import trident_dag

    dag = trident_dag(
        "airflow_trident.examples.topologies:word_count",
        dag_id="word_count",
        schedule="@hourly",
        spark_conn_id="spark_local",
        zookeeper_conn_id="trident_zookeeper_default",
        max_active_batches=3,
    )

or a batch inside a larger DAG::

    with DAG("etl", schedule="@daily") as dag:
        extract >> trident_batch("my_pkg.flows:scores", group_id="scores") >> report
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, BaseOperator, TaskGroup

from airflow_trident.batch import layouts
from airflow_trident.batch.layouts import LayoutTask, layout_named
from airflow_trident.batch.routes import COMMIT_MODES
from airflow_trident.errors import ConfigurationError
from airflow_trident.hooks import config
from airflow_trident.hooks.arguments import check_dag_arguments
from airflow_trident.operators.assets import commits_alias, committed_asset, data_asset
from airflow_trident.operators.batch import (
    BatchSuccessOperator,
    BeginBatchOperator,
    CommitBatchOperator,
)
from airflow_trident.operators.connect import ConnectProcessBatchOperator
from airflow_trident.operators.express import ExpressBatchOperator
from airflow_trident.runtime.reference import load_topology
from airflow_trident.sensors.begin import BeginWhenReadySensor
from airflow_trident.sensors.ready import BatchReadySensor
from airflow_trident.tasks.base import default_deferrable

__all__ = [
    "LAYOUTS",
    "ON_DATA",
    "PROCESS_MODES",
    "default_staging_root",
    "trident_batch",
    "trident_dag",
]

PROCESS_MODES = ("submit", "connect")
LAYOUTS = tuple(layouts.LAYOUTS)
"""The layouts' names (each a row of :data:`airflow_trident.batch.layouts.LAYOUTS`)."""
ON_DATA = "on_data"
"""``trident_dag(..., schedule=ON_DATA)``: a run starts when data for a new batch lands."""

_DOCS = {
    "wait_ready": "Waits until every spout's coordinator says the next batch may start.",
    "begin": (
        "Trident's coordinator: binds this DAG run to its txid in ZooKeeper (a retry or a "
        'cleared task keeps the txid; `dag_run.conf={"txid": N}` replays N) and stores each '
        "spout's batch metadata. XCom: txid, attempt, metadata."
    ),
    "process": (
        "The processing phase, on Spark (spark-submit, or a Spark Connect server): emits the "
        "batch (a new attempt id every run), runs the topology's plan and stages the results "
        "plus a manifest. Safe to retry."
    ),
    "commit": (
        "The commit phase, strictly in txid order: waits until txid-1 is committed, checks the "
        "staged manifest, applies the results to each state with its exactly-once rule (here, "
        "or in a Spark job with commit_mode='spark'), then "
        "advances the committed txid in ZooKeeper by compare-and-set. Clearing a committed run "
        "changes nothing. XCom: records in, keys written."
    ),
    "success": "Tells the spouts the batch committed; rotates old metadata and staging away.",
    "begin_compact": (
        "Waits until every spout's coordinator says the next batch may start (a replay does not "
        "wait), then acts as Trident's coordinator: binds this DAG run to its txid in ZooKeeper "
        '(a retry or a cleared task keeps the txid; `dag_run.conf={"txid": N}` replays N) and '
        "stores each spout's batch metadata. XCom: txid, attempt, metadata."
    ),
    "run_express": (
        "The whole batch in one task (Spark Connect processing): waits until every spout's "
        "coordinator says the next batch may start (a replay does not wait), binds this DAG run "
        "to its txid in ZooKeeper (a retry or a cleared task keeps the txid; `dag_run.conf="
        '{"txid": N}` replays N), processes the batch on the Spark Connect server, waits until '
        "txid-1 is committed, applies the results with each state's exactly-once rule, "
        "advances the committed txid by compare-and-set and tells the spouts. A retry resumes "
        "at the step it died in (a staged attempt is committed, not processed again). XCom: "
        "txid, attempt, metadata, processed, committed."
    ),
    "commit_compact": (
        "The commit phase, strictly in txid order: waits until txid-1 is committed, checks the "
        "staged manifest, applies the results to each state with its exactly-once rule, "
        "advances the committed txid in ZooKeeper by compare-and-set, then tells the spouts "
        "and rotates old metadata and staging away. Clearing a committed run changes nothing. "
        "XCom: records in, keys written."
    ),
}


def default_staging_root() -> str:
    """The staging root a task uses when its DAG gives none, read now: ``[trident]
    staging_root``, ``TRIDENT_STAGING_ROOT``, or the single-machine default
    (:func:`airflow_trident.hooks.config.staging_root`). The factory no longer calls it: a
    DAG without ``staging_root`` leaves it to each task, at run time."""
    return config.staging_root(None)


def trident_batch(
    topology: str,
    *,
    group_id: str | None = None,
    spark_conn_id: str = "spark_default",
    zookeeper_conn_id: str = "trident_zookeeper_default",
    state_conn_id: str | None = None,
    staging_root: str | None = None,
    commit_mode: str = "worker",
    deferrable: bool | None = None,
    ready_deferrable: bool | None = None,
    spark_conf: dict[str, Any] | None = None,
    py_files: str | None = None,
    keep_txids: int = 16,
    spark_commit_min_rows: int = 1_000_000,
    process_mode: str = "submit",
    spark_connect_conn_id: str = "spark_connect_default",
    layout: str = "standard",
) -> TaskGroup:
    """The tasks of one batch of ``topology`` (``module:attribute``) as a TaskGroup.

    Call inside a ``with DAG(...)`` block; each DAG run is one batch. ``commit_mode``:
    ``"worker"`` applies the staged partitions in the commit task, ``"spark"`` in a Spark job
    (one Spark task per staged partition; for large batches), ``"auto"`` picks Spark when the
    batch staged at least ``spark_commit_min_rows`` rows (see :class:`CommitBatchOperator`).
    ``process_mode``: ``"submit"`` runs each batch's processing as a ``spark-submit`` job,
    ``"connect"`` on a running Spark Connect server (``spark_connect_conn_id``), which saves a
    JVM start per batch (see :class:`ConnectProcessBatchOperator`); a Spark commit then runs
    through the same server too, not by ``spark-submit``.
    ``deferrable`` (the commit's wait for txid-1) and ``ready_deferrable`` (the readiness
    sensor's wait) default to Airflow's ``[operators] default_deferrable``.
    ``keep_txids``: ZooKeeper keeps batch metadata for that many txids; run bindings are kept
    for 1,000 txids (``TransactionalCoordinator.keep_runs``): a run cleared up to 1,000 txids
    after its own replays its txid, an older one begins a new txid. ZooKeeper's node count for
    the topology stays bounded (``bench/zk_nodes.py``).
    ``layout``: ``"standard"`` (``wait_ready >> begin >> process >> commit >> success``) or
    ``"compact"`` (``begin >> process >> commit``: readiness and begin in one task, commit and
    success in one; the same exactly-once rules, two task processes fewer per batch) or
    ``"express"`` (one task, ``run``: readiness, begin, process on Spark Connect, commit and
    success; needs ``process_mode="connect"``; the lowest latency and Airflow cost per batch,
    one log per batch; runs overlap up to ``max_active_batches``, see
    :class:`~airflow_trident.operators.express.ExpressBatchOperator`).

    Raises
    ------
    ConfigurationError
        For an unknown ``commit_mode``, ``process_mode`` or ``layout``, ``layout="express"``
        without ``process_mode="connect"``, or a topology that cannot be imported.

    Examples
    --------
    >>> from airflow.sdk import DAG
    >>> with DAG("compact_doc", schedule=None) as dag:
    ...     group = trident_batch("airflow_trident.examples.topologies:word_count",
    ...                           group_id="batch", layout="compact")
    >>> [t.task_id for t in dag.topological_sort()]
    ['batch.begin', 'batch.process', 'batch.commit']
    >>> with DAG("express_doc", schedule=None) as dag:
    ...     group = trident_batch("airflow_trident.examples.topologies:word_count",
    ...                           group_id="batch", layout="express", process_mode="connect")
    >>> [t.task_id for t in dag.topological_sort()]
    ['batch.run']
    """
    check_dag_arguments(
        {k: v for k, v in locals().items() if k != "topology"}, where="trident_batch"
    )
    try:
        shape = layout_named(layout)
    except ValueError:
        msg = (
            f"layout {layout!r} is not one of {', '.join(LAYOUTS)}: 'standard' has a task per "
            f"step, 'compact' joins readiness with begin and success with commit, 'express' "
            f"runs the whole batch in one task"
        )
        raise ConfigurationError(msg) from None
    if shape.needs_connect and process_mode != "connect":
        msg = (
            f"layout {layout!r} runs the whole batch in one task, which needs a Spark Connect "
            f"server: process_mode is {process_mode!r}; hint: pass process_mode='connect' and "
            f"spark_connect_conn_id, or use layout='compact'"
        )
        raise ConfigurationError(msg)
    if process_mode not in PROCESS_MODES:
        msg = (
            f"process_mode {process_mode!r} is not one of {', '.join(PROCESS_MODES)}: 'submit' "
            f"runs spark-submit per batch, 'connect' uses a Spark Connect server"
        )
        raise ConfigurationError(msg)
    if commit_mode not in COMMIT_MODES:
        msg = (
            f"commit_mode {commit_mode!r} is not one of {', '.join(COMMIT_MODES)}: 'worker' "
            f"applies staged results in the commit task, 'spark' on Spark executors, 'auto' "
            f"chooses by the batch's staged rows"
        )
        raise ConfigurationError(msg)
    name = load_topology(topology).name
    group_id = group_id or name
    batch = _Batch(
        name=name,
        # staging_root None: each task reads [trident] staging_root when it runs
        common={"topology": topology, "staging_root": staging_root,
                "zookeeper_conn_id": zookeeper_conn_id},
        begin_task_id=f"{group_id}.{shape.carrier.task_id}",
        state_conn_id=state_conn_id,
        keep_txids=keep_txids,
        deferrable=default_deferrable() if deferrable is None else deferrable,
        ready_deferrable=default_deferrable() if ready_deferrable is None else ready_deferrable,
        commit_mode=commit_mode,
        spark_commit_min_rows=spark_commit_min_rows,
        spark_conn_id=spark_conn_id,
        spark_conf=spark_conf,
        py_files=py_files,
        process_mode=process_mode,
        spark_connect_conn_id=spark_connect_conn_id,
    )  # fmt: skip
    with TaskGroup(group_id=group_id, tooltip=f"one batch of topology {name}") as group:
        previous: BaseOperator | None = None
        for row in shape.tasks:
            task = _BUILDERS[row.task_type](row, batch)
            if previous is not None:
                previous >> task
            previous = task
    return group


@dataclass(frozen=True)
class _Batch:
    """What :func:`trident_batch` hands each task's builder (its arguments, resolved)."""

    name: str
    common: dict[str, Any]
    begin_task_id: str
    state_conn_id: str | None
    keep_txids: int
    deferrable: bool
    ready_deferrable: bool
    commit_mode: str
    spark_commit_min_rows: int
    spark_conn_id: str
    spark_conf: dict[str, Any] | None
    py_files: str | None
    process_mode: str
    spark_connect_conn_id: str

    def committing(self) -> dict[str, Any]:
        """The arguments of a task that commits: its asset events. Inlets: a commit reads the
        committed state it extends, and declaring that asset lets the DAG processor register
        it; otherwise Airflow creates it at the first commit event (through the alias), and
        pipelined first commits race on that insert."""
        return {"outlets": [commits_alias(self.name)], "inlets": [committed_asset(self.name)]}


def _ready(row: LayoutTask, b: _Batch) -> BaseOperator:
    return BatchReadySensor(
        task_id=row.task_id, poke_interval=5, mode="reschedule", doc_md=_DOCS["wait_ready"],
        deferrable=b.ready_deferrable, **b.common,
    )  # fmt: skip


def _begin(row: LayoutTask, b: _Batch) -> BaseOperator:
    return BeginBatchOperator(
        task_id=row.task_id, state_conn_id=b.state_conn_id, keep_txids=b.keep_txids,
        doc_md=_DOCS["begin"], **b.common,
    )  # fmt: skip


def _begin_when_ready(row: LayoutTask, b: _Batch) -> BaseOperator:
    return BeginWhenReadySensor(
        task_id=row.task_id, poke_interval=5, mode="reschedule", deferrable=b.ready_deferrable,
        state_conn_id=b.state_conn_id, keep_txids=b.keep_txids, doc_md=_DOCS["begin_compact"],
        **b.common,
    )  # fmt: skip


def _process(row: LayoutTask, b: _Batch) -> BaseOperator:
    if b.process_mode == "connect":
        return ConnectProcessBatchOperator(
            task_id=row.task_id, spark_connect_conn_id=b.spark_connect_conn_id,
            state_conn_id=b.state_conn_id, begin_task_id=b.begin_task_id,
            doc_md=_DOCS["process"], **b.common,
        )  # fmt: skip
    # Imported here: the Spark provider's SparkSubmitOperator imports the Kubernetes clients
    # (~0.9 s), which no task of a Connect-mode DAG needs when it parses its file.
    from airflow_trident.operators.process import ProcessBatchOperator

    return ProcessBatchOperator(
        task_id=row.task_id, spark_conn_id=b.spark_conn_id, state_conn_id=b.state_conn_id,
        begin_task_id=b.begin_task_id, conf=b.spark_conf, py_files=b.py_files,
        name=f"trident-{b.name}", doc_md=_DOCS["process"], **b.common,
    )  # fmt: skip


def _commit(row: LayoutTask, b: _Batch) -> BaseOperator:
    success_after = row.runs("success")  # the compact layout's commit does the success step too
    return CommitBatchOperator(
        task_id=row.task_id, state_conn_id=b.state_conn_id, begin_task_id=b.begin_task_id,
        deferrable=b.deferrable, keep_txids=b.keep_txids,
        doc_md=_DOCS["commit_compact" if success_after else "commit"],
        commit_mode=b.commit_mode, success_after=success_after,
        spark_conn_id=b.spark_conn_id, spark_conf=b.spark_conf,
        py_files=b.py_files, spark_commit_min_rows=b.spark_commit_min_rows,
        spark_connect_conn_id=b.spark_connect_conn_id if b.process_mode == "connect" else None,
        **b.committing(), **b.common,
    )  # fmt: skip


def _success(row: LayoutTask, b: _Batch) -> BaseOperator:
    return BatchSuccessOperator(
        task_id=row.task_id, state_conn_id=b.state_conn_id, begin_task_id=b.begin_task_id,
        keep_txids=b.keep_txids, doc_md=_DOCS["success"], **b.common,
    )  # fmt: skip


def _express(row: LayoutTask, b: _Batch) -> BaseOperator:
    return ExpressBatchOperator(
        task_id=row.task_id, poke_interval=5, mode="reschedule", deferrable=b.ready_deferrable,
        commit_deferrable=b.deferrable, state_conn_id=b.state_conn_id, keep_txids=b.keep_txids,
        spark_connect_conn_id=b.spark_connect_conn_id, commit_mode=b.commit_mode,
        spark_commit_min_rows=b.spark_commit_min_rows, doc_md=_DOCS["run_express"],
        **b.committing(), **b.common,
    )  # fmt: skip


_BUILDERS: dict[str, Callable[[LayoutTask, _Batch], BaseOperator]] = {
    "BatchReadySensor": _ready,
    "BeginBatchOperator": _begin,
    "BeginWhenReadySensor": _begin_when_ready,
    "ProcessBatchOperator": _process,  # or its Connect twin, by process_mode
    "CommitBatchOperator": _commit,
    "BatchSuccessOperator": _success,
    "ExpressBatchOperator": _express,
}
"""How each task type of a layout (:attr:`LayoutTask.task_type
<airflow_trident.batch.layouts.LayoutTask.task_type>`) is built from the batch's arguments."""


def trident_dag(
    topology: str,
    *,
    dag_id: str | None = None,
    schedule: Any = None,
    start_date: datetime | None = None,
    max_active_batches: int = 1,
    retries: int | None = None,
    retry_delay: timedelta | None = None,
    tags: list[str] | None = None,
    catchup: bool = False,
    default_args: dict[str, Any] | None = None,
    doc_md: str | None = None,
    **kwargs: Any,
) -> DAG:
    """A DAG whose every run is one batch (one txid) of ``topology`` (``module:attribute``).

    ``schedule="on_data"`` starts a run when the spouts have data for a new batch (Airflow's
    event-driven scheduling: the asset :func:`~airflow_trident.operators.assets.data_asset`,
    watched by a :class:`~airflow_trident.triggers.data.NewDataTrigger` in the triggerer)
    instead of on a timetable; the run's readiness step and its rules are unchanged.
    ``max_active_batches`` is Trident's max spout pending: that many runs process at once,
    while commits stay strictly ordered. ``retries`` and ``retry_delay`` (default 2 and 30 s,
    unless ``default_args`` sets them) go to every task through ``default_args``. ``doc_md``
    comes before the factory's own description of the DAG.

    Other keyword arguments go to :func:`trident_batch` when it takes them
    (``spark_conn_id``, ``zookeeper_conn_id``, ``state_conn_id``, ``staging_root``,
    ``commit_mode``, ``spark_commit_min_rows``, ``process_mode``, ``spark_connect_conn_id``,
    ``layout``, ``deferrable``, ``ready_deferrable``, ``spark_conf``, ``py_files``,
    ``keep_txids``), else to :class:`~airflow.sdk.DAG` (``params``, ``on_failure_callback``,
    ``on_success_callback``, ``dagrun_timeout``, ``is_paused_upon_creation``, ``end_date``,
    ``description``, ...).

    Raises
    ------
    ConfigurationError
        For an argument the factory owns (``max_active_runs``: use ``max_active_batches``;
        ``task_group``), one neither :func:`trident_batch` nor ``DAG`` takes, or
        ``max_active_batches < 1``.

    Examples
    --------
    >>> dag = trident_dag("airflow_trident.examples.topologies:word_count", dag_id="wc_doc",
    ...                   tags=["etl"], params={"note": "x"}, default_args={"owner": "data"})
    >>> dag.tags == {"etl"}, dag.params["note"], dag.get_task("batch.commit").owner
    (True, 'x', 'data')
    >>> on_data = trident_dag("airflow_trident.examples.topologies:word_count",
    ...                       dag_id="wc_on_data", schedule="on_data")
    >>> [asset.uri for asset in on_data.timetable.asset_condition.objects]
    ['trident://word_count/new-data']
    >>> trident_dag("airflow_trident.examples.topologies:word_count", max_active_runs=4)
    Traceback (most recent call last):
    ...
    airflow_trident.errors.ConfigurationError: trident_dag sets max_active_runs itself: ...
    """
    check_dag_arguments({"max_active_batches": max_active_batches, "retries": retries, **kwargs})
    name = load_topology(topology).name
    if max_active_batches < 1:
        msg = f"max_active_batches must be >= 1, got {max_active_batches}"
        raise ConfigurationError(msg)
    batch, dag_kwargs = _split_arguments(kwargs)
    if isinstance(schedule, str) and schedule == ON_DATA:
        # event-driven start: a run when the spouts have new data (airflow_trident.triggers.data)
        zookeeper = batch.get("zookeeper_conn_id", "trident_zookeeper_default")
        schedule = [data_asset(name, topology, zookeeper_conn_id=zookeeper)]
    task_defaults: dict[str, Any] = {
        "retries": 2, "retry_delay": timedelta(seconds=30), **(default_args or {}),
    }  # fmt: skip
    if retries is not None:
        task_defaults["retries"] = retries
    if retry_delay is not None:
        task_defaults["retry_delay"] = retry_delay
    about = (
        f"Trident topology **{name}** (`{topology}`): one run = one batch (txid). "
        f"Retries and cleared tasks replay the same txid; commits are strictly ordered."
    )
    with DAG(
        dag_id=dag_id or f"trident_{name}",
        schedule=schedule,
        start_date=start_date or datetime(2026, 1, 1),
        catchup=catchup,
        max_active_runs=max_active_batches,
        default_args=task_defaults,
        tags=tags or ["trident"],
        doc_md=f"{doc_md}\n\n{about}" if doc_md else about,
        **dag_kwargs,
    ) as dag:
        trident_batch(topology, group_id="batch", **batch)
    return dag


_OWNED = {
    "max_active_runs": "use max_active_batches (Trident's max spout pending)",
    "task_group": "the factory builds the batch's task group",
    "topology": "give the topology as the first argument",
    "group_id": "the DAG's batch group is always 'batch' (use trident_batch in your own DAG)",
}


def _split_arguments(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``kwargs`` of :func:`trident_dag` split into :func:`trident_batch`'s and ``DAG``'s."""
    batch_params = set(inspect.signature(trident_batch).parameters)
    dag_params = set(inspect.signature(DAG).parameters)
    batch: dict[str, Any] = {}
    dag: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key in _OWNED:
            msg = f"trident_dag sets {key} itself: {_OWNED[key]}"
            raise ConfigurationError(msg)
        if key in batch_params:
            batch[key] = value
        elif key in dag_params:
            dag[key] = value
        else:
            msg = (
                f"trident_dag got an unknown argument {key!r}: neither trident_batch nor "
                f"airflow.sdk.DAG takes it; hint: check its spelling"
            )
            raise ConfigurationError(msg)
    return batch, dag
