"""A task process imports nothing heavy that its task does not use (issue 21, part 3).

Every Airflow task process parses the DAG file: ``airflow_trident.dag`` and the operator,
sensor and trigger modules its tasks are made of, then builds the DAG. None of that needs
Arrow, numpy, pandas or Spark (the process step on Spark Connect and the commit's read of the
staged files import them when they run), and a Spark Connect DAG has no ``spark-submit`` task,
so it does not need the Spark provider's ``SparkSubmitOperator`` either (which imports the
Kubernetes clients: ~0.9 s per task process). Checked in a fresh interpreter through
``sys.modules``, not by timing; ``python -X importtime -c 'import airflow_trident.dag'`` shows
the costs (``docs/performance.md``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("pyarrow", "numpy", "pandas", "pyspark")
SPARK_SUBMIT = "airflow.providers.apache.spark.operators.spark_submit"

_CHILD = r"""
import json, sys
import airflow_trident.dag
from airflow_trident.dag import trident_dag
import airflow_trident.operators.assets, airflow_trident.operators.batch
import airflow_trident.operators.connect, airflow_trident.operators.lineage
import airflow_trident.operators.metrics, airflow_trident.tasks.notes
import airflow_trident.tasks.base
import airflow_trident.sensors.begin, airflow_trident.operators.express
import airflow_trident.sensors.ready
import airflow_trident.triggers.data, airflow_trident.triggers.zookeeper
dags = [
    trident_dag("airflow_trident.examples.topologies:word_count", dag_id=f"imports_{layout}",
                process_mode="connect", spark_connect_conn_id="spark_connect_default",
                layout=layout)
    for layout in ("standard", "compact", "express")
]
roots = sorted({m.split(".")[0] for m in sys.modules})
spark_provider = sorted(m for m in sys.modules if m.startswith("airflow.providers.apache.spark"))
print(json.dumps({"roots": roots, "spark_provider": spark_provider,
                  "tasks": sorted(t for d in dags for t in d.task_ids)}))
"""


@pytest.fixture(scope="module")
def task_process_modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    home = tmp_path_factory.mktemp("airflow_home")
    env = dict(os.environ, AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               TRIDENT_HOME=str(Path(home) / "trident"))  # fmt: skip
    done = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                          text=True, timeout=240, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_parsing_a_trident_dag_imports_no_arrow_numpy_pandas_or_spark(
    task_process_modules: dict[str, object],
) -> None:
    # Given a fresh interpreter that imported the DAG factory, the operators, sensors and
    # triggers, and built a Connect-mode DAG of each layout (as a task process parses its file)
    roots = task_process_modules["roots"]
    assert isinstance(roots, list)
    assert "batch.run" in task_process_modules["tasks"]  # type: ignore[operator]
    # Then none of the heavy libraries was imported
    assert sorted(set(HEAVY) & set(roots)) == []


def test_a_connect_mode_dag_does_not_import_the_spark_submit_operator(
    task_process_modules: dict[str, object],
) -> None:
    # Given the same interpreter: no DAG of it has a spark-submit task
    # Then the Spark provider's SparkSubmitOperator (and the Kubernetes clients) were not imported
    assert SPARK_SUBMIT not in task_process_modules["spark_provider"]  # type: ignore[operator]
    roots = task_process_modules["roots"]
    assert isinstance(roots, list)
    assert sorted({"kubernetes", "kubernetes_asyncio"} & set(roots)) == []
