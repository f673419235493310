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


def test_remote_session_answers_queries_and_is_stopped_after_the_block(connect_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_CONNECT")}
    # Given a running Spark Connect server (the test session's: stopping a session leaves it up)
    # When a block runs a query on the session remote_session opens
    done = subprocess.run(
        [sys.executable, "-c", CHILD, connect_url],
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


SHARED = """
import json, sys
from pyspark.sql import SparkSession
from airflow_trident.runtime.spark.session import remote_session
url, seen = sys.argv[1], {}
with remote_session(url, share="topology-a") as spark:
    spark.range(3).createOrReplaceTempView("left_behind")
    seen["first"] = spark.session_id
with remote_session(url, share="topology-a") as spark:
    seen["second"] = spark.session_id
    seen["same_key_sees_it"] = spark.catalog.tableExists("left_behind")
with remote_session(url, share="topology-b") as spark:
    seen["other_key_sees_it"] = spark.catalog.tableExists("left_behind")
with remote_session(url) as spark:
    seen["own_session_sees_it"] = spark.catalog.tableExists("left_behind")
    own = spark.session_id
# the server ends the shared session (as its idle timeout does): its id is refused from now on
SparkSession.builder.remote(f"{url}/;session_id={seen['first']}").create().stop()
with remote_session(url, share="topology-a") as spark:
    seen["third"] = spark.session_id
    seen["count_after_end"] = spark.range(4).count()
    seen["sees_it_after_end"] = spark.catalog.tableExists("left_behind")
# a session of the block's own was released at its end
try:
    SparkSession.builder.remote(f"{url}/;session_id={own}").create().range(1).count()
    seen["own_released"] = False
except Exception as exc:
    seen["own_released"] = "SESSION_CLOSED" in str(exc)
print(json.dumps(seen))
"""


@pytest.mark.long  # a Connect server of its own: ~30 s
def test_a_shared_session_outlives_its_blocks_and_is_replaced_once_the_server_ends_it(
    tmp_path: Path,
) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Java is not installed: a Spark Connect server needs a JVM")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_CONNECT")}
    # Given a running Spark Connect server
    with running_connect_server(tmp_path / "connect") as url:
        # When blocks share a key, use another key, or none, and the server ends the shared one
        done = subprocess.run(
            [sys.executable, "-c", SHARED, url],
            capture_output=True, text=True, timeout=300, env=env, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # Then blocks of one key attach to one server-side session that outlives them
    assert seen["first"] == seen["second"]
    assert seen["same_key_sees_it"] is True
    # and no other key, nor a block's own session, sees into it
    assert seen["other_key_sees_it"] is False
    assert seen["own_session_sees_it"] is False
    # and once the server ended it, the next block of the key attaches to a new session
    assert seen["third"] != seen["first"]
    assert seen["count_after_end"] == 4
    assert seen["sees_it_after_end"] is False
    # and a block's own session is released at the block's end
    assert seen["own_released"] is True
