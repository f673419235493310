"""Running a window step on one partition of a batch (both runtimes).

:func:`window_results` adds the partition's tuples to the window's store and returns the
results of the windows that fired, through the store (:mod:`airflow_trident.state.window`): a
retried txid gets its stored results back, a committed one nothing. :func:`compute_window` is
the pure rule: what a batch adds and which windows fire (see
:mod:`airflow_trident.operation.window` for the semantics).

Examples
--------
>>> from airflow_trident.operation import Sum
>>> from airflow_trident.operation.window import SlidingCountWindow
>>> from airflow_trident.state.window import StoredTuple
>>> spec = WindowSpec(SlidingCountWindow.of(3, 2), Sum(), ("v",), ("total",), None)
>>> first = compute_window(spec, None, [], [(1,), (2,), (3,)], txid=1)
>>> first.results, first.cursor  # fired after 2 tuples: [1, 2]
([(3,)], {'count': 3})
>>> live = [StoredTuple(i, 1, None, (v,)) for i, v in enumerate([1, 2, 3])]
>>> compute_window(spec, first.cursor, live, [(4,)], txid=2).results  # [2, 3, 4]
[(9,)]
"""

from __future__ import annotations

import datetime
import logging
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_trident.errors import BatchFailedError
from airflow_trident.graph import AggPart, WindowNode
from airflow_trident.operation.window import WindowConfig
from airflow_trident.runtime.aggregate import aggregate_rows
from airflow_trident.state.window import StoredTuple, WindowUpdate
from airflow_trident.tuple import Fields

__all__ = ["WindowSpec", "compute_window", "dry_window_results", "window_results"]

log = logging.getLogger(__name__)

Row = tuple[Any, ...]


@dataclass(frozen=True)
class WindowSpec:
    """What :func:`compute_window` needs of a window step."""

    config: WindowConfig
    aggregator: Any
    inputs: Fields
    outputs: Fields
    step: str | None

    @classmethod
    def of(cls, node: WindowNode) -> WindowSpec:
        """The spec of window step ``node``."""
        return cls(node.config, node.aggregator, node.window_inputs, node.fields, node.id)


def _aggregate(spec: WindowSpec, rows: Sequence[Row], txid: int) -> list[Row]:
    part = AggPart(spec.aggregator, spec.inputs, spec.outputs)
    return aggregate_rows(rows, spec.inputs, (part,), batch_id=txid)


def compute_window(
    spec: WindowSpec,
    cursor: dict[str, Any] | None,
    live: list[StoredTuple],
    new: Sequence[Row],
    *,
    txid: int,
    times: Sequence[float] = (),
    now: float | None = None,
) -> WindowUpdate:
    """What one batch does to a window partition: ``new`` tuples (input values) join the
    ``live`` ones, and the windows that complete fire, in order, each aggregated into results.

    Duration windows take the tuples' ``times`` (event time) or the processing time ``now``.
    """
    if spec.config.by_count:
        return _count_window(spec, cursor, live, new, txid)
    return _duration_window(spec, cursor, live, new, times, now, txid)


def _count_window(
    spec: WindowSpec,
    cursor: dict[str, Any] | None,
    live: list[StoredTuple],
    new: Sequence[Row],
    txid: int,
) -> WindowUpdate:
    length, slide = int(spec.config.length), int(spec.config.slide)
    before = int((cursor or {}).get("count", 0))
    after = before + len(new)
    by_pos = {t.pos: t.values for t in live}
    by_pos.update({before + i: tuple(values) for i, values in enumerate(new)})
    results: list[Row] = []
    end = (before // slide + 1) * slide
    while end <= after:
        rows = [by_pos[p] for p in range(max(0, end - length), end)]
        results.extend(_aggregate(spec, rows, txid))
        end += slide
    keep = max(0, end - length)  # the first position of the next window to fire
    return WindowUpdate([(None, tuple(v)) for v in new], results, {"count": after}, keep_pos=keep)


def _duration_window(
    spec: WindowSpec,
    cursor: dict[str, Any] | None,
    live: list[StoredTuple],
    new: Sequence[Row],
    times: Sequence[float],
    now: float | None,
    txid: int,
) -> WindowUpdate:
    length, slide = spec.config.length, spec.config.slide
    watermark: float | None = (cursor or {}).get("watermark")
    if now is not None:  # processing time: the batch's tuples came now (never before the mark)
        now = now if watermark is None else max(now, watermark)
        times = [now] * len(new)
    accepted: list[tuple[float, Row]] = []
    late = 0
    for ts, values in zip(times, new, strict=True):
        if watermark is not None and ts < watermark:
            late += 1
            continue
        accepted.append((ts, tuple(values)))
    if late:
        log.warning(
            "window %r, txid %d: %d late tuple(s) dropped (older than the watermark %s)",
            spec.step, txid, late, watermark,
        )  # fmt: skip
    lag = float(getattr(spec.config, "lag", 0.0))
    marks = [now] if now is not None else [ts - lag for ts, _ in accepted]
    if watermark is not None:
        marks.append(watermark)
    mark = max(marks) if marks else None
    held = [(t.ts, t.values) for t in live if t.ts is not None] + accepted
    results: list[Row] = []
    if mark is not None:
        fired: set[int] = set()  # window k is [k * slide - length, k * slide)
        for ts, _ in held:
            k = math.floor(ts / slide) + 1
            while k * slide <= ts + length:
                if k * slide <= mark and (watermark is None or k * slide > watermark):
                    fired.add(k)
                k += 1
        for k in sorted(fired):
            end = k * slide
            rows = [values for ts, values in held if end - length <= ts < end]
            if rows:
                results.extend(_aggregate(spec, rows, txid))
    keep = None if mark is None else (math.floor(mark / slide) + 1) * slide - length
    return WindowUpdate(accepted, results, {"watermark": mark}, keep_ts=keep)


def _times(node: WindowNode, rows: Sequence[Row], fields: Fields, txid: int) -> list[float]:
    """Each tuple's event time, from its timestamp field."""
    field = node.config.timestamp_field
    index = fields.index(field)
    times = []
    for row in rows:
        value = row[index]
        if isinstance(value, datetime.datetime):
            times.append(value.timestamp())
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            times.append(float(value))
        else:
            msg = (
                f"step {node.id!r} failed in batch txid {txid} on record {repr(row)[:200]}: "
                f"timestamp field {field!r} holds {value!r}, not a number of seconds or a "
                f"datetime; the batch is not committed and will be replayed"
            )
            raise BatchFailedError(msg)
    return times


def window_results(
    node: WindowNode,
    rows: list[Row],
    fields: Fields,
    txid: int,
    partition: int,
    store: Any,
) -> list[Row]:
    """Add a partition's ``rows`` of batch ``txid`` to window ``node`` (in ``store``) and
    return the results of the windows that fired (a retry: the same results again)."""
    spec = WindowSpec.of(node)
    index = [fields.index(f) for f in node.window_inputs]
    new = [tuple(r[i] for i in index) for r in rows]
    config = node.config
    event_time = not config.by_count and config.timestamp_field is not None
    times = _times(node, rows, fields, txid) if event_time else []

    def compute(cursor: dict[str, Any] | None, live: list[StoredTuple]) -> WindowUpdate:
        # processing time: the clock is read once, when the batch first enters the window
        now = None if config.by_count or event_time else config.now()
        return compute_window(spec, cursor, live, new, txid=txid, times=times, now=now)

    results, how = store.process(partition, txid, compute)
    if how != "new":
        log.info(
            "window %r partition %d, txid %d: %s (%d result(s) again)",
            node.id, partition, txid, how, len(results),
        )  # fmt: skip
    return [tuple(r) for r in results]


def dry_window_results(node: WindowNode, rows: list[Row], fields: Fields, txid: int) -> list[Row]:
    """No results: what a driver-side type sample gets from a window step.

    The sample's rows are not a window (which windows fire, and with which tuples, depends on
    the store), so neither the window's aggregator nor any user step after it runs on them
    (issue 19: a ``Filter`` checking a window's size failed every attempt on Spark). The
    results' types come from declarations (``output_types``) or travel pickled with the real
    values."""
    return []
