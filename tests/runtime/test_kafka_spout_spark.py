"""The Kafka spouts on Spark (local[2], the session-wide fixture, the connector on its
``spark.jars``) against the real single broker: Spark's ``format("kafka")`` read of a batch's
ranges, and the driver's read of a small batch (``read_here_records``), give every field of
every record the in-process consumer gives (a transactional producer's committed records only,
headers, a record without key or value, invalid UTF-8), and a word count processed on Spark
equals the in-process one, replays included, on both read paths.

``READS``: Spark's connector (``read_here_records=0``) and the driver (the default limit; these
batches are far below it)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any, cast

import pytest

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.errors import MalformedRecordError, SpoutEmitError
from airflow_trident.operation import Count
from airflow_trident.runtime.local import LocalBatchProcessor
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.kafka import KafkaSpout, OpaqueKafkaSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology
from tests.harness.kafka import create_topic, unique_topic

pytestmark = pytest.mark.integration

READS = {"connector": 0, "driver": None}
"""``read_here_records`` of each read path: 0 = Spark's connector, ``None`` = the default."""


@pytest.fixture(scope="module")
def topic(kafka_bootstrap: str) -> str:
    """Two partitions: a committed transaction, an aborted one, a committed one with a record
    without key and value and one whose value is not UTF-8 nor JSON; headers on most."""
    from confluent_kafka import Producer

    name = unique_topic("kss")
    create_topic(kafka_bootstrap, name, partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": name})
    producer.init_transactions(30)
    for batch in range(3):
        producer.begin_transaction()
        for i in range(6):
            headers: list[tuple[str, str | bytes | None]] = [
                ("batch", str(batch).encode()),
                ("raw", bytes([0, 255, i])),
                ("none", None),
            ]
            value = json.dumps({"w": f"w{i % 3}", "n": i})
            producer.produce(name, key=f"k{batch}.{i}", value=value, partition=i % 2,
                             headers=headers)  # fmt: skip
        if batch == 1:
            producer.flush(30)
            producer.abort_transaction(30)
            continue
        if batch == 2:
            producer.produce(name, partition=1)  # no key, no value, no headers
            producer.produce(name, key=b"\xff", value=b"\xfe not json", partition=0)
        producer.commit_transaction(30)
    return name


def _spout(cls: Any, bootstrap: str, topic: str, value_format: str, **kw: Any) -> Any:
    extra: dict[str, Any] = {}
    if value_format in ("json", "csv"):
        extra = {"fields": ["w", "n"], "types": {"n": "bigint"}, "rescue": True}
    return cls(topic, config={"bootstrap.servers": bootstrap}, value_format=value_format,
               timeout_s=15.0, **extra, **kw)  # fmt: skip


def _steps(
    spout: Any, name: str, kind: str = "transactional", staging: Path | None = None
) -> BatchSteps:
    t = TridentTopology(name)
    t.new_stream("events", spout).group_by(["key"]).persistent_aggregate(
        memory_state(name, kind), Count(), ["n_records"], name="counts"
    )
    area = None if staging is None else StagingArea(str(staging), t.name)
    return BatchSteps(t, MemoryCoordinatorStore(t.name), area)


@pytest.mark.parametrize("value_format", ["str", "bytes", "json"])
def test_spark_reads_every_field_of_every_record_as_the_consumer(
    spark: Any, kafka_bootstrap: str, topic: str, value_format: str
) -> None:
    from airflow_trident.runtime.spark import inputs
    from airflow_trident.runtime.spark.native import native_partitions

    spout = _spout(KafkaSpout, kafka_bootstrap, topic, value_format)
    steps = _steps(spout, f"kdiff_{value_format}_{topic}")
    txid = int(steps.begin(None)["txid"])
    sources = steps.emit(steps.plan(txid))
    parts = sorted(sources["events"].items())
    if value_format == "json":  # partition 0's record whose value is no UTF-8 fails the batch
        local, on_spark = _errors(spark, steps, txid, sources)
        assert on_spark == local
        assert f"topic {topic!r} partition 0 offset" in local
        assert "\\\\xfe not json" in local  # (repr of the value as text: \\xfe)
        return
    # When the batch's ranges are read in process and by Spark
    local = [row for _, rows in parts for row in rows]
    frame = native_partitions(spark, cast(Any, parts), "pid")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        frame.explain()
    assert out.getvalue().count("Scan KafkaRelation") == 1, out.getvalue()  # both partitions: one
    fields = spout.output_fields
    here = inputs.source(spark, fields, sources["events"], tuple(fields), exact=True,
                         sentinel=False, sample_rows=0)  # fmt: skip
    assert not here.pickled  # the driver's table is of the read spec's types
    # Then every field of every record is the same (committed records only: 2 x 6 + 2)
    assert len(local) == 14
    by_offset = sorted(local, key=lambda r: (r[3], r[4]))
    for df in (frame, here.df):
        on_spark = [tuple(r[f] for f in fields) for r in df.collect()]
        on_spark = [tuple(bytes(v) if isinstance(v, bytearray) else v for v in r)
                    for r in on_spark]  # fmt: skip
        assert sorted(on_spark, key=lambda r: (r[3], r[4])) == by_offset
    bare = [r for r in local if r[0] is None]
    assert [(r[1], r[3], r[6]) for r in bare] == [(None, 1, None)]
    raw = json.loads(next(r for r in local if r[0] in ("k0.3", b"k0.3"))[6])
    assert raw == [["batch", "0"], ["raw", "\x00\\xff\x03"], ["none", None]]


@pytest.mark.parametrize("read", list(READS))
def test_a_word_count_on_spark_equals_the_in_process_one_and_replays_exactly(
    spark: Any,
    kafka_bootstrap: str,
    topic: str,
    tmp_path: Path,
    read: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_trident.batch.on_spark import process_on_spark
    from airflow_trident.runtime.spark.readers import kafka

    if read == "driver":  # the path taken: the connector's read is never planned
        monkeypatch.setattr(kafka, "read_kafka", _not_here)

    results = {}
    for side in ("local", "spark"):
        spout = _spout(KafkaSpout, kafka_bootstrap, topic, "str", max_offsets_per_partition=5)
        steps = _steps(spout, f"kwc_{side}_{read}_{topic}", staging=tmp_path / side)
        for _ in range(4):
            txid = int(steps.begin(None)["txid"])
            if side == "local":
                steps.process_local(txid)
            else:
                process_on_spark(steps, spark, txid, 0.0, read_here_records=READS[read])
            steps.commit(txid)
            steps.success(txid)
        # a replay of a committed txid changes nothing
        steps.replay(2)
        keys = [f"k{b}.{i}" for b in range(3) for i in range(6)] + ["\\xff"]
        results[side] = steps.query_state("counts").multi_get([(k,) for k in keys])
    assert results["spark"] == results["local"]
    assert sum(v for v in results["local"] if v is not None) == 13  # the keyless one: None key


@pytest.mark.parametrize("read", list(READS))
def test_an_opaque_batch_on_spark_counts_each_record_once(
    spark: Any, kafka_bootstrap: str, topic: str, tmp_path: Path, read: str
) -> None:
    from airflow_trident.batch.on_spark import process_on_spark

    spout = _spout(OpaqueKafkaSpout, kafka_bootstrap, topic, "str", max_offsets=8)
    steps = _steps(spout, f"kop_{read}_{topic}", "opaque", tmp_path)
    for _ in range(4):
        txid = int(steps.begin(None)["txid"])
        process_on_spark(steps, spark, txid, 0.0, read_here_records=READS[read])
        steps.commit(txid)
        steps.success(txid)
    keys = [f"k{b}.{i}" for b in (0, 2) for i in range(6)] + ["\\xff"]
    assert steps.query_state("counts").multi_get([(k,) for k in keys]) == [1] * 13


def _not_here(*args: Any) -> Any:
    raise AssertionError("the driver reads this batch: Spark's connector must not")


def _errors(
    spark: Any, steps: BatchSteps, txid: int, sources: Any, read: str = "connector"
) -> tuple[str, str]:
    """The malformed-record errors of batch ``txid`` (emitted as ``sources``) processed in
    process and on Spark (``read``: a key of ``READS``)."""
    from airflow_trident.runtime.spark import SparkBatchProcessor

    with pytest.raises(MalformedRecordError) as local:
        LocalBatchProcessor(steps.topology).process(txid, sources)
    processor = SparkBatchProcessor(steps.topology, read_here_records=READS[read])
    # (the driver's read raises at process, Spark's connector at collect)
    with (
        pytest.raises(MalformedRecordError) as on_spark,
        processor.process(spark, txid, sources) as result,
    ):
        result.collect("counts")
    return str(local.value), str(on_spark.value)


GOOD = {"json": b'{"w": "a", "n": 1}', "csv": b"a,1"}
BAD = [
    ("json", None),  # a tombstone
    ("json", b"\xfe{}"),  # no UTF-8
    ("json", b"  "),
    ("json", b"oops"),
    ("json", b"[1]"),
    ("json", b'{"w": 1, "n": 2}'),  # a type other than the field's (no rescue)
    ("csv", b"a"),  # another number of cells
    ("csv", b"a\nb,1"),  # a line break in an unquoted cell
    ("csv", b"a,x"),
]


@pytest.mark.parametrize("read", list(READS))
@pytest.mark.parametrize(("value_format", "bad"), BAD, ids=[f"{f}-{b!r}" for f, b in BAD])
def test_spark_fails_a_batch_naming_the_first_malformed_record_as_in_process(
    spark: Any, kafka_bootstrap: str, value_format: str, bad: bytes | None, read: str
) -> None:
    from confluent_kafka import Producer

    # Given partition 0 with 3 records then a malformed one, and partition 1 starting with one
    # (its task fails at once, likely before partition 0's: not the first in process)
    name = unique_topic(f"kbad_{value_format}")
    create_topic(kafka_bootstrap, name, partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    good = GOOD[value_format]
    for partition, values in ((1, [bad, good]), (0, [good, good, good, bad])):
        for value in values:
            producer.produce(name, key=b"k", value=value, partition=partition)
    producer.flush(30)
    config = {"bootstrap.servers": kafka_bootstrap}
    spout = KafkaSpout(name, config=config, timeout_s=15.0, value_format=value_format,
                       fields=["w", "n"], types={"n": "bigint"})  # fmt: skip
    steps = _steps(spout, f"kbad_{value_format}_{name}")
    txid = int(steps.begin(None)["txid"])
    sources = steps.emit(steps.plan(txid))
    # When the batch runs in process and on Spark: the same error, naming partition 0's record
    local, on_spark = _errors(spark, steps, txid, sources, read)
    assert on_spark == local
    assert f"topic {name!r} partition 0 offset 3:" in local


@pytest.mark.parametrize("read", list(READS))
def test_a_replay_of_an_aged_out_range_is_refused_on_spark_as_in_process(
    kafka_bootstrap: str, spark: Any, tmp_path: Path, read: str
) -> None:
    # found by the Kafka source-chaos schedule (issue 35): on Spark the replay failed with the
    # connector's OffsetOutOfRangeException (failOnDataLoss) instead of the documented refusal
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    from airflow_trident.batch.on_spark import process_on_spark

    # Given txid 1 read offsets [0, 4) of a one-partition topic
    name = unique_topic("kss_gone")
    create_topic(kafka_bootstrap, name, partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(4):
        producer.produce(name, key=f"k{i % 2}", value=f"v{i}", partition=0)
    producer.flush(30)
    steps = _steps(_spout(KafkaSpout, kafka_bootstrap, name, "str"), name, staging=tmp_path)
    assert steps.run_batch().records_in == 4
    # When retention deletes offsets below 2 and txid 1 is replayed on Spark
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(name, 0, 2)]).values():
        future.result(30)
    steps.begin("replay", 1)
    # Then the replay is refused with the in-process read's error: topic, partition, offsets
    with pytest.raises(SpoutEmitError, match=rf"topic '{name}' partition 0 offsets \[0, 4\)"):
        process_on_spark(steps, spark, 1, 0.0, read_here_records=READS[read])
