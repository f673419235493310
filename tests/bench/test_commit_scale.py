"""A smoke run of ``bench/commit_scale.py`` on 1,000 vs 20,000 stored keys (no timing asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_the_commit_scale_benchmark_runs_and_prints_its_figures(
    pg_url: str, unique_name: str, tmp_path: Path
) -> None:
    # Given PostgreSQL, When the benchmark commits 1,000 keys against 1,000 and 20,000 stored
    command = [sys.executable, str(ROOT / "bench" / "commit_scale.py"), "--small", "1000",
               "--large", "20000", "--batch", "1000", "--runs", "2", "--explain",
               "--prefix", unique_name]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TRIDENT_PG_URL": pg_url}
    try:
        done = subprocess.run(
            ["timeout", "-s", "KILL", "300", *command],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
    finally:
        with sa.create_engine(pg_url).begin() as conn:
            for n in (1000, 20000):
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {unique_name}_{n}"))
    # Then both tables were loaded, each run timed, the upsert's plan and the ratio printed
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "loaded 20,000 keys" in done.stdout
    assert sum(" keys stored: " in line for line in lines) == 4
    assert "Conflict Arbiter Indexes" in done.stdout
    assert lines[-1].startswith("ratio="), lines[-5:]
