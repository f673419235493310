"""Kafka against the real single broker (``scripts/services.sh start kafka``): a transactional
producer's records, an aborted transaction between two committed ones, read with
``read_committed`` by confluent-kafka and the same offset ranges read by Spark's
``format("kafka")`` (the connector jar of ``jvm/pom.xml`` on ``spark.jars``) in local mode,
through Spark Connect and in a ``spark-submit`` run, every field of every record alike
(docs/jvm.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.harness import with_project_path
from tests.harness.jars import spark_jars_csv
from tests.harness.kafka import create_topic, unique_topic
from tests.harness.kafka_read import confluent_records, spark_records

pytestmark = pytest.mark.integration

Ranges = dict[int, tuple[int, int]]
PER_TRANSACTION = 6


@pytest.fixture(scope="module")
def produced(kafka_bootstrap: str) -> tuple[str, Ranges]:
    """A 2-partition topic: transaction 0 committed, 1 aborted, 2 committed (with a record
    without key, value or headers); the ranges ``[0, high watermark)`` of each partition."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = unique_topic("smoke")
    create_topic(kafka_bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": topic})
    producer.init_transactions(30)
    for batch in range(3):
        producer.begin_transaction()
        for i in range(PER_TRANSACTION):
            headers = [("batch", str(batch).encode()), ("raw", bytes([0, 255, i]))]
            producer.produce(
                topic, key=f"k{batch}.{i}", value=json.dumps({"batch": batch, "i": i}),
                partition=i % 2, headers=headers,
            )  # fmt: skip
        if batch == 1:
            # sent first: librdkafka drops unsent records on abort, leaving nothing in the log
            producer.flush(30)
            producer.abort_transaction(30)
            continue
        if batch == 2:
            producer.produce(topic, partition=1)
        producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"wm-{topic}"})
    ranges = {p: (0, consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1])
              for p in (0, 1)}  # fmt: skip
    consumer.close()
    return topic, ranges


@pytest.fixture(scope="module")
def committed(kafka_bootstrap: str, produced: tuple[str, Ranges]) -> list[list[Any]]:
    topic, ranges = produced
    return confluent_records(kafka_bootstrap, topic, ranges)


def test_read_committed_skips_the_aborted_transaction_and_offsets_have_gaps(
    produced: tuple[str, Ranges], committed: list[list[Any]]
) -> None:
    topic, ranges = produced
    # Then only the two committed transactions are read, the record without key too
    batches = sorted({json.loads(r[5])["batch"] for r in committed if r[5] is not None})
    assert batches == [0, 2]
    assert len(committed) == 2 * PER_TRANSACTION + 1
    bare = [r for r in committed if r[4] is None]
    assert [(r[0], r[1], r[5], r[6]) for r in bare] == [(topic, 1, None, [])]
    assert ["raw", "\x00\xff\x03"] in next(r[6] for r in committed if r[4] == "k0.3")
    # And a partition's offsets are not a count: the aborted records and the transaction
    # markers sit between (3 records and 1 marker a transaction in each partition)
    for partition, (first, end) in ranges.items():
        offsets = [r[2] for r in committed if r[1] == partition]
        assert end - first == len(offsets) + 3 + 3
        assert offsets[:4] == [0, 1, 2, 8]


def test_spark_reads_the_same_records_in_local_mode(
    spark: Any, kafka_bootstrap: str, produced: tuple[str, Ranges], committed: list[list[Any]]
) -> None:
    topic, ranges = produced
    # When the session-wide Spark (the connector on its spark.jars) reads the same ranges
    records = spark_records(spark, kafka_bootstrap, topic, ranges)
    # Then every field of every record is the consumer's
    assert records == committed
    # And a range ending inside the topic stops there (end exclusive)
    first_two = spark_records(spark, kafka_bootstrap, topic, {0: (0, 2)})
    assert first_two == [r for r in committed if r[1] == 0 and r[2] < 2]


def _read_in_child(args: list[str], out: Path) -> list[list[Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_CONNECT")}
    env = with_project_path(env)
    done = subprocess.run(
        [sys.executable, "-m", "tests.harness.kafka_read", *args, str(out)],
        capture_output=True, text=True, timeout=240, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    records: list[list[Any]] = json.loads(out.read_text())
    return records


def test_spark_connect_reads_the_same_records(
    connect_url: str, kafka_bootstrap: str, produced: tuple[str, Ranges],
    committed: list[list[Any]], tmp_path: Path,
) -> None:  # fmt: skip
    topic, ranges = produced
    # When a Spark Connect client of the session-wide server (the connector jars on its
    # spark.jars since its start) reads the ranges: format("kafka") resolves on the server
    records = _read_in_child(
        ["--remote", connect_url, kafka_bootstrap, topic, json.dumps(ranges)], tmp_path / "out"
    )
    # Then it gets the consumer's records, field for field
    assert records == committed


@pytest.mark.long  # spark-submit with spark.jars: the Connect server above is one (its start)
@pytest.mark.timeout(600)
def test_a_spark_submit_run_gets_the_jars_of_trident_spark_jars(
    kafka_bootstrap: str, produced: tuple[str, Ranges], committed: list[list[Any]],
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from airflow_trident.hooks.spark import job_conf

    topic, ranges = produced
    # Given a deployment naming the connector jars in [trident] spark_jars (none in the DAG)
    monkeypatch.setenv("AIRFLOW__TRIDENT__SPARK_JARS", spark_jars_csv())
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", '{"conn_type": "spark", "host": "local[1]"}')
    script = tmp_path / "kafka_read.py"  # the file alone: spark-submit's application
    shutil.copy(Path(__file__).parents[1] / "harness" / "kafka_read.py", script)
    out = tmp_path / "out.json"
    # When the batch's spark-submit (its conf as the process step builds it) reads the ranges
    hook = SparkSubmitHook(
        conf=job_conf(None), conn_id="spark_local", name="kafka-read",
        application_args=[kafka_bootstrap, topic, json.dumps(ranges), str(out)],
    )  # fmt: skip
    hook.submit(str(script))
    # Then it got the jars and read the consumer's records
    assert json.loads(out.read_text()) == committed
