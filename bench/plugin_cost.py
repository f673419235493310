"""Benchmark: what airflow-trident's plugins cost every Airflow task process.

Usage::

    flock /tmp/heavy.lock .venv/bin/python bench/plugin_cost.py [--rounds 7]

Every Airflow process loads the plugins of every installed distribution's ``airflow.plugins``
entry point (a task process does, to integrate macros, before its task runs). Each sample is a
fresh Python process under a throw-away ``AIRFLOW_HOME`` that imports the plugins manager and
then loads the plugins; it reports the seconds and the resident memory (RSS) the loading added,
and the warnings it raised. Two variants alternate in every round:

* *ours*: every installed plugin, airflow-trident's included;
* *without*: the same with airflow-trident's entry points filtered out (the baseline).

Two managers are measured: ``airflow.plugins_manager.ensure_plugins_loaded()`` (the
scheduler, the API server, ``airflow dags test``) and
``airflow.sdk.plugins_manager.integrate_macros_plugins()`` (what a task process runs first).
Prints, per manager, the median and
spread (min..max) of each variant and of the difference (ours - without), then the last line
``task_extra_s=<median seconds> task_extra_mb=<median MB>`` of the task path.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

DIST = "airflow-trident"

_CHILD = r"""
import json, sys, time, warnings

def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0

manager, without, dist_name = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    if manager == "core":
        import airflow.plugins_manager as pm
        import airflow._shared.module_loading as ml
    else:
        import airflow.sdk.plugins_manager as pm
        import airflow.sdk._shared.module_loading as ml
    if without:
        original = ml.entry_points_with_dist

        def filtered(group):
            for ep, dist in original(group):
                if dist.metadata["Name"] != dist_name:
                    yield ep, dist

        ml.entry_points_with_dist = filtered
    before_mb, t0 = rss_mb(), time.perf_counter()
    if manager == "core":
        pm.ensure_plugins_loaded()
        plugins = pm._get_plugins()[0]
    else:
        pm.integrate_macros_plugins()
        plugins = pm._get_plugins()[0]
    seconds = time.perf_counter() - t0
    after_mb = rss_mb()
print(json.dumps({
    "seconds": seconds,
    "mb": after_mb - before_mb,
    "plugins": sorted(p.name for p in plugins),
    "warnings": sorted({w.category.__name__ for w in caught}),
}))
"""


def sample(manager: str, *, without: bool, home: Path) -> dict[str, object]:
    """One fresh process loading the plugins; its JSON report."""
    env = dict(os.environ, AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               PYTHONWARNINGS="always")  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, manager, "1" if without else "0", DIST],
        env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"sample {manager} without={without} failed:\n{done.stderr[-3000:]}")
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    # Airflow routes warnings to its log (py.warnings): count them there too
    logged = set(re.findall(r"category=(\w+)", done.stdout + done.stderr))
    report["warnings"] = sorted(logged | set(report["warnings"]))  # type: ignore[call-overload]
    return report


def _stat(values: list[float]) -> str:
    return f"{statistics.median(values):7.3f} ({min(values):.3f}..{max(values):.3f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (>= 5)")
    args = parser.parse_args(argv)
    last: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="plugin_cost_") as tmp:
        home = Path(tmp)
        sample("core", without=True, home=home)  # warm the page cache, write airflow.cfg
        for manager in ("core", "sdk"):
            runs: dict[bool, list[dict[str, object]]] = {False: [], True: []}
            for i in range(args.rounds):
                order = (False, True) if i % 2 == 0 else (True, False)
                for without in order:
                    runs[without].append(sample(manager, without=without, home=home))
            ours = [float(r["seconds"]) for r in runs[False]]  # type: ignore[arg-type]
            base = [float(r["seconds"]) for r in runs[True]]  # type: ignore[arg-type]
            ours_mb = [float(r["mb"]) for r in runs[False]]  # type: ignore[arg-type]
            base_mb = [float(r["mb"]) for r in runs[True]]  # type: ignore[arg-type]
            extra = [a - b for a, b in zip(ours, base, strict=True)]
            extra_mb = [a - b for a, b in zip(ours_mb, base_mb, strict=True)]
            print(f"== {manager} plugins manager, {args.rounds} alternating rounds")
            print(f"  plugins (ours):    {runs[False][0]['plugins']}")
            print(f"  warnings (ours):   {runs[False][0]['warnings']}")
            print(f"  warnings (without):{runs[True][0]['warnings']}")
            print(f"  load s   ours     {_stat(ours)}   without {_stat(base)}")
            print(f"  load MB  ours     {_stat(ours_mb)}   without {_stat(base_mb)}")
            print(f"  ours - without:   {_stat(extra)} s   {_stat(extra_mb)} MB")
            last = {"s": statistics.median(extra), "mb": statistics.median(extra_mb)}
    print(f"task_extra_s={last['s']:.3f} task_extra_mb={last['mb']:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
