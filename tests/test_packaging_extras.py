"""A user's ``pip install 'airflow-trident[...]'`` gets one owner of ``pyspark/`` by itself.

Two distributions ship the ``pyspark`` package: ``pyspark`` (with its JVM) and
``pyspark-client`` (Connect only, required by the Spark provider's 6.x line). The ``spark``
extra chooses pyspark with the provider's 5.x line, the ``connect`` extra pyspark-client with
6.x (docs/installation.md). The short test asks pip's resolver what each extra would install
(``pip install --dry-run --report``, no install); the slow one, with its own command, installs
Airflow into a fresh virtualenv, then the wheel, and parses a DAG::

    TRIDENT_PACKAGING=1 .venv/bin/pytest -m packaging tests/test_packaging_extras.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
AIRFLOW = "apache-airflow==3.3.2"


def _resolve(tmp_path: Path, extra: str) -> dict[str, str]:
    """What ``pip install '<tree>[extra]'`` into an empty environment would install."""
    report = tmp_path / f"{extra}.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q",
         "--report", str(report), f"{ROOT}[{extra}]", AIRFLOW],
        capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path,
    )  # fmt: skip
    if done.returncode != 0 and "Could not find a version" in done.stderr:
        pytest.skip(f"PyPI unreachable: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    items = json.loads(report.read_text())["install"]
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in items}


@pytest.mark.parametrize(
    ("extra", "owner", "absent"), [("spark", "pyspark", "pyspark-client"),
                                   ("connect", "pyspark-client", "pyspark")],
)  # fmt: skip
def test_each_spark_extra_installs_one_owner_of_pyspark(
    tmp_path: Path, extra: str, owner: str, absent: str
) -> None:
    # When pip resolves the extra with Airflow 3.3
    resolved = _resolve(tmp_path, extra)
    # Then exactly one distribution owns pyspark/
    assert owner in resolved, sorted(resolved)
    assert absent not in resolved, (absent, resolved.get(absent))
    # and pyarrow is at least pyspark's floor
    assert int(resolved["pyarrow"].split(".")[0]) >= 18


@pytest.mark.packaging
@pytest.mark.skipif(not os.environ.get("TRIDENT_PACKAGING"), reason="slow: TRIDENT_PACKAGING=1")
def test_the_wheel_installs_into_an_existing_airflow(tmp_path: Path) -> None:
    # Given a fresh virtualenv with Airflow installed first, as a team's own
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    clean.update(AIRFLOW_HOME=str(tmp_path / "home"), AIRFLOW__CORE__LOAD_EXAMPLES="False")

    def run(*args: str) -> str:
        done = subprocess.run([python, *args], capture_output=True, text=True, env=clean,
                              timeout=1800, check=False, cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done.stdout

    run("-m", "pip", "install", "-q", AIRFLOW)
    # When the wheel is installed with the spark extra
    wheel_dir = tmp_path / "dist"
    run("-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheel_dir), str(ROOT))
    wheel = next(wheel_dir.glob("airflow_trident-*.whl"))
    run("-m", "pip", "install", "-q", f"{wheel}[spark,postgres]")
    # Then pip is content, one pyspark owns the files, and a DAG parses
    run("-m", "pip", "check")
    versions = run("-c", "import pyspark, importlib.metadata as m; "
                         "print(pyspark.__version__, m.version('pyspark'))").split()  # fmt: skip
    assert versions[0] == versions[1], versions
    parsed = run("-c", "from airflow_trident.dag import trident_dag; "
                       "d = trident_dag('airflow_trident.examples.topologies:word_count', "
                       "dag_id='wc'); print(sorted(d.task_ids))")  # fmt: skip
    assert "process" in parsed, parsed
