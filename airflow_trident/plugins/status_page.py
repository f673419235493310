"""The HTML of the status view: the facts, a batch timeline (inline SVG) and one row per txid.

Plain strings, no template engine and nothing fetched from elsewhere (no CDN): the page renders
inside the Airflow UI (an iframe) and offline. Every number sits in an element with a ``data-``
attribute naming it, so tests (and scripts) read the page without parsing its layout.

Examples
--------
>>> from datetime import datetime, timedelta, UTC
>>> from airflow_trident.batch.status import BatchStatus
>>> t0 = datetime(2026, 11, 23, 22, 0, tzinfo=UTC)
>>> s = lambda n: t0 + timedelta(seconds=n)
>>> batches = [
...     BatchStatus(1, "committed", process_started_at=s(0), processed_at=s(4),
...                 commit_started_at=s(5), committed_at=s(6)),
...     BatchStatus(2, "processing", process_started_at=s(1)),
... ]
>>> svg = timeline_svg(batches, now=s(10))
>>> svg.count('class="process"'), svg.count('class="commit"')
(2, 1)
>>> 'data-txid="2"' in svg and "still running" in svg
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from html import escape

from airflow_trident.batch.status import BatchStatus, RunStatus, TopologyStatus

__all__ = ["render_index", "render_page", "render_run", "timeline_svg"]

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 16px; color: #1a202c; }
h1 { font-size: 1.3em; margin: 0 0 8px 0; }
h2 { font-size: 1.05em; margin: 20px 0 6px 0; }
.facts { display: flex; gap: 12px; flex-wrap: wrap; }
.fact { border: 1px solid #cbd5e0; border-radius: 6px; padding: 8px 14px; min-width: 110px; }
.fact .value { font-size: 1.6em; font-weight: 600; }
.fact .label { font-size: 0.8em; color: #4a5568; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border-bottom: 1px solid #e2e8f0; padding: 4px 10px; text-align: right; }
th { background: #f7fafc; }
td.text, th.text { text-align: left; }
.phase-committed { color: #2f855a; } .phase-committing { color: #b7791f; }
.note { color: #718096; font-size: 0.85em; }
svg text { font-size: 11px; fill: #2d3748; }
"""

_ROW_H, _LEFT, _WIDTH = 22, 70, 760


def _when(moment: datetime | None) -> str:
    return "" if moment is None else moment.astimezone(UTC).strftime("%H:%M:%S")


def _number(value: float | int | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


_Interval = tuple[datetime, datetime] | None


def _intervals(batch: BatchStatus, now: datetime) -> tuple[_Interval, _Interval, _Interval]:
    """The process, wait (processed, its commit not started) and commit intervals of
    ``batch``; an open one ends ``now``."""
    process = wait = commit = None
    start = batch.process_started_at
    if start is not None:
        end = batch.processed_at or batch.commit_started_at
        process = (start, end if end is not None else now)
    if batch.processed_at is not None and (
        batch.commit_started_at is not None or batch.committed_at is None
    ):
        wait = (batch.processed_at, batch.commit_started_at or now)
    if batch.commit_started_at is not None:
        commit = (batch.commit_started_at, batch.committed_at or now)
    return process, wait, commit


_GAP_PX = 44  # the width of a compressed idle gap


def _span_text(seconds: float) -> str:
    """``seconds`` as a short span: ``42 s``, ``5 min``, ``3 h 10 min``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds // 3600:.0f} h {seconds % 3600 / 60:.0f} min"


def _time_axis(
    intervals: Sequence[tuple[datetime, datetime]],
) -> tuple[Callable[[datetime], float], list[tuple[datetime, datetime]]]:
    """The x of a moment, and the idle gaps drawn compressed.

    Busy spans are where any interval is; a gap between them longer than a tenth of the busy
    time (and over a second) is idle and gets a fixed width of ``_GAP_PX``, so batches an hour
    apart do not squeeze each bar to a sliver; the rest shares the width linearly.
    """
    ordered = sorted(intervals)
    busy: list[list[datetime]] = []
    for start, end in ordered:
        if busy and start <= busy[-1][1]:
            busy[-1][1] = max(busy[-1][1], end)
        else:
            busy.append([start, end])
    busy_s = sum((e - s).total_seconds() for s, e in busy)
    threshold = max(busy_s / 10, 1.0)
    gaps = [
        (busy[i][1], busy[i + 1][0])
        for i in range(len(busy) - 1)
        if (busy[i + 1][0] - busy[i][1]).total_seconds() > threshold
    ]
    first, last = busy[0][0], busy[-1][1]
    linear_s = (last - first).total_seconds() - sum((e - s).total_seconds() for s, e in gaps)
    room = _WIDTH - _LEFT - 10 - _GAP_PX * len(gaps)
    scale = room / max(linear_s, 0.001)

    def x(moment: datetime) -> float:
        position, cursor = float(_LEFT), first
        for start, end in gaps:
            if moment <= start:
                break
            position += (start - cursor).total_seconds() * scale
            if moment < end:  # inside the gap: proportionally within its fixed width
                share = (moment - start) / (end - start)
                return position + share * _GAP_PX
            position += _GAP_PX
            cursor = end
        return position + max((moment - cursor).total_seconds(), 0.0) * scale

    return x, gaps


def timeline_svg(batches: Sequence[BatchStatus], *, now: datetime) -> str:
    """One row per txid: its process interval (blue), its wait for its commit turn (grey) and
    its commit interval (green), on a shared time axis, so overlapping processing and the strict
    commit order show at a glance. Intervals still open end at ``now`` (hatched). Idle gaps
    between busy spans are drawn compressed (a dashed band naming the idle time)."""
    spans = [(b, *_intervals(b, now)) for b in batches]
    moments = [m for _, p, w, c in spans for iv in (p, w, c) if iv is not None for m in iv]
    height = _ROW_H * max(1, len(batches)) + 30
    if not moments:
        return (f'<svg class="timeline" width="{_WIDTH}" height="40"><text x="4" y="20">no '
                f"batch times known yet</text></svg>")  # fmt: skip
    first, last = min(moments), max(moments)
    x, gaps = _time_axis([iv for _, p, w, c in spans for iv in (p, w, c) if iv is not None])
    total = (last - first).total_seconds()

    parts = [
        f'<svg class="timeline" width="{_WIDTH}" height="{height}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="batch timeline">',
        '<defs><pattern id="open" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="3" height="6" fill="#a0aec0"/></pattern>'
        "</defs>",
    ]
    for row, (batch, process, wait, commit) in enumerate(spans):
        y = 6 + row * _ROW_H
        parts.append(f'<g class="txid" data-txid="{batch.txid}" data-phase="{batch.phase}">')
        parts.append(f'<text x="4" y="{y + 12}">txid {batch.txid}</text>')
        for kind, interval, color, closed in (
            ("process", process, "#4299e1", batch.processed_at or batch.commit_started_at),
            ("wait", wait, "#cbd5e0", batch.commit_started_at),
            ("commit", commit, "#48bb78", batch.committed_at),
        ):
            if interval is None:
                continue
            x0, x1 = x(interval[0]), x(interval[1])
            fill = color if closed is not None else "url(#open)"
            seconds = (interval[1] - interval[0]).total_seconds()
            still = "" if closed is not None else ", still running"
            parts.append(
                f'<rect class="{kind}" x="{x0:.1f}" y="{y + 2}" width="{max(x1 - x0, 2):.1f}" '
                f'height="{_ROW_H - 8}" fill="{fill}" stroke="{color}"><title>txid '
                f"{batch.txid} {kind} {seconds:.2f} s{still}</title></rect>"
            )
        parts.append("</g>")
    for start, end in gaps:
        x0, x1 = x(start), x(end)
        idle = _span_text((end - start).total_seconds())
        parts.append(
            f'<g class="gap" data-seconds="{(end - start).total_seconds():.0f}">'
            f'<rect x="{x0 + 2:.1f}" y="0" width="{max(x1 - x0 - 4, 1):.1f}" '
            f'height="{height - 22}" fill="#f7fafc" stroke="#a0aec0" stroke-dasharray="3,3"/>'
            f'<text x="{x0 + 4:.1f}" y="{height - 24}" font-size="9">{idle}</text>'
            f"<title>idle {idle}, drawn compressed</title></g>"
        )
    axis_y = height - 8
    parts.append(f'<text x="{_LEFT}" y="{axis_y}">{_when(first)}</text>')
    parts.append(f'<text x="{_WIDTH - 60}" y="{axis_y}">{_when(last)}</text>')
    parts.append(f'<text x="{_LEFT + 120}" y="{axis_y}">{_span_text(total)} in all</text>')
    parts.append("</svg>")
    return "".join(parts)


def _fact(name: str, label: str, value: object) -> str:
    return (f'<div class="fact"><div class="value" data-fact="{name}">{escape(str(value))}</div>'
            f'<div class="label">{label}</div></div>')  # fmt: skip


def _row(batch: BatchStatus) -> str:
    keys = ", ".join(f"{k}={v}" for k, v in sorted((batch.keys_written or {}).items()))
    cells = [
        ("txid", str(batch.txid), ""),
        ("phase", batch.phase, "text"),
        ("attempt_id", _number(batch.attempt_id), ""),
        ("run_id", batch.run_id or "", "text"),
        ("replay_run_id", f"replayed by {batch.replay_run_id}" if batch.replay_run_id else "",
         "text note"),
        ("records_in", _number(batch.records_in), ""),
        ("keys_written", keys or "-", "text"),
        ("process_seconds", _number(batch.process_seconds), ""),
        ("commit_seconds", _number(batch.commit_seconds), ""),
        ("since", _when(batch.since), ""),
    ]
    tds = "".join(
        f'<td class="{css}" data-field="{name}">{escape(value)}</td>' for name, value, css in cells
    )
    return f'<tr data-txid="{batch.txid}" class="phase-{batch.phase}">{tds}</tr>'


def render_page(status: TopologyStatus, *, json_href: str = "", refresh_s: int = 30) -> str:
    """The whole page of one topology."""
    title = f"Trident · {status.topology}"
    dag = f" · DAG {escape(status.dag_id)}" if status.dag_id else ""
    heads = ("txid", "phase", "attempt", "run", "replay", "records in", "keys written", "process s",
             "commit s", "since (UTC)")  # fmt: skip
    header = "".join(
        f'<th class="{"text" if h in ("phase", "run", "replay", "keys written") else ""}">{h}</th>'
        for h in heads
    )
    rows = "".join(_row(b) for b in reversed(status.batches))
    lag_rows = "".join(
        f'<tr data-partition="{escape(g.spout)}/{escape(g.partition)}"><td class="text">'
        f"{escape(g.spout)}</td><td class=\"text\">{escape(g.partition)}</td>"
        f'<td data-field="pending" data-unit="{escape(g.unit)}">{escape(g.text())}</td>'
        f'<td data-field="as_of_txid">{_number(g.as_of_txid)}</td></tr>'
        for g in status.lag
    )
    lag = (
        "<table><tr><th class=\"text\">spout</th><th class=\"text\">partition</th><th>not yet "
        f"emitted</th><th>after txid</th></tr>{lag_rows}</table>"
        if status.lag
        else '<p class="note">no spout of this topology tells its lag (see docs/status.md)</p>'
    )
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in status.notes)
    link = f' · <a href="{escape(json_href)}">JSON</a>' if json_href else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<meta http-equiv="refresh" content="{refresh_s}"><style>{_STYLE}</style></head>
<body data-topology="{escape(status.topology)}">
<h1>{escape(title)}{dag}</h1>
<p class="note">read {_when(status.collected_at)} UTC, every {refresh_s} s{link}</p>
<div class="facts">
{_fact("committed_txid", "committed txid", status.committed_txid)}
{_fact("allocated_txid", "highest allocated txid", status.allocated_txid)}
{_fact("in_flight", "batches in flight", len(status.in_flight))}
{_fact("records_in", f"records in, last {len(status.commits)} commits",
       sum(c.records_in or 0 for c in status.commits))}
</div>
<h2>Timeline</h2>
{timeline_svg(status.batches, now=status.collected_at)}
<p class="note"><span style="color:#4299e1">&#9632;</span> process
<span style="color:#a0aec0">&#9632;</span> processed, waiting for its commit turn
<span style="color:#48bb78">&#9632;</span> commit; hatched: still running</p>
<h2>Batches</h2>
<table class="batches"><tr>{header}</tr>{rows}</table>
<h2>Lag per source partition</h2>
{lag}
{notes}
</body></html>
"""


def render_run(
    status: RunStatus, *, topology_href: str = "", json_href: str = "", refresh_s: int = 10
) -> str:
    """The page of one run (its Trident tab): its txid from the moment its begin bound it,
    that batch's phase, attempt and steps; refreshed every ``refresh_s`` seconds.

    >>> from datetime import datetime, UTC
    >>> t0 = datetime(2026, 11, 23, 22, 0, tzinfo=UTC)
    >>> html = render_run(RunStatus("manual__1", "wc", 0, t0, txid=1,
    ...                             batch=BatchStatus(1, "begun", begun_at=t0, since=t0)))
    >>> '<span data-fact="run_txid">1</span>' in html, 'data-fact="run_phase">begun<' in html
    (True, True)
    """
    batch = status.batch
    title = f"Trident · run {status.run_id}"
    facts = ""
    if status.txid is not None:
        facts = f"""<div class="facts">
{_fact("txid", "txid", status.txid)}
{_fact("phase", "phase", "replay" if status.is_replay else batch.phase if batch else "-")}
{_fact("attempt_id", "attempt", _number(None if batch is None else batch.attempt_id))}
{_fact("committed_txid", "committed txid (topology)", status.committed_txid)}
</div>"""
    steps = ""
    if batch is not None:
        moments = [("begun", batch.begun_at), ("process started", batch.process_started_at),
                   ("processed", batch.processed_at), ("commit started", batch.commit_started_at),
                   ("committed", batch.committed_at)]  # fmt: skip
        rows = "".join(
            f'<tr><td class="text">{label}</td><td data-field="{label.replace(" ", "_")}">'
            f"{_when(moment)}</td></tr>"
            for label, moment in moments
        )
        records = ""
        if batch.records_in is not None:
            records = f'<p>records in: <span data-field="records_in">{batch.records_in}</span></p>'
        steps = f"<h2>Steps (UTC)</h2><table>{rows}</table>{records}"
    phase = "" if batch is None else batch.phase
    txid = "" if status.txid is None else str(status.txid)
    links = " · ".join(
        f'<a href="{escape(href)}">{label}</a>'
        for label, href in (("topology", topology_href), ("JSON", json_href))
        if href
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<meta http-equiv="refresh" content="{refresh_s}"><style>{_STYLE}</style></head>
<body data-topology="{escape(status.topology)}" data-run-id="{escape(status.run_id)}">
<h1>{escape(title)}</h1>
<p class="summary"><span data-fact="run_txid">{txid}</span>
<span data-fact="run_phase">{escape(phase)}</span>
<strong data-fact="run_summary">{escape(status.summary())}</strong></p>
{facts}
{steps}
<p class="note">topology {escape(status.topology)}, read {_when(status.collected_at)} UTC from
ZooKeeper (the run's txid binding) and the commit ledger, every {refresh_s} s
{"· " + links if links else ""}</p>
</body></html>
"""


def render_index(dag_ids: Sequence[str], *, base: str) -> str:
    """The list of Trident DAGs, each linking to its page under ``base``."""
    items = "".join(
        f'<li><a data-dag-id="{escape(d)}" href="{escape(base)}dags/{escape(d)}">{escape(d)}'
        f"</a></li>"
        for d in dag_ids
    )
    body = f"<ul>{items}</ul>" if dag_ids else '<p class="note">no Trident DAG you may read</p>'
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Trident topologies'
        f"</title><style>{_STYLE}</style></head><body><h1>Trident topologies</h1>{body}"
        f"</body></html>"
    )
