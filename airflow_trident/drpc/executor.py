"""Answering DRPC requests in-process: :class:`DRPCExecutor`.

Each request is its own batch with no txid: its one ``("args",)`` tuple runs through the stages of
the DRPC stream only (``each``, ``group_by``, ``state_query``, ``broadcast``, aggregations...), in
this process, with the in-process interpreter of the plan (never Spark). Every ``state_query``
reads committed values only (:mod:`airflow_trident.drpc.committed`): the request reads the
committed txid from the coordinator first, and a value a commit in progress wrote is read as it
was before that commit. When a later commit finishes while the request reads, the request runs
again at the new committed txid, so its answer is one consistent snapshot.

The result is the tuples of the DRPC stream's last step; :func:`result_json` renders them as
Trident's DRPC returns them, a JSON list of lists.

Examples
--------
The seed's word count (``groupBy(args).stateQuery(wordCounts, args, MapGet, count)``), before
any batch committed (``docs/drpc.md`` runs batches first, with ``LocalRunner``):

>>> from airflow_trident.coordination.memory import MemoryCoordinatorStore
>>> from airflow_trident.operation import Count, MapGet, Split
>>> from airflow_trident.spout.memory import MemoryTransactionalSpout
>>> from airflow_trident.state.memory import memory_state
>>> from airflow_trident.topology import TridentTopology
>>> t = TridentTopology("drpc_demo")
>>> sentences = [("how are you",), ("nice to meet you",), ("what a good day",)]
>>> spout = MemoryTransactionalSpout({"p0": sentences}, ["sentence"], take_per_batch=1)
>>> counts = (t.new_stream("spout1", spout).each(["sentence"], Split(), ["word"])
...           .group_by(["word"]).persistent_aggregate(
...               memory_state("drpc_demo_counts", "transactional"), Count(), ["count"],
...               name="word_counts"))
>>> _ = t.new_drpc_stream("word").group_by(["args"]).state_query(
...     counts, ["args"], MapGet(), ["count"])
>>> drpc = DRPCExecutor(t, store=MemoryCoordinatorStore(t.name))
>>> drpc.execute_json("word", "you")
'[["you",null]]'
>>> drpc.execute("words", "you")
Traceback (most recent call last):
...
airflow_trident.errors.DRPCUnknownFunctionError: topology 'drpc_demo' has no DRPC function ...
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from airflow_trident.coordination.protocol import CoordinatorStoreProtocol
from airflow_trident.drpc.committed import SnapshotMovedError, committed_state
from airflow_trident.errors import (
    BatchFailedError,
    CoordinatorUnavailableError,
    DRPCArgumentsError,
    DRPCCommitInProgressError,
    DRPCUnknownFunctionError,
    TridentError,
)
from airflow_trident.graph import DrpcNode
from airflow_trident.planner.plan import ExecutionPlan, Op, Stage
from airflow_trident.planner.planner import build_plan
from airflow_trident.runtime.commit import query_state
from airflow_trident.runtime.local import LocalBatchProcessor
from airflow_trident.runtime.result import Partitions
from airflow_trident.state.binding import StateBinding
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import Fields

__all__ = ["DRPC_TXID", "DRPCExecutor", "result_json"]

log = logging.getLogger(__name__)

Row = tuple[Any, ...]

DRPC_TXID = 0
"""The batch id a DRPC request's operations see (a request has no txid; Trident's is a request
id). ``OperationContext.txid`` is 0 in a DRPC stream."""

_dumps = json.JSONEncoder(separators=(",", ":"), default=str).encode


def result_json(rows: Sequence[Row]) -> str:
    """The result tuples as Trident's DRPC returns them: a JSON list of lists.

    >>> result_json([("the", 2), ("dog", None)])
    '[["the",2],["dog",null]]'
    """
    return _dumps([list(r) for r in rows])


class DRPCExecutor:
    """Runs DRPC requests of a topology against its committed state.

    Parameters
    ----------
    topology:
        The topology (its ``new_drpc_stream`` functions).
    store:
        The coordinator store whose committed txid requests read at; ``None`` reads the latest
        stored values (no coordinator: nothing is ever in progress).
    states:
        The run's state database (default: each state factory's own).
    commit_wait_s:
        How long a request waits for a commit in progress when it needs a value that commit
        wrote and whose committed value the state does not keep (then
        :class:`~airflow_trident.errors.DRPCCommitInProgressError`).
    max_reads:
        How many times a request reads again when later commits finish while it reads.
    """

    def __init__(
        self,
        topology: TridentTopology,
        *,
        store: CoordinatorStoreProtocol | None = None,
        states: StateBinding | None = None,
        commit_wait_s: float = 2.0,
        max_reads: int = 5,
    ) -> None:
        self.topology = topology
        self.store = store
        self.states = states or StateBinding()
        self.commit_wait_s = commit_wait_s
        self.max_reads = max_reads
        self._plan: ExecutionPlan | None = None
        self._planned_nodes = -1
        self._stages: dict[str, tuple[tuple[Stage, ...], str]] = {}
        self._local = threading.local()

    @property
    def functions(self) -> list[str]:
        """The DRPC functions of the topology."""
        return sorted(self.topology.drpc_functions)

    @property
    def plan(self) -> ExecutionPlan:
        """The topology's plan (built again if steps were added since)."""
        if self._plan is None or self._planned_nodes != len(self.topology.nodes):
            self._plan = build_plan(self.topology)
            self._planned_nodes = len(self.topology.nodes)
            self._stages = {}
        return self._plan

    def execute_json(self, function: str, args: Any) -> str:
        """:meth:`execute`, rendered as Trident's JSON list (:func:`result_json`)."""
        return result_json(self.execute(function, args))

    def execute(self, function: str, args: Any) -> list[Row]:
        """Answer one request to ``function`` with argument string ``args``; return the tuples
        of the DRPC stream's last step, read at the committed txid.

        Raises
        ------
        DRPCUnknownFunctionError
            If the topology defines no DRPC function ``function``.
        DRPCArgumentsError
            If ``args`` is not a string, or a step of the stream failed on it.
        DRPCCommitInProgressError
            If a needed value's committed version is unknown until a commit in progress ends,
            and it did not end within ``commit_wait_s``.
        CoordinatorUnavailableError, StateStoreUnavailableError
            If ZooKeeper or the state database cannot be reached.
        """
        node_id = self._node(function)
        if not isinstance(args, str):
            msg = (
                f"DRPC function {function!r} of topology {self.topology.name!r}: arguments "
                f"must be one string (the 'args' field), got {type(args).__name__} {args!r}"
            )
            raise DRPCArgumentsError(msg)
        deadline = time.monotonic() + self.commit_wait_s
        reads = 0
        while True:
            committed = self._committed_txid()
            try:
                return self._run(function, node_id, args, committed)
            except SnapshotMovedError:
                reads += 1
                if reads >= self.max_reads:
                    msg = (
                        f"DRPC function {function!r}: commits kept finishing while the request "
                        f"read ({reads} reads); hint: retry"
                    )
                    raise DRPCCommitInProgressError(msg) from None
            except DRPCCommitInProgressError:
                if not self._wait_for_commit(committed, deadline):
                    raise

    # -- internals ------------------------------------------------------------------------

    def _node(self, function: str) -> str:
        node_id = self.topology.drpc_functions.get(function)
        if node_id is None or not isinstance(self.topology.nodes.get(node_id), DrpcNode):
            msg = (
                f"topology {self.topology.name!r} has no DRPC function {function!r}; its "
                f"functions: {self.functions}. Hint: define it with "
                f"topology.new_drpc_stream({function!r})"
            )
            raise DRPCUnknownFunctionError(msg)
        return node_id

    def _committed_txid(self) -> int | None:
        if self.store is None:
            return None
        try:
            return self.store.commits.committed_txid()
        except TridentError:
            raise
        except Exception as exc:  # kazoo's connection errors: say what and where
            msg = (
                f"DRPC on topology {self.topology.name!r}: cannot read the committed txid from "
                f"the coordinator ({type(exc).__name__}: {exc}); hint: check that ZooKeeper is "
                f"up and the trident_zookeeper connection points at it"
            )
            raise CoordinatorUnavailableError(msg) from exc

    def _wait_for_commit(self, committed: int | None, deadline: float) -> bool:
        """Wait until the committed txid moves past ``committed``; ``False`` at ``deadline``."""
        while time.monotonic() < deadline:
            time.sleep(0.05)
            if self._committed_txid() != committed:
                return True
        return False

    def query_state(self, name: str) -> Any:
        """State ``name`` for reading (made once per thread: a SQL store reads outside any
        commit, each read in a short transaction of its own)."""
        made: dict[str, Any] | None = getattr(self._local, "states", None)
        if made is None:
            made = self._local.states = {}
        state = made.get(name)
        if state is None:
            state = made[name] = query_state(self.topology, name, self.states)
        return state

    def _stages_of(self, node_id: str) -> tuple[tuple[Stage, ...], str]:
        plan = self.plan
        cached = self._stages.get(node_id)
        if cached is not None:
            return cached
        reached: list[Stage] = []
        ids: set[str] = set()
        for stage in plan.stages:
            starts = stage.source is not None and stage.source.id == node_id
            if starts or any(i.stage in ids for i in stage.inputs):
                reached.append(stage)
                ids.add(stage.id)
        consumed = {i.stage for s in reached for i in s.inputs}
        tails = [s.id for s in reached if s.id not in consumed]
        result = (tuple(reached), tails[-1])
        self._stages[node_id] = result
        return result

    def _run(self, function: str, node_id: str, args: str, committed: int | None) -> list[Row]:
        stages, last = self._stages_of(node_id)
        processor = _RequestProcessor(self, committed)
        try:
            out = processor.run(stages, node_id, args)
        except BatchFailedError as exc:
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            msg = (
                f"DRPC function {function!r} of topology {self.topology.name!r} failed on "
                f"arguments {args[:200]!r}: {_step_of(str(exc))}{type(cause).__name__}: {cause}"
            )
            raise DRPCArgumentsError(msg) from cause
        return [r for part in out[last] for r in part]


def _step_of(message: str) -> str:
    """``"step 'x': "`` from the interpreter's failure message (which names the step)."""
    if message.startswith("step '"):
        end = message.find("'", 6)
        if end > 0:
            return f"step {message[5 : end + 1]}: "
    return ""


class _RequestProcessor(LocalBatchProcessor):
    """The interpreter of one request: only the DRPC stream's stages, every ``state_query``
    reading committed values of its own query partition."""

    def __init__(self, executor: DRPCExecutor, committed: int | None) -> None:
        super().__init__(executor.topology, executor.plan, states=self._state)
        self._executor = executor
        self._committed = committed
        self._partition = (0, 1)

    def run(self, stages: Sequence[Stage], node_id: str, args: str) -> dict[str, Partitions]:
        done: dict[str, Partitions] = {}
        for stage in stages:
            if stage.source is not None:
                inputs: list[Partitions] = [[[(args,)]] if stage.source.id == node_id else [[]]]
            else:
                inputs = [self._input(stage, i.stage, i.repartition, done) for i in stage.inputs]
            done[stage.id] = self._run_stage(stage, inputs, DRPC_TXID)
        return done

    def _run_op(
        self, op: Op, rows: list[Row], fields: Fields, txid: int, index: int, n: int
    ) -> list[Row]:
        self._partition = (index, n)
        return super()._run_op(op, rows, fields, txid, index, n)

    def _state(self, name: str) -> Any:
        index, n = self._partition
        return committed_state(
            self._executor.query_state(name),
            self._committed,
            name=name,
            partition_index=index,
            num_partitions=n,
        )
