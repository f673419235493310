"""Delta and Iceberg tables read back by Spark SQL through Spark's own connectors, and committed
through Spark's own writers (``commit_mode="spark"``), each writer recognising the other's
commits on retry, on both state backends (the backend is the Iceberg catalog).

One child process per parameter runs the scenarios (:mod:`tests.harness.lakehouse_spark`): a
Spark with these connectors needs their session extensions at its start, which the
session-wide test session has not, and a JVM is one per process. In the test command: Iceberg
with the SQLite catalog (~45 s). In the long tier: Delta (its Spark writer rebuilds the table's
snapshot state before every append: ~60 s more), and both formats on PostgreSQL.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest

from tests.harness import PROJECT_ROOT, with_project_path

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

RUNS = [
    pytest.param(("sqlite", "iceberg"), id="sqlite-iceberg"),
    pytest.param(("sqlite", "delta"), id="sqlite-delta", marks=pytest.mark.long),
    pytest.param(("postgresql", "delta,iceberg"), id="postgresql", marks=pytest.mark.long),
]


@pytest.fixture(scope="module", params=RUNS)
def found(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    backend, formats = request.param
    if backend == "postgresql":
        request.getfixturevalue("pg_url")  # the services' PostgreSQL: $TRIDENT_PG_URL
    work = tmp_path_factory.mktemp(f"lakehouse-{backend}")
    done = subprocess.run(
        [sys.executable, "-m", "tests.harness.lakehouse_spark", str(work), backend, formats],
        capture_output=True, text=True, timeout=900, check=False, cwd=PROJECT_ROOT,
        env=with_project_path(os.environ),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def rows(words: dict[str, int]) -> int:
    return sum(words.values())


def scenario(found: dict[str, Any], lake: str, name: str) -> dict[str, Any]:
    """One scenario's findings; the test is skipped where this run did not run its format."""
    if lake not in found:
        pytest.skip(f"this run has no {lake} scenarios")
    result: dict[str, Any] = found[lake][name]
    return result


def test_spark_sql_reads_a_table_delta_rs_wrote_through_failures_and_replays(
    found: dict[str, Any],
) -> None:
    # Given txids 1..3 committed by delta-rs (txid 2 dying after its Delta commit and retried),
    # txids 3 and 1 then applied to the table again
    delta = scenario(found, "delta", "python")
    # Then Spark SQL reads every word of the 3 batches exactly once, all written by delta-rs
    assert delta["committed"] == 3
    assert delta["words"] == found["expected"]["3"]
    assert delta["rows"] == rows(found["expected"]["3"])
    assert set(delta["engines"]) == {"delta-rs"}


def test_spark_and_delta_rs_recognise_each_others_commits(found: dict[str, Any]) -> None:
    # Given txid 1 committed by Spark's Delta writer; txid 2 appended by Spark's writer, its
    # compare-and-set lost, retried by delta-rs; txid 3 the other way round; txid 4's Spark
    # commit dying between its data commit and its app-level record, retried on Spark
    delta = scenario(found, "delta", "spark")
    three, four = rows(found["expected"]["3"]), rows(found["expected"]["4"])
    per_batch = four - three
    # Then each retry added nothing: the table grew by one batch per txid
    assert delta["after_spark_2"] == delta["after_python_retry_2"] == three - per_batch
    assert delta["after_python_3"] == delta["after_spark_retry_3"] == three
    assert "app-level record" in delta["crash"]
    # the crash left the app-level transaction at txid 3 (3 partitions); the retry set txid 4's
    assert delta["app_before_retry"] == 3 * 4096 + 3
    assert delta["app_after_retry"] == 4 * 4096 + 3
    assert delta["partitions"] == {"0": 4, "1": 4, "2": 4}
    # And Spark SQL reads every word of the 4 batches exactly once, written by both engines
    assert delta["committed"] == 4
    assert delta["words"] == found["expected"]["4"]
    assert delta["rows"] == four
    assert delta["engines"]["spark"] >= 3
    assert delta["engines"]["delta-rs"] >= 3


def test_spark_sql_reads_a_table_pyiceberg_wrote_through_failures_and_replays(
    found: dict[str, Any],
) -> None:
    # Given txids 1..3 committed by pyiceberg, txid 2 dying after its Iceberg commits and
    # retried, txids 3 and 1 applied again
    iceberg = scenario(found, "iceberg", "python")
    # Then Spark SQL, through the sink's catalog, reads every word of the 3 batches once
    assert iceberg["committed"] == 3
    assert iceberg["words"] == found["expected"]["3"]
    assert iceberg["rows"] == rows(found["expected"]["3"])
    assert set(iceberg["writers"]) == {"pyiceberg"}


def test_spark_and_pyiceberg_recognise_each_others_commits(found: dict[str, Any]) -> None:
    iceberg = scenario(found, "iceberg", "spark")
    one = rows(found["expected"]["4"]) - rows(found["expected"]["3"])  # rows per batch
    assert iceberg["after_spark_1"] == one
    # txid 2 by Spark's writer, its compare-and-set lost, retried by pyiceberg: nothing added
    assert iceberg["after_spark_2"] == iceberg["after_python_retry_2"] == 2 * one
    # txid 3 by pyiceberg, retried by Spark's writer: nothing added
    assert iceberg["after_python_3"] == iceberg["after_spark_retry_3"] == 3 * one
    # txid 4: Spark staged its append and died before publishing it: nothing reached main,
    # and the retry wrote the batch once
    assert "died between Spark's append and its publish" in iceberg["crash"]
    assert iceberg["after_crash_4"] == 3 * one
    assert iceberg["after_spark_retry_4"] == 4 * one
    assert iceberg["refs_after_crash"] == ["main"]
    # txid 5: another writer moved main under Spark's append: the publish was refused and
    # Spark appended again on the new main
    assert iceberg["raced"] == 1
    assert iceberg["refs_at_end"] == ["main"]
    # Then main holds each txid's 3 partitions once (and the other writer's one snapshot)
    assert Counter(iceberg["main_txids"]) == {"1": 3, "2": 3, "3": 3, "4": 3, "5": 3, None: 1}
    assert iceberg["properties"] == {
        "trident.txid.iceberg_spark_words.events": "5/3",
        **{f"trident.txid.iceberg_spark_words.events.p{i}of3": "5" for i in range(3)},
    }
    # And Spark SQL and pyiceberg read every word of the 5 batches exactly once
    five = found["expected"]["5"]
    assert iceberg["committed"] == 5
    assert iceberg["words"] == {**five, "intruder": 1}
    assert iceberg["rows"] == iceberg["pyiceberg_rows"] == rows(five) + 1
    assert iceberg["writers"]["spark"] >= 9
    assert iceberg["writers"]["pyiceberg"] >= 3
