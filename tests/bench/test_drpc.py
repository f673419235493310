"""A smoke run of ``bench/drpc.py`` on 10,000 keys through the client (no timing asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_the_drpc_benchmark_runs_and_prints_its_figures(
    zk_hosts: str, pg_url: str, unique_name: str, tmp_path: Path
) -> None:
    # Given the services, When the benchmark runs on 10,000 keys without the API server
    command = [sys.executable, str(ROOT / "bench" / "drpc.py"), "--keys", "10000",
               "--queries", "50", "--no-http", "--table", unique_name]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TRIDENT_ZK_HOSTS": zk_hosts,
           "TRIDENT_PG_URL": pg_url, "AIRFLOW_HOME": str(tmp_path / "airflow")}  # fmt: skip
    try:
        done = subprocess.run(
            ["timeout", "-s", "KILL", "300", *command],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
    finally:
        with sa.create_engine(pg_url).begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {unique_name}"))
    # Then every answer was checked against the loaded value and the figures are printed
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith("client: 50 single-key queries: p50=") for line in lines)
    assert lines[-1].startswith("client_p99_ms="), lines[-5:]
