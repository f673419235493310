"""Sessions built by the Spark runtime: a Spark Connect session is usable, then stopped."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from airflow_trident.runtime.spark.session import remote_session
from airflow_trident.testing.connect import running_connect_server


def test_remote_session_answers_queries_and_is_stopped_after_the_block(tmp_path: Path) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Java is not installed: a Spark Connect server needs a JVM")
    # Given a running Spark Connect server
    with running_connect_server(tmp_path / "connect") as url:
        # When a block runs a query on the session remote_session opens
        with remote_session(url) as spark:
            total = spark.range(10).selectExpr("sum(id) AS s").collect()[0]["s"]
            stopped_inside = spark.is_stopped

        # Then the server answered, and the session is stopped once the block ends
        assert total == 45
        assert not stopped_inside
        assert spark.is_stopped
