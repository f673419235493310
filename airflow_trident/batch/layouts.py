"""A DAG's layout as data: which Airflow task of a batch runs which slice of the batch's steps.

A batch is five steps in one order (:data:`~airflow_trident.batch.driver.STEPS`): ``ready``
(the spouts say the next batch may start), ``begin`` (the run bound to its txid, the metadata
stored), ``process`` (emit, run the plan, stage), ``commit`` (in txid order) and ``success``
(the spouts told, old metadata rotated). A :class:`Layout` cuts them into Airflow tasks; every
part of the product that needs to know a layout reads it here:

* the DAG factory (:func:`~airflow_trident.dag.trident_batch`) builds one task per
  :class:`LayoutTask`, in order, each by the adapter of its slice;
* the tools (``status``, ``backfill``, ``rebuild``, the Trident tab, the DRPC endpoint) find a
  DAG's batch by its :attr:`Layout.carrier` task (the one that begins: it carries the topology,
  the connections and the staging root), through :data:`CARRIER_TYPES`;
* a readiness wait names the earlier run's failed task that blocks it among the tasks of
  :meth:`Layout.blocking_task_ids`; the run's note and the Trident tab read the txid from the
  XCom of the task that begins (:meth:`Layout.begins_in`).

Adding a layout is a row of :data:`LAYOUTS` (and, only for a slice no adapter runs yet, an
adapter: ``docs/extending.md``).

Examples
--------
>>> express = LAYOUTS["express"]
>>> [(t.task_id, t.steps) for t in express.tasks]
[('run', ('ready', 'begin', 'process', 'commit', 'success'))]
>>> compact = LAYOUTS["compact"]
>>> [t.task_id for t in compact.tasks], compact.carrier.task_id, compact.task_for("success").task_id
(['begin', 'process', 'commit'], 'begin', 'commit')
>>> LAYOUTS["standard"].blocking_task_ids("batch")
['batch.begin', 'batch.process', 'batch.commit']
>>> CARRIER_TYPES["BeginWhenReadySensor"]
'compact'
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CARRIER_TYPES", "LAYOUTS", "Layout", "LayoutTask", "layout_named"]

_ORDER = ("ready", "begin", "process", "commit", "success")  # the driver's STEPS


@dataclass(frozen=True)
class LayoutTask:
    """One Airflow task of a layout: its id in the batch's task group, the contiguous slice of
    steps it runs, and the class of its adapter (a serialized DAG keeps only that name)."""

    task_id: str
    steps: tuple[str, ...]
    task_type: str
    """The operator or sensor class that runs the slice; a ``process`` task's is the
    ``spark-submit`` one, which ``process_mode="connect"`` swaps for its Connect twin."""

    def __post_init__(self) -> None:
        first = _ORDER.index(self.steps[0])
        if self.steps != _ORDER[first : first + len(self.steps)]:
            msg = f"task {self.task_id!r}: steps {self.steps} are not a slice of {_ORDER}"
            raise ValueError(msg)

    def runs(self, step: str) -> bool:
        """Whether this task runs ``step``."""
        return step in self.steps


@dataclass(frozen=True)
class Layout:
    """A layout: its tasks in order, together running every step once, in order."""

    name: str
    tasks: tuple[LayoutTask, ...]
    needs_connect: bool = False
    """Whether it processes on a Spark Connect server only (one task cannot wait for a
    ``spark-submit`` job it did not start and still resume in its commit)."""
    summary: str = ""

    def __post_init__(self) -> None:
        steps = tuple(s for t in self.tasks for s in t.steps)
        if steps != _ORDER:
            msg = f"layout {self.name!r}: its tasks run {steps}, not every step once: {_ORDER}"
            raise ValueError(msg)

    def task_for(self, step: str) -> LayoutTask:
        """The task that runs ``step``."""
        return next(t for t in self.tasks if t.runs(step))

    @property
    def carrier(self) -> LayoutTask:
        """The task that begins: it carries the batch's arguments for every tool."""
        return self.task_for("begin")

    def blocking_task_ids(self, group: str = "") -> list[str]:
        """The ids (in ``group``) of the tasks whose failure blocks later runs, in step order:
        those running begin, process and commit. The last one succeeded: the batch committed."""
        ids: list[str] = []
        for step in ("begin", "process", "commit"):
            task_id = _in_group(group, self.task_for(step).task_id)
            if task_id not in ids:
                ids.append(task_id)
        return ids

    def begins_in(self, task_id: str) -> bool:
        """Whether the task ``task_id`` (in any group) begins the batch (its XCom holds the
        run's txid)."""
        return task_id.rpartition(".")[2] == self.carrier.task_id


def _in_group(group: str, task_id: str) -> str:
    return f"{group}.{task_id}" if group else task_id


LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in (
        Layout(
            "standard",
            (
                LayoutTask("wait_ready", ("ready",), "BatchReadySensor"),
                LayoutTask("begin", ("begin",), "BeginBatchOperator"),
                LayoutTask("process", ("process",), "ProcessBatchOperator"),
                LayoutTask("commit", ("commit",), "CommitBatchOperator"),
                LayoutTask("success", ("success",), "BatchSuccessOperator"),
            ),
            summary="a task per step",
        ),
        Layout(
            "compact",
            (
                LayoutTask("begin", ("ready", "begin"), "BeginWhenReadySensor"),
                LayoutTask("process", ("process",), "ProcessBatchOperator"),
                LayoutTask("commit", ("commit", "success"), "CommitBatchOperator"),
            ),
            summary="readiness with begin, success with commit",
        ),
        Layout(
            "express",
            (LayoutTask("run", _ORDER, "ExpressBatchOperator"),),
            needs_connect=True,
            summary="the whole batch in one task",
        ),
    )
}
"""Every layout ``trident_dag(layout=...)`` accepts, by name."""

CARRIER_TYPES: dict[str, str] = {layout.carrier.task_type: name for name, layout in LAYOUTS.items()}
"""The class of each layout's carrier task -> the layout's name (how a tool recognises a
Trident DAG and its layout, from a parsed or a serialized DAG)."""


def layout_named(name: str) -> Layout:
    """The layout ``name``.

    Raises
    ------
    ValueError
        If there is no such layout (the message lists them).
    """
    try:
        return LAYOUTS[name]
    except KeyError:
        known = ", ".join(f"{n!r} ({layout.summary})" for n, layout in LAYOUTS.items())
        msg = f"layout {name!r} is not one of {known}"
        raise ValueError(msg) from None
