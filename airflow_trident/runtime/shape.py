"""A txid's shape: how its rows were spread over each state's commit partitions.

Both runtimes stage a state's rows in the same number of commit partitions: the source's
partitions, or the ``parallelism_hint`` after a repartition, or 1 (the Spark runtime keeps them
exact where they matter, :func:`~airflow_trident.runtime.spark.liveness.fixed_commit_partitions`).
*Which* rows land in partition ``i`` after a hash (``partition_by``, ``shuffle``, a join, a
grouping) is each runtime's own: CRC32 of the key's JSON in process, Spark's murmur3 there.

A state that keeps its txids per commit partition, not per key (the Iceberg and Delta sinks:
``txids_by_partition = True`` on the factory), is exactly-once only if every attempt of a txid
spreads its rows alike: a retried partition ``i`` must carry the rows partition ``i`` carried
the first time. So the commit records the txid's shape (:func:`batch_shape`) when its first
commit starts (beside ``commits_started/<txid>`` in ZooKeeper), and a later commit of the txid
whose shape differs for such a state — another partition count, or rows placed by the other
runtime's hash — is refused before anything is written (:func:`check_replay_shape`).

>>> check_replay_shape(7, {"events": {"partitions": 2, "hash": "spark"}},
...                    {"events": {"partitions": 3, "hash": "spark"}}, frozenset({"events"}))
Traceback (most recent call last):
...
airflow_trident.errors.StateError: txid 7: state 'events' keeps its txids per commit partition, ...
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from airflow_trident.errors import StateError
from airflow_trident.graph import JoinNode, MergeNode, NewValuesNode
from airflow_trident.planner.plan import ExecutionPlan, Stage

__all__ = [
    "batch_shape",
    "check_replay_shape",
    "declares_txids_by_partition",
    "placed_by_hash",
    "shape_bound_states",
]

log = logging.getLogger(__name__)

_RUNTIMES = {"local": "the in-process runtime's hash", "spark": "Spark's hash"}


def placed_by_hash(plan: ExecutionPlan, state: str) -> bool:
    """Whether the rows of ``state``'s commit partitions are placed by a hash (so by each
    runtime's own), not by their source partition, a custom partitioner or one partition."""
    for stage in plan.stages:
        sink = stage.sink
        if sink is not None and sink.node.state == state:
            return _hashed(plan, stage)
    return False


def _hashed(plan: ExecutionPlan, stage: Stage) -> bool:
    if stage.source is not None:  # a source's partitions (a new-values stream: the state's)
        return False
    first = stage.ops[0] if stage.ops else None
    if isinstance(first, JoinNode):
        return True
    if isinstance(first, MergeNode):
        return any(_hashed(plan, plan.stage(i.stage)) for i in stage.inputs)
    how = stage.inputs[0].repartition
    if how is None:
        return _hashed(plan, plan.stage(stage.inputs[0].stage))
    return how.method in ("partition_by", "shuffle")


def batch_shape(plan: ExecutionPlan, manifest: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The shape of a staged batch: each state's commit partition count and, when a hash placed
    its rows over several partitions, the runtime whose hash did (``"local"``, ``"spark"``).
    States of a manifest written before shapes were recorded are left out."""
    runtime = manifest.get("runtime")
    shape: dict[str, dict[str, Any]] = {}
    for name, entry in manifest["states"].items():
        count = entry.get("partitions")
        if count is None or runtime is None:
            continue
        hashed = count > 1 and placed_by_hash(plan, name)
        shape[name] = {"partitions": count, "hash": runtime if hashed else None}
    return shape


def declares_txids_by_partition(factory: Any) -> bool:
    """Whether a state factory (or the factory a wrapper holds in ``inner``) says its states
    keep their txids per commit partition (``txids_by_partition = True``)."""
    for _ in range(8):  # wrappers of wrappers, not a cycle
        declared = getattr(factory, "txids_by_partition", None)
        if isinstance(declared, bool):
            return declared
        factory = getattr(factory, "inner", None)
        if factory is None:
            return False
    return False


def shape_bound_states(plan: ExecutionPlan) -> frozenset[str]:
    """The states whose txid must keep its shape on every attempt: those keeping txids per
    commit partition (not accepted as at-least-once), and the states whose new values feed one
    in the commit phase (their partitions are that stream's)."""
    bound: set[str] = set()
    consumers: dict[str, list[Stage]] = {}
    for stage in plan.stages:
        for inp in stage.inputs:
            consumers.setdefault(inp.stage, []).append(stage)
        sink = stage.sink
        if sink is None or getattr(sink.node, "at_least_once", False):
            continue
        if declares_txids_by_partition(sink.node.factory):
            bound.add(sink.node.state)
    changed = True
    while changed:  # a state feeding (through new values) one that is bound is bound too
        changed = False
        for stage in plan.phase("commit"):
            if not isinstance(stage.source, NewValuesNode) or stage.source.state in bound:
                continue
            if _reaches(stage, consumers, bound):
                bound.add(stage.source.state)
                changed = True
    return frozenset(bound)


def _reaches(stage: Stage, consumers: Mapping[str, list[Stage]], bound: set[str]) -> bool:
    todo, seen = [stage], set()
    while todo:
        current = todo.pop()
        if current.id in seen:
            continue
        seen.add(current.id)
        if current.sink is not None and current.sink.node.state in bound:
            return True
        todo.extend(consumers.get(current.id, ()))
    return False


def _describe(entry: Mapping[str, Any]) -> str:
    count = entry["partitions"]
    text = f"{count} partition{'s' if count != 1 else ''}"
    hashed = entry.get("hash")
    return text if hashed is None else f"{text} placed by {_RUNTIMES.get(hashed, hashed)}"


def check_replay_shape(
    txid: int,
    first: Mapping[str, Mapping[str, Any]] | None,
    now: Mapping[str, Mapping[str, Any]],
    bound: frozenset[str],
) -> None:
    """Refuse a commit of ``txid`` whose shape ``now`` differs from ``first`` (the shape its
    first commit started with) for a state in ``bound``; other differences are logged.

    Raises
    ------
    StateError
        Naming the txid, the state, both shapes and the fix; nothing was written.
    """
    if not first:
        return
    for name in sorted(set(first) & set(now)):
        was, is_ = dict(first[name]), dict(now[name])
        if was == is_:
            continue
        if name not in bound:
            log.warning(
                "txid %d: state %s was committed with %s and is now committed with %s (it keeps "
                "a txid per key: the replay is exact anyway)",
                txid, name, _describe(was), _describe(is_),
            )  # fmt: skip
            continue
        msg = (
            f"txid {txid}: state {name!r} keeps its txids per commit partition, and this txid's "
            f"first commit started with {_describe(was)}; this attempt has {_describe(is_)}, so "
            f"a partition retried now could carry rows another partition wrote already. Nothing "
            f"was written; hint: process the txid again as it was first (the topology's "
            f"parallelism of then, on the runtime of then) and commit it "
            f"(docs/reliability.md: a txid's shape on replay)"
        )
        raise StateError(msg)
