"""Run transactional Kafka word-count batches on a Spark Connect session, reading every batch
through Spark's Kafka connector (``read_here_records=0``), for each connection given: the
Connect half of tests/runtime/test_kafka_secured.py (a Connect session cannot share a process
with the tests' classic session)::

    python -m tests.harness.kafka_secure_batch sc://127.0.0.1:15002 TOPIC CONFIGS_JSON OUT

``CONFIGS_JSON``: ``{name: librdkafka settings}``; ``OUT`` gets ``{name: {word: count}}`` or
``{name: "error: ..."}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.operation import Count
from airflow_trident.spout.kafka import KafkaSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology

WORDS = [f"w{i}" for i in range(6)]


def word_count(config: dict[str, Any], topic: str, name: str, staging: Path | None) -> BatchSteps:
    """A transactional word count of ``topic``'s JSON values ``{"w": ...}`` over ``config``."""
    from airflow_trident.runtime.staging import StagingArea

    spout = KafkaSpout(topic, config=config, value_format="json", fields=["w"], timeout_s=15.0)
    t = TridentTopology(name)
    t.new_stream("events", spout).group_by(["w"]).persistent_aggregate(
        memory_state(name, "transactional"), Count(), ["n"], name="counts"
    )
    area = None if staging is None else StagingArea(str(staging), t.name)
    return BatchSteps(t, MemoryCoordinatorStore(t.name), area)


def counts(steps: BatchSteps) -> dict[str, int]:
    """The committed counts of :data:`WORDS`."""
    values = steps.query_state("counts").multi_get([(w,) for w in WORDS])
    return {w: int(v) for w, v in zip(WORDS, values, strict=True) if v is not None}


def on_spark(steps: BatchSteps, spark: Any) -> None:
    """One batch begun, processed on ``spark`` through the connector, committed, succeeded."""
    from airflow_trident.batch.on_spark import process_on_spark

    txid = int(steps.begin(None)["txid"])
    process_on_spark(steps, spark, txid, 0.0, read_here_records=0)
    steps.commit(txid)
    steps.success(txid)


def main(argv: list[str]) -> int:
    remote, topic, configs, out = argv
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(remote).getOrCreate()
    found: dict[str, Any] = {}
    for name, config in json.loads(configs).items():
        steps = word_count(config, topic, f"ksec_connect_{name.replace('-', '_')}",
                           Path(out).parent / f"staging_{name}")  # fmt: skip
        try:
            on_spark(steps, spark)
            found[name] = counts(steps)
        except Exception as exc:  # reported to the test, which names the mechanism
            found[name] = f"error: {type(exc).__name__}: {str(exc)[:1500]}"
    Path(out).write_text(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
