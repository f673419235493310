"""``bench/run_all.py``: its parsing and table on real benchmark output, its plots, and a tiny
run of the benchmarks that need no Spark (no timing asserted)."""

# ruff: noqa: E501  (benchmark output lines, verbatim)
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

# lines as bench/sss.py, bench/sources.py and bench/latency.py printed them on this machine
SSS_OUTPUT = """\
small round 1: SSS on Connect 2.60 s (its batch 0.85 s), SSS local[2] 0.79 s (its batch 0.64 s), ours 1.04 s
small (10,000 words per batch) median per batch: ours 0.942 s, SSS 0.674 s (SSS local[2], the faster; SSS on Connect 2.385 s, its batch alone 0.766 s, SSS local[2] 0.674 s, its batch alone 0.562 s), 2 rounds
small phases (median s): begin 0.011, session open 0.001, attempt+emit 0.019, plan on Spark 0.094, Spark job + staging 0.752, session close 0.030, commit 0.029, success 0.006 (sum 0.942)
large (500,000 words per batch) median per batch: ours 1.229 s, SSS 0.766 s (SSS local[2], the faster; SSS on Connect 2.381 s, its batch alone 0.786 s, SSS local[2] 0.766 s, its batch alone 0.668 s), 2 rounds
large phases (median s): begin 0.010, session open 0.001, attempt+emit 0.013, plan on Spark 0.182, Spark job + staging 0.977, session close 0.013, commit 0.027, success 0.005 (sum 1.229)
ratio_small_vs_connect=0.395 (10,000 words per batch, ours / SSS on Connect)
ratio_large_vs_connect=0.516 (500,000 words per batch, ours / SSS on Connect)
ratio_small=1.398 (ours / the faster SSS)
ratio_large=1.605 (ours / the faster SSS)
ratio=1.398
ratio=1.605
"""
SOURCES_OUTPUT = """\
input: 1.00 GiB of JSON lines in /work/main/.work/bench/sources/log (0.0s to generate or find)
batch 1x (8 files): median 2.10s, 2.10s per 1x
batch 4x (32 files): median 6.40s, 1.60s per 1x
batch 16x (128 files): median 22.00s, 1.38s per 1x
growth_4x=0.762 (time / (1x time * 4); 1.0 is linear)
growth_16x=0.655 (time / (1x time * 16); 1.0 is linear)
ratio=0.780
"""
LATENCY_OUTPUT = """\
median sensor->commit: submit mode 9.1s, connect mode 2.4s; whole command: 20.3s / 12.0s; bare spark-submit 5.3s
phases connect: begin=3.30s process=2.06s commit=0.12s gaps=0.09s
ratio_submit=1.72
ratio=0.45
"""


@pytest.fixture(scope="module")
def run_all() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_all", ROOT / "bench" / "run_all.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_all"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_sss_output_gives_the_ratios_the_phases_and_the_per_batch_times(
    run_all: ModuleType,
) -> None:
    # Given bench/sss.py's output, When it is parsed
    values, extra = run_all.parse("sss", SSS_OUTPUT)
    # Then the named ratios (the last line of a name wins), the phases and the medians are read
    assert values["ratio_small"] == 1.398
    assert values["ratio_large_vs_connect"] == 0.516
    assert values["ratio"] == 1.605
    assert extra["phases"]["large"]["Spark job + staging"] == 0.977
    assert list(extra["phases"]["small"])[:2] == ["begin", "session open"]
    assert extra["per_batch"]["small"] == {"words": 10000.0, "ours": 0.942, "sss": 0.674}


def test_the_latency_and_sources_outputs_give_their_labelled_figures(run_all: ModuleType) -> None:
    # Given bench/latency.py's and bench/sources.py's output, When they are parsed
    latency, dag = run_all.parse("latency", LATENCY_OUTPUT)
    sources, extra = run_all.parse("sources", SOURCES_OUTPUT)
    # Then the connect-mode latency and phases, the input size and the 1x/4x/16x times are read
    assert latency["latency_connect_s"] == 2.4
    assert latency["ratio"] == 0.45
    assert dag["dag_phases"] == {
        "connect": {"begin": 3.3, "process": 2.06, "commit": 0.12, "gaps": 0.09}
    }
    assert sources["input_gib"] == 1.0
    assert sources["growth_16x"] == 0.655
    assert extra["scale"][16] == {"files": 128.0, "seconds": 22.0}


def test_the_table_marks_each_figure_against_its_target(run_all: ModuleType) -> None:
    # Given the outcomes of sss and latency (the latency one failed and printed no ratio)
    by_name = {b.name: b for b in run_all.BENCHES}
    values, extra = run_all.parse("sss", SSS_OUTPUT)
    sss = run_all.Outcome(by_name["sss"], "full", 60.0, 0, 0.5, values, extra)
    latency = run_all.Outcome(by_name["latency"], "full", 5.0, 1, 0.5, {}, {})
    # When the table is made
    rows = run_all.table([sss, latency]).splitlines()
    # Then each figure has its row: misses, passes, and n/a where nothing was printed
    assert len(rows) == 2 + len(by_name["sss"].figures) + len(by_name["latency"].figures)
    assert rows[2].endswith("| <= 1 | 1.398 | miss |"), rows[2]
    assert any("vs SSS on the same Connect server" in r and r.endswith("| pass |") for r in rows)
    assert rows[-1].endswith("| n/a (exit 1) | n/a |"), rows[-1]


def test_the_plots_are_written_from_the_parsed_outputs(run_all: ModuleType, tmp_path: Path) -> None:
    # Given parsed sss and sources outputs
    by_name = {b.name: b for b in run_all.BENCHES}
    outcomes = {}
    for name, text in (("sss", SSS_OUTPUT), ("sources", SOURCES_OUTPUT)):
        values, extra = run_all.parse(name, text)
        outcomes[name] = run_all.Outcome(by_name[name], "full", 1.0, 0, 0.0, values, extra)
    # When the plots are drawn
    written = run_all.plot(outcomes, tmp_path)
    # Then both PNGs exist and are PNG files
    assert sorted(p.name for p in written) == ["latency_phases.png", "throughput_batch_size.png"]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.integration
def test_a_tiny_run_prints_the_table_of_the_benchmarks_without_spark(
    zk_hosts: str, pg_url: str, tmp_path: Path
) -> None:
    # Given the services, When run_all runs its tiny mode (zk_nodes and commit_scale)
    command = [sys.executable, str(ROOT / "bench" / "run_all.py"), "--tiny",
               "--logs", str(tmp_path / "logs")]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TRIDENT_ZK_HOSTS": zk_hosts,
           "TRIDENT_PG_URL": pg_url}  # fmt: skip
    done = subprocess.run(
        ["timeout", "-s", "KILL", "300", *command],
        env=env, capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    # Then both ran, each ratio line was read into the table, and the outputs were kept
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert [r.split(" | ")[0] for r in rows[1:]] == ["| zk_nodes", "| commit_scale"], rows
    assert all(r.endswith(("| pass |", "| miss |")) for r in rows[1:]), rows
    assert (
        (tmp_path / "logs" / "zk_nodes.log")
        .read_text()
        .rstrip()
        .splitlines()[-1]
        .startswith("ratio=")
    )
    assert (tmp_path / "logs" / "results.json").exists()
