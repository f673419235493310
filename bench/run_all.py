"""Run every benchmark of ``bench/``, print one table (figure, target, measured, pass/miss) and
draw the plots of ``docs/performance/``.

Each benchmark runs as its own command (its CLI only; ``--quick`` or ``--tiny`` give each one a
smaller size), its output is kept under ``--logs``, and only its ``name=value`` lines (the
``ratio=`` line and the like) and a few clearly labelled lines are read back:

* ``bench/latency.py``: ``median sensor->commit: ..., connect mode <s>s``;
* ``bench/sss.py``: ``<size> phases (median s): <phase> <s>, ...`` and ``<size> (<n> words
  per batch) median per batch: ours <s> s, SSS <s> s``;
* ``bench/sources.py``: ``input: <GiB> GiB`` and ``batch <k>x (<files> files): median <s>s``.

Plots (``--plots``, matplotlib): ``latency_phases.png`` (our per-batch phases in Connect mode
against SSS's whole batch, from ``bench/sss.py``) and ``throughput_batch_size.png`` (the file
log at 1x/4x/16x batch size from ``bench/sources.py``, ours and SSS at both sizes from
``bench/sss.py``).

    source scripts/env.sh
    .venv/bin/python bench/run_all.py --lock /tmp/heavy.lock             # ~20 min here
    .venv/bin/python bench/run_all.py --lock /tmp/heavy.lock --quick     # a few minutes

``--lock`` takes the lock around each benchmark (not around the whole run: do not start this
script itself under ``flock`` with the same lock, the children would wait for it forever).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
KEY_VALUE = re.compile(r"^([A-Za-z][\w]*)=(-?[\d.]+(?:[eE][-+]?\d+)?)\b")
PHASES = re.compile(r"^(?P<size>\w+) phases \(median s\): (?P<body>.*?)(?: \(sum [\d.]+\))?$")
PER_BATCH = re.compile(
    r"^(?P<size>\w+) \((?P<words>[\d,]+) words per batch\) median per batch: "
    r"ours (?P<ours>[\d.]+) s, SSS (?P<sss>[\d.]+) s"
)
DAG_PHASES = re.compile(r"^phases (?P<mode>\w+): (?P<body>(?:\w+=[\d.]+s\s*)+)$")
LATENCY = re.compile(r"^median sensor->commit:.*?connect mode (?P<connect>[\d.]+)\s*s")
SOURCES_INPUT = re.compile(r"^input: (?P<gib>[\d.]+) GiB")
SOURCES_SCALE = re.compile(
    r"^batch (?P<factor>\d+)x \((?P<files>\d+) files\): median (?P<s>[\d.]+)s"
)


@dataclass(frozen=True)
class Figure:
    """One row of the table: a value read from a benchmark's output and its target."""

    label: str
    key: str
    op: str  # "<=", ">=" or "info"
    target: float | None = None
    unit: str = ""

    def verdict(self, value: float | None) -> str:
        if value is None:
            return "n/a"
        if self.op == "info" or self.target is None:
            return "info"
        ok = value <= self.target if self.op == "<=" else value >= self.target
        return "pass" if ok else "miss"

    def target_text(self) -> str:
        if self.op == "info" or self.target is None:
            return "(information)"
        return f"{self.op} {self.target:g}{self.unit}"


@dataclass(frozen=True)
class Bench:
    """A benchmark script, its arguments per mode and the figures read from its output."""

    name: str
    script: str
    full: Sequence[str]
    quick: Sequence[str]
    tiny: Sequence[str] | None
    figures: Sequence[Figure]
    needs: Sequence[str] = ("TRIDENT_PG_URL", "TRIDENT_ZK_HOSTS")


BENCHES: tuple[Bench, ...] = (
    Bench("zk_nodes", "zk_nodes.py",
          ["--keep-txids", "10", "--keep-runs", "10"],
          ["--keep-txids", "10", "--keep-runs", "10", "--large", "200"],
          ["--small", "2", "--large", "6", "--keep-txids", "2", "--keep-runs", "2"],
          [Figure("ZooKeeper znodes after 1,000 txids vs 10 (keep 10/10)", "ratio", "<=", 1.1,
                  "x")]),
    Bench("scale_partitions", "scale_partitions.py",
          ["--rounds", "7"],
          ["--rounds", "3", "--large", "512"],
          None,
          [Figure("coordinator phases, 2,048 vs 4 partitions, same records",
                  "ratio_coordinator", "<=", 1.5, "x"),
           Figure("ZooKeeper requests per batch, 2,048 vs 4 partitions", "ratio_zk_requests",
                  "<=", 1.0, "x"),
           Figure("whole batch in process, 2,048 vs 4 partitions", "ratio", "<=", 2.0, "x")],
          needs=("TRIDENT_ZK_HOSTS",)),
    Bench("commit_scale", "commit_scale.py",
          ["--runs", "5"],
          ["--large", "1000000", "--runs", "3"],
          ["--small", "200", "--large", "2000", "--batch", "200", "--runs", "1", "--prefix",
           "commit_scale_tiny"],
          [Figure("commit of 10k keys with 10M vs 10k keys stored", "ratio", "<=", 1.3, "x")]),
    Bench("commit", "commit.py",
          ["--keys", "1000000", "--runs", "3"],
          ["--keys", "200000", "--runs", "1"],
          None,
          [Figure("worker commit vs raw COPY + upsert, throughput", "ratio", ">=", 0.8)]),
    Bench("commit_modes", "commit_modes.py",
          ["--keys", "1000000", "--runs", "2"],
          ["--keys", "200000", "--runs", "1"],
          None,
          [Figure("Spark commit vs worker commit, rows/s", "ratio", "info")]),
    Bench("processing", "processing.py",
          ["--runs", "4"],
          ["--sentences", "100000", "--runs", "2"],
          None,
          [Figure("Spark processing vs hand-written DataFrame job (5M words)", "ratio_builtin",
                  ">=", 0.9),
           Figure("Python Function vs pandas UDF", "ratio_python_function", ">=", 0.8),
           Figure("ColumnFunction vs the same pandas UDF", "ratio_column_function", ">=", 1.0)],
          needs=()),
    Bench("sources", "sources.py",
          ["--gb", "1.0", "--runs", "2", "--data", ".work/bench/sources"],
          ["--gb", "0.125", "--runs", "1", "--data", ".work/bench/sources-quick"],
          None,
          [Figure("file log on Spark vs spark.read.json, throughput", "ratio", ">=", 0.9),
           Figure("16x batch time / (16 x 1x batch time)", "growth_16x", "<=", 1.0)],
          needs=()),
    Bench("connect_commit", "connect_commit.py",
          ["--rounds", "3"],
          ["--rounds", "1"],
          None,
          [Figure("Spark commit through Connect vs spark-submit", "ratio", "<=", 1.0)]),
    Bench("latency", "latency.py",
          ["--runs", "3"],
          ["--runs", "1"],
          None,
          [Figure("small batch sensor->commit, Connect mode", "latency_connect_s", "<=", 3.0,
                  " s"),
           Figure("same / bare no-op spark-submit", "ratio", "<=", 1.3)],
          needs=("TRIDENT_ZK_HOSTS",)),
    Bench("pipeline", "pipeline.py",
          ["--batches", "8"],
          ["--batches", "4"],
          None,
          [Figure("batches/min, 4 pipelined runs vs 1 (Connect mode)", "ratio", ">=", 2.5)]),
    Bench("drpc", "drpc.py",
          ["--keys", "1000000", "--queries", "2000"],
          ["--keys", "100000", "--queries", "500", "--no-http"],
          None,
          [Figure("DRPC single-key query p99 (client), 1M keys", "client_p99_ms", "<=", 20.0,
                  " ms")]),
    Bench("sss", "sss.py",
          ["--rounds", "5"],
          ["--rounds", "1", "--large-words", "1000000"],
          None,
          [Figure("per small batch (10k words): ours / the faster SSS", "ratio_small", "<=",
                  1.0),
           Figure("per 5M-word batch: ours / the faster SSS", "ratio_large", "<=", 1.0),
           Figure("same, small, vs SSS on the same Connect server", "ratio_small_vs_connect",
                  "<=", 1.0),
           Figure("same, 5M words, vs SSS on the same Connect server", "ratio_large_vs_connect",
                  "<=", 1.0)]),
)  # fmt: skip


@dataclass
class Outcome:
    """What one benchmark printed, and the values read from it."""

    bench: Bench
    mode: str
    seconds: float
    returncode: int
    load: float
    values: dict[str, float] = field(default_factory=dict)
    extra: dict[str, object] = field(default_factory=dict)


def parse(name: str, text: str) -> tuple[dict[str, float], dict[str, object]]:
    """The ``name=value`` lines of ``text`` (the last of each name wins) and the labelled
    lines of benchmark ``name``.

    Examples
    --------
    >>> values, extra = parse("latency", "median sensor->commit: submit mode 9.1s, "
    ...                       "connect mode 2.4s; whole ...\\nratio_submit=1.70\\nratio=0.45")
    >>> values == {"ratio_submit": 1.7, "ratio": 0.45, "latency_connect_s": 2.4}
    True
    >>> _, extra = parse("sss", "small phases (median s): begin 0.010, commit 0.200 (sum 0.210)")
    >>> extra["phases"]
    {'small': {'begin': 0.01, 'commit': 0.2}}
    """
    values: dict[str, float] = {}
    extra: dict[str, object] = {}
    phases: dict[str, dict[str, float]] = {}
    per_batch: dict[str, dict[str, float]] = {}
    scale: dict[int, dict[str, float]] = {}
    dag_phases: dict[str, dict[str, float]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        match = KEY_VALUE.match(line)
        if match:
            values[match.group(1)] = float(match.group(2))
            continue
        if name == "latency" and (m := LATENCY.match(line)):
            values["latency_connect_s"] = float(m.group("connect"))
        elif name == "latency" and (m := DAG_PHASES.match(line)):
            dag_phases[m.group("mode")] = {
                k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)s", m.group("body"))
            }
        elif name == "sss" and (m := PHASES.match(line)):
            phases[m.group("size")] = _phases(m.group("body"))
        elif name == "sss" and (m := PER_BATCH.match(line)):
            per_batch[m.group("size")] = {
                "words": float(m.group("words").replace(",", "")),
                "ours": float(m.group("ours")),
                "sss": float(m.group("sss")),
            }
        elif name == "sources" and (m := SOURCES_INPUT.match(line)):
            values["input_gib"] = float(m.group("gib"))
        elif name == "sources" and (m := SOURCES_SCALE.match(line)):
            scale[int(m.group("factor"))] = {"files": float(m.group("files")),
                                             "seconds": float(m.group("s"))}  # fmt: skip
    for key, found in (
        ("phases", phases),
        ("per_batch", per_batch),
        ("scale", scale),
        ("dag_phases", dag_phases),
    ):
        if found:
            extra[key] = found
    return values, extra


def _phases(body: str) -> dict[str, float]:
    result: dict[str, float] = {}
    for part in body.split(", "):
        label, _, number = part.rpartition(" ")
        try:
            result[label] = float(number)
        except ValueError:
            continue
    return result


def run(bench: Bench, mode: str, logs: Path, lock: str | None, timeout_s: float) -> Outcome:
    """Run one benchmark; keep its output in ``logs/<name>.log``."""
    args = {"full": bench.full, "quick": bench.quick, "tiny": bench.tiny or bench.quick}[mode]
    command = [sys.executable, str(BENCH / bench.script), *args]
    if lock:
        command = ["flock", lock, *command]
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    print(f"== {bench.name}: {' '.join(command[command.index(sys.executable) :])}", flush=True)
    started = time.monotonic()
    load = os.getloadavg()[0]
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout_s)  # fmt: skip
        text, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        text, code = f"{exc.stdout or ''}\n{exc.stderr or ''}\nTIMEOUT after {timeout_s}s", -1
    seconds = time.monotonic() - started
    load = max(load, os.getloadavg()[0])
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{bench.name}.log").write_text(text if isinstance(text, str) else str(text))
    stdout = done.stdout if code != -1 else str(text)
    values, extra = parse(bench.name, stdout)
    outcome = Outcome(bench, mode, seconds, code, load, values, extra)
    shown = [line for line in stdout.splitlines() if KEY_VALUE.match(line.strip())]
    for line in shown:
        print(f"   {line}")
    print(f"   ({seconds:.0f} s, exit {code}, 1-min load average at start/end up to {load:.2f})",
          flush=True)  # fmt: skip
    return outcome


def _from_log(bench: Bench, logs: Path, earlier: Mapping[str, object]) -> Outcome:
    """An outcome read back from a kept output (``--parse-only``)."""
    values, extra = parse(bench.name, (logs / f"{bench.name}.log").read_text())
    number = {k: v for k, v in earlier.items() if isinstance(v, int | float)}
    return Outcome(
        bench,
        str(earlier.get("mode", "?")),
        float(number.get("seconds", 0.0)),
        int(number.get("exit", 0)),
        float(number.get("load", 0.0)),
        values,
        extra,
    )


def table(outcomes: Sequence[Outcome]) -> str:
    """One Markdown table: benchmark, figure, target, measured, pass/miss."""
    lines = ["| bench | figure | target | measured | result |", "|---|---|---|---|---|"]
    for outcome in outcomes:
        for figure in outcome.bench.figures:
            value = outcome.values.get(figure.key)
            shown = "n/a" if value is None else f"{value:g}{figure.unit}"
            if outcome.returncode != 0:
                shown += f" (exit {outcome.returncode})"
            verdict = figure.verdict(value)
            lines.append(f"| {outcome.bench.name} | {figure.label} | {figure.target_text()} | "
                         f"{shown} | {verdict} |")  # fmt: skip
    return "\n".join(lines)


def plot(outcomes: Mapping[str, Outcome], out: Path) -> list[Path]:
    """Write the PNGs the outcomes allow; return their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    sss = outcomes.get("sss")
    phases = sss.extra.get("phases") if sss else None
    per_batch = sss.extra.get("per_batch") if sss else None
    if isinstance(phases, dict) and isinstance(per_batch, dict):
        written.append(_plot_phases(plt, phases, per_batch, out / "latency_phases.png"))
    latency = outcomes.get("latency")
    dag_phases = latency.extra.get("dag_phases") if latency else None
    if isinstance(dag_phases, dict):
        written.append(_plot_dag_phases(plt, dag_phases, out / "dag_latency_phases.png"))
    sources = outcomes.get("sources")
    scale = sources.extra.get("scale") if sources else None
    gib = sources.values.get("input_gib") if sources else None
    if (isinstance(scale, dict) and gib) or isinstance(per_batch, dict):
        written.append(_plot_throughput(
            plt, scale if isinstance(scale, dict) else {}, gib or 0.0,
            per_batch if isinstance(per_batch, dict) else {}, out / "throughput_batch_size.png",
        ))  # fmt: skip
    return written


def _plot_phases(pyplot: Any, phases: dict[str, dict[str, float]],
                 per_batch: dict[str, dict[str, float]], path: Path) -> Path:  # fmt: skip
    fig, axes = pyplot.subplots(1, len(phases), figsize=(6.5 * len(phases), 4.2))
    axes = list(axes) if len(phases) > 1 else [axes]
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3",
              "#8c8c8c"]  # fmt: skip
    for ax, (size, parts) in zip(axes, phases.items(), strict=False):
        left = 0.0
        for i, (label, seconds) in enumerate(parts.items()):
            ax.barh(["ours (Connect)"], [seconds], left=left, color=colors[i % len(colors)],
                    label=label)  # fmt: skip
            left += seconds
        sss_s = per_batch.get(size, {}).get("sss")
        if sss_s is not None:
            ax.barh(["SSS AvailableNow"], [sss_s], color="#333333", label="SSS (whole batch)")
        words = per_batch.get(size, {}).get("words", 0)
        ax.set_title(f"{size} batch, {words:,.0f} words (medians)")
        ax.set_xlabel("seconds")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=5)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot.close(fig)
    return path


def _plot_dag_phases(pyplot: Any, phases: dict[str, dict[str, float]], path: Path) -> Path:
    fig, ax = pyplot.subplots(figsize=(9, 2.8))
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"]
    seen: set[str] = set()
    for mode, parts in phases.items():
        left = 0.0
        for i, (label, seconds) in enumerate(parts.items()):
            shown = label if label not in seen else None
            seen.add(label)
            ax.barh([f"{mode} mode"], [seconds], left=left, color=colors[i % len(colors)],
                    label=shown)  # fmt: skip
            left += seconds
    ax.set_title("one small batch through the DAG, readiness -> committed (bench/latency.py)")
    ax.set_xlabel("seconds (medians)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot.close(fig)
    return path


def _plot_throughput(pyplot: Any, scale: dict[int, dict[str, float]], gib: float,
                     per_batch: dict[str, dict[str, float]], path: Path) -> Path:  # fmt: skip
    panels = [p for p in (scale, per_batch) if p]
    fig, axes = pyplot.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.8))
    axes = list(axes) if len(panels) > 1 else [axes]
    i = 0
    if scale:
        ax = axes[i]
        i += 1
        factors = sorted(scale)
        mib = [gib * 1024 * f / max(factors) / scale[f]["seconds"] for f in factors]
        ax.plot([f for f in factors], mib, marker="o", label="ours (FileLogSpout on Spark)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(factors, [f"{f}x\n{gib * 1024 * f / max(factors):.0f} MiB" for f in factors])
        ax.set_ylabel("MiB/s")
        ax.set_ylim(0, max(mib) * 1.3)
        ax.set_title("file log word count on Spark (bench/sources.py)")
        ax.legend(fontsize=8)
    if per_batch:
        ax = axes[i]
        sizes = sorted(per_batch.values(), key=lambda v: v["words"])
        words = [v["words"] for v in sizes]
        for side, label in (("ours", "ours (Connect mode, whole lifecycle)"),
                            ("sss", "SSS AvailableNow + foreachBatch (faster side)")):  # fmt: skip
            ax.plot(words, [v["words"] / v[side] / 1e6 for v in sizes], marker="o", label=label)
        ax.set_xscale("log")
        ax.set_xlabel("words per batch")
        ax.set_ylabel("million words/s (per batch, to PostgreSQL)")
        ax.set_ylim(0, max(v["words"] / min(v["ours"], v["sss"]) / 1e6 for v in sizes) * 1.3)
        ax.set_title("per batch into PostgreSQL (bench/sss.py)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--quick", action="store_true", help="small sizes: a few minutes")
    sizes.add_argument("--tiny", action="store_true", help="smallest sizes (tests)")
    parser.add_argument("--only", default="", help="comma-separated benchmark names")
    parser.add_argument("--skip", default="", help="comma-separated benchmark names")
    parser.add_argument("--lock", default=None, help="flock this file around each benchmark")
    parser.add_argument("--logs", default=".work/bench/run_all", help="outputs and results")
    parser.add_argument("--plots", default="", help="directory for the PNGs (none if empty)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="per benchmark, seconds")
    parser.add_argument(
        "--parse-only",
        action="store_true",
        help="run nothing: the table and plots from the outputs kept in --logs",
    )
    args = parser.parse_args(argv)
    mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    only = {n for n in args.only.split(",") if n}
    skip = {n for n in args.skip.split(",") if n}
    unknown = (only | skip) - {b.name for b in BENCHES}
    if unknown:
        parser.error(f"unknown benchmarks {sorted(unknown)}; known: {[b.name for b in BENCHES]}")
    order = [n for n in args.only.split(",") if n]  # --only runs in the order given
    chosen = sorted(
        (b for b in BENCHES if (not only or b.name in only) and b.name not in skip),
        key=lambda b: order.index(b.name) if b.name in order else 0,
    )
    if mode == "tiny":
        chosen = [b for b in chosen if b.tiny is not None]
    missing = sorted({n for b in chosen for n in b.needs if not os.environ.get(n)})
    if missing and not args.parse_only:
        print(f"{', '.join(missing)} unset: source scripts/env.sh", file=sys.stderr)
        return 2
    logs = (ROOT / args.logs).resolve()
    started = time.monotonic()
    print(f"run_all: {mode} mode, {len(chosen)} benchmarks, {os.cpu_count()} cores", flush=True)
    saved = logs / "results.json"
    earlier = json.loads(saved.read_text()) if saved.exists() else {}
    if args.parse_only:
        outcomes = [_from_log(b, logs, earlier.get(b.name, {})) for b in chosen
                    if (logs / f"{b.name}.log").exists()]  # fmt: skip
    else:
        outcomes = [run(b, mode, logs, args.lock, args.timeout) for b in chosen]
    print(f"\n{table(outcomes)}\n")
    print(f"total {time.monotonic() - started:.0f} s; outputs in {logs}")
    results = {**earlier, **{o.bench.name: {"mode": o.mode, "seconds": round(o.seconds, 1),
                                            "exit": o.returncode, "load": o.load,
                                            "values": o.values, "extra": o.extra}
                             for o in outcomes}}  # fmt: skip
    logs.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(results, indent=1, default=str) + "\n")
    if args.plots:
        for path in plot({o.bench.name: o for o in outcomes}, (ROOT / args.plots).resolve()):
            print(f"plot: {path}")
    return 0 if all(o.returncode == 0 for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
