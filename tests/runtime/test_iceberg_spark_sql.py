"""Iceberg tables read back by Spark SQL through Iceberg's Spark connector, and committed
through Spark's own Iceberg writer (``commit_mode="spark"``), each writer recognising the
other's commits on retry, on both state backends (the backend is the Iceberg catalog).

Each test runs :mod:`tests.harness.iceberg_spark` in a child process: a Spark with Iceberg's
connector needs its session extension at its start, which the session-wide test session has
not (one JVM per process). ~45 s each: SQLite in the test command, PostgreSQL in the long tier.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.harness import PROJECT_ROOT, with_project_path

pytestmark = pytest.mark.integration


def run_harness(work: Path, backend: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.harness.iceberg_spark", str(work), backend],
        capture_output=True, text=True, timeout=900, check=False, cwd=PROJECT_ROOT,
        env=with_project_path(os.environ),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.long)])
def test_spark_reads_and_writes_the_tables_both_writers_commit(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    if backend == "postgresql":
        request.getfixturevalue("pg_url")  # the services' PostgreSQL: $TRIDENT_PG_URL
    found = run_harness(tmp_path, backend)
    three, five = found["expected"]["3"], found["expected"]["5"]
    per_batch = (sum(five.values()) - sum(three.values())) // 2

    # Given txids 1..3 committed by pyiceberg, txid 2 dying after its Iceberg commits and
    # retried, txids 3 and 1 applied again: Spark SQL reads every word of the 3 batches once
    python = found["python"]
    assert python["committed"] == 3
    assert python["words"] == three
    assert python["rows"] == sum(three.values())
    assert set(python["writers"]) == {"pyiceberg"}

    # Given Spark's writer and pyiceberg taking turns, each retrying the other's commit
    spark = found["spark"]
    one = sum(found["expected"]["3"].values()) // 3  # rows per batch
    assert one == per_batch
    assert spark["after_spark_1"] == one
    # txid 2 by Spark, its compare-and-set lost, retried by pyiceberg: nothing added
    assert spark["after_spark_2"] == spark["after_python_retry_2"] == 2 * one
    # txid 3 by pyiceberg, retried by Spark: nothing added
    assert spark["after_python_3"] == spark["after_spark_retry_3"] == 3 * one
    # txid 4: Spark staged its append and died before publishing it: nothing reached main,
    # and the retry wrote the batch once
    assert "died between Spark's append and its publish" in spark["crash"]
    assert spark["after_crash_4"] == 3 * one
    assert spark["after_spark_retry_4"] == 4 * one
    assert spark["refs_after_crash"] == ["main"]
    # txid 5: another writer moved main under Spark's append: the publish was refused and
    # Spark appended again on the new main
    assert spark["raced"] == 1
    assert spark["refs_at_end"] == ["main"]

    # Then main holds each txid's 3 partitions once (and the other writer's one snapshot)
    assert Counter(spark["main_txids"]) == {"1": 3, "2": 3, "3": 3, "4": 3, "5": 3, None: 1}
    assert spark["properties"] == {
        "trident.txid.iceberg_spark_words.events": "5/3",
        **{f"trident.txid.iceberg_spark_words.events.p{i}of3": "5" for i in range(3)},
    }
    # And Spark SQL and pyiceberg read every word of the 5 batches exactly once
    assert spark["committed"] == 5
    assert spark["words"] == {**five, "intruder": 1}
    assert spark["rows"] == spark["pyiceberg_rows"] == sum(five.values()) + 1
    assert spark["writers"]["spark"] >= 9
    assert spark["writers"]["pyiceberg"] >= 3
