"""The Kafka demo end to end (``bash scripts/kafka-demo.sh``, :mod:`tests.harness.run_kafka_dag`):
sentences produced into a topic of the shared broker before each batch, the Kafka word count
DAG's batches as real DAG runs on a Spark Connect server, a replay of txid 1, and the counts
equal to the words produced. Long tier (~3 min on 2 cores): the DAG's parse and its task are
checked by ``tests/test_dags.py``, the spout's batches by ``tests/spout/test_kafka.py``."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.harness import PROJECT_ROOT, with_project_path
from tests.harness.servers import free_port

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.long]

BATCHES, RECORDS = 2, 30
SENTENCES = (  # airflow_trident.examples.kafka.SENTENCES, restated: the expectation's own
    "the cow jumped over the moon",
    "the man went to the store and bought some candy",
    "four score and seven years ago",
    "how many apples can you eat",
    "to be or not to be the person",
)


def _expected() -> Counter[str]:
    """The words of the sentences the demo produces for its batches (seed = batch number)."""
    words: Counter[str] = Counter()
    for batch in range(1, BATCHES + 1):
        rng = random.Random(batch)
        for _ in range(RECORDS):
            words.update(rng.choice(SENTENCES).split())
    return words


@pytest.mark.timeout(960)
def test_the_kafka_demo_counts_exactly_what_was_produced_and_a_replay_changes_nothing(
    kafka_bootstrap: str, zk_hosts: str, tmp_path: Path
) -> None:
    # Given a topic and a ZooKeeper root of this test's own
    name = f"kafka_demo_{uuid.uuid4().hex[:8]}"
    env = with_project_path({**os.environ, "TRIDENT_KAFKA_BOOTSTRAP": kafka_bootstrap,
                             "TRIDENT_ZK_HOSTS": zk_hosts})  # fmt: skip
    # When the demo runs two batches and the replay of txid 1
    done = subprocess.run(
        ["timeout", "-s", "KILL", "900", sys.executable, "-m", "tests.harness.run_kafka_dag",
         "--batches", str(BATCHES), "--records", str(RECORDS), "--work-dir", str(tmp_path),
         "--topic", name, "--zk-root", f"/{name}", "--connect-port", str(free_port())],
        env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, check=False,
        start_new_session=True,
    )  # fmt: skip
    out = done.stdout
    # Then it succeeds, every check passed
    assert done.returncode == 0, out[-4000:] + done.stderr[-4000:]
    checks = (
        "every DAG run succeeded",
        "the replay of txid 1 changed no count",
        "each txid read its batch's records",
        "every count equals the words produced",
    )
    for check in checks:
        assert f"OK: {check}" in out, out
    # And each txid read its batch's offsets of the two partitions
    for txid, (first, nxt) in ((1, (0, RECORDS // 2)), (2, (RECORDS // 2, RECORDS))):
        line = next(x for x in out.splitlines() if x.startswith(f"  txid {txid}:"))
        assert f"read {RECORDS} records" in line
        for partition in (0, 1):
            assert f"'{name}:{partition}': '[{first}, {nxt})'" in line
    # And the printed counts are the words produced, exactly
    printed = {
        m[1]: (int(m[2]), int(m[3]))
        for m in re.finditer(r"^  (\w+) +(\d+) produced +(\d+)$", out, re.MULTILINE)
    }
    expected = _expected()
    assert {w: c for w, (c, _) in printed.items() if c} == dict(expected)
    assert all(c == p for c, p in printed.values())
