"""Sessions built by the Spark runtime: a Spark Connect session is usable, then stopped, and
leaves no Connect flag behind for a later spark-submit of the same process.

The session runs in a child process: pyspark refuses a remote session in a process that already
has a regular one (the test session's shared ``spark`` fixture).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.connect import running_connect_server

CHILD = """
import json, os, sys
from airflow_trident.runtime.spark.session import remote_session
with remote_session(sys.argv[1]) as spark:
    total = spark.range(10).selectExpr("sum(id) AS s").collect()[0]["s"]
    inside = spark.is_stopped
    flagged = "SPARK_CONNECT_MODE_ENABLED" in os.environ
print(json.dumps({"total": total, "stopped_inside": inside,
                  "stopped_after": spark.is_stopped,
                  "flag_inside": flagged,
                  "flag_after": "SPARK_CONNECT_MODE_ENABLED" in os.environ}))
"""


def test_remote_session_answers_queries_and_is_stopped_after_the_block(tmp_path: Path) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Java is not installed: a Spark Connect server needs a JVM")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_CONNECT")}
    # Given a running Spark Connect server
    with running_connect_server(tmp_path / "connect") as url:
        # When a block runs a query on the session remote_session opens
        done = subprocess.run(
            [sys.executable, "-c", CHILD, url],
            capture_output=True, text=True, timeout=180, env=env, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # Then the server answered, the session is stopped once the block ends, and pyspark's
    # process-wide Connect flag is gone with it
    assert seen == {
        "total": 45,
        "stopped_inside": False,
        "stopped_after": True,
        "flag_inside": True,
        "flag_after": False,
    }
