"""One SparkSession for every Spark test (local[2], 4 shuffle partitions, UI off, Arrow on).

Spark's Python workers import the operations these tests define (``tests.runtime...``), so the
repository root goes on their ``PYTHONPATH``. Without Java the Spark tests are skipped.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = str(Path(__file__).resolve().parents[2])


def pytest_configure(config: pytest.Config) -> None:
    # pyspark 4.3 warns about pandas 3 on every Arrow UDF; the runtime does not use pandas
    config.addinivalue_line(
        "filterwarnings", "ignore:PySpark does not yet fully support pandas:FutureWarning"
    )


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The session-wide local SparkSession."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Java is not installed: the Spark runtime tests need a JVM")
    pytest.importorskip("pyspark")
    paths = [ROOT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from airflow_trident.runtime.spark.session import local_session

    session = local_session("local[2]", shuffle_partitions=4, app_name="airflow-trident-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
