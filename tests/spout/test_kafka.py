"""The Kafka spouts in process against the real single broker (``scripts/services.sh start
kafka``): a transactional replay re-reads exactly its offsets, an opaque batch re-emitted
differs and still counts once, partitions added mid-stream are picked up, aborted transactions
are never emitted, retention is refused (transactional) or skipped and recorded (opaque),
malformed records go to dead letters."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.errors import ConfigurationError, MalformedRecordError, SpoutEmitError
from airflow_trident.operation import Count
from airflow_trident.spout.kafka import KafkaSpout, OpaqueKafkaSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology
from tests.harness.kafka import create_topic, unique_topic

pytestmark = pytest.mark.integration


@pytest.fixture
def topic(kafka_bootstrap: str) -> Iterator[str]:
    name = unique_topic("ks")
    create_topic(kafka_bootstrap, name, partitions=2)
    yield name
    from confluent_kafka.admin import AdminClient

    AdminClient({"bootstrap.servers": kafka_bootstrap}).delete_topics([name])


def produce(bootstrap: str, topic: str, words: list[str], partition: int | None = None) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i, word in enumerate(words):
        part = i % 2 if partition is None else partition
        producer.produce(topic, key=word, value=json.dumps({"w": word}), partition=part)
    producer.flush(30)


def word_count(spout: Any, name: str, kind: str = "transactional") -> BatchSteps:
    t = TridentTopology(name)
    t.new_stream("events", spout).group_by(["w"]).persistent_aggregate(
        memory_state(name, kind), Count(), ["n"], name="counts"
    )
    return BatchSteps(t, MemoryCoordinatorStore(t.name), None)


def counts(steps: BatchSteps, words: list[str]) -> dict[str, Any]:
    values = steps.query_state("counts").multi_get([(w,) for w in words])
    return {w: v for w, v in zip(words, values, strict=True) if v is not None}


def emitted(steps: BatchSteps, txid: int) -> dict[str, list[tuple[Any, ...]]]:
    return {p: list(rows) for p, rows in steps.emit(steps.plan(txid))["events"].items()}


def spout(cls: Any, bootstrap: str, topic: str, **kw: Any) -> Any:
    return cls(topic, config={"bootstrap.servers": bootstrap}, value_format="json",
               fields=["w"], timeout_s=10.0, **kw)  # fmt: skip


def test_a_transactional_replay_re_reads_exactly_its_offsets(
    kafka_bootstrap: str, topic: str
) -> None:
    # Given 8 records over two partitions, at most 3 offsets a partition a batch
    produce(kafka_bootstrap, topic, ["a", "b", "a", "b", "a", "b", "c", "d"])
    steps = word_count(spout(KafkaSpout, kafka_bootstrap, topic, max_offsets_per_partition=3),
                       f"k_{topic}")  # fmt: skip
    # When two batches run
    first, second = steps.run_batch(), steps.run_batch()
    # Then they take 3 + 1 offsets of each partition, and every record counts once
    assert (first.records_in, second.records_in) == (6, 2)
    assert counts(steps, ["a", "b", "c", "d"]) == {"a": 3, "b": 3, "c": 1, "d": 1}
    assert steps.is_ready() is False
    # When txid 1 is emitted again after more records arrived: the very same tuples
    before = emitted(steps, 1)
    produce(kafka_bootstrap, topic, ["e", "f"])
    assert steps.is_ready() is True
    assert emitted(steps, 1) == before
    assert sorted(before) == [f"{topic}:0", f"{topic}:1"]
    assert [r[-3] for r in before[f"{topic}:0"]] == [0, 1, 2]  # offsets [0, 3)
    # And its replay changes nothing; the next batch takes the new records
    steps.replay(1)
    assert steps.run_batch().records_in == 2
    assert counts(steps, ["a", "e", "f"]) == {"a": 3, "e": 1, "f": 1}


def test_an_opaque_batch_re_emitted_differs_and_counts_once(
    kafka_bootstrap: str, topic: str
) -> None:
    # Given an opaque spout and 4 records
    produce(kafka_bootstrap, topic, ["a", "b", "a", "b"])
    steps = word_count(spout(OpaqueKafkaSpout, kafka_bootstrap, topic), f"ko_{topic}", "opaque")
    txid = int(steps.begin(None)["txid"])
    first = emitted(steps, txid)
    # When more records arrive before the batch commits, its re-emit takes them too
    produce(kafka_bootstrap, topic, ["c", "a"])
    again = emitted(steps, txid)
    assert sum(map(len, first.values())) == 4
    assert sum(map(len, again.values())) == 6
    # Then the batch (re-emitted once more when it runs) counts each record once
    assert steps.run_batch().records_in == 6
    assert counts(steps, ["a", "b", "c"]) == {"a": 3, "b": 2, "c": 1}
    assert steps.is_ready() is False


def test_partitions_added_mid_stream_are_read_from_their_earliest_offset(
    kafka_bootstrap: str, topic: str
) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions  # type: ignore[attr-defined]

    # Given a spout started at the latest offsets: what is there before is not read
    produce(kafka_bootstrap, topic, ["old", "old"])
    steps = word_count(spout(KafkaSpout, kafka_bootstrap, topic, start="latest"), f"kp_{topic}")
    assert steps.run_batch().records_in == 0
    produce(kafka_bootstrap, topic, ["x", "y"])
    # When the topic grows a third partition and records land in it before the next batch
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    _wait_partitions(admin, topic, 3)
    produce(kafka_bootstrap, topic, ["z", "z"], partition=2)
    # Then the next batch reads partition 2 from its first record (nothing is missed)
    assert steps.run_batch().records_in == 4
    assert counts(steps, ["old", "x", "y", "z"]) == {"x": 1, "y": 1, "z": 2}


def _wait_partitions(admin: Any, topic: str, n: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
        if len(parts) == n and all(p.leader >= 0 for p in parts.values()):
            return
        time.sleep(0.2)
    raise TimeoutError(topic)


def test_aborted_transactions_are_never_emitted_and_ranges_are_offsets(
    kafka_bootstrap: str, topic: str
) -> None:
    from confluent_kafka import Producer

    # Given a transactional producer: committed, aborted, committed
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": topic})
    producer.init_transactions(30)
    for word, abort in (("kept", False), ("aborted", True), ("also", False)):
        producer.begin_transaction()
        for partition in (0, 1):
            producer.produce(topic, value=json.dumps({"w": word}), partition=partition)
        if abort:
            producer.flush(30)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    _wait_stable(kafka_bootstrap, topic, 6)
    steps = word_count(spout(KafkaSpout, kafka_bootstrap, topic), f"ka_{topic}")
    # When a batch runs under read_committed (the default)
    report = steps.run_batch()
    # Then only the committed records are emitted, though the range spans 6 offsets each
    assert report.records_in == 4
    assert counts(steps, ["kept", "aborted", "also"]) == {"kept": 2, "also": 2}
    rows = emitted(steps, report.txid)[f"{topic}:0"]
    assert [r[-3] for r in rows] == [0, 4]  # markers at 1, 3, 5; the aborted record at 2


def test_read_uncommitted_emits_the_aborted_records_in_process(
    kafka_bootstrap: str, topic: str
) -> None:
    # found beside the Kafka source-chaos schedule: the in-process read ignored the spout's
    # isolation (always read_committed) while Spark's read used it
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": topic})
    producer.init_transactions(30)
    for word, abort in (("kept", False), ("aborted", True)):
        producer.begin_transaction()
        for partition in (0, 1):
            producer.produce(topic, value=json.dumps({"w": word}), partition=partition)
        if abort:
            producer.flush(30)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    _wait_stable(kafka_bootstrap, topic, 4)  # each partition: 2 records, 2 markers
    source = spout(KafkaSpout, kafka_bootstrap, topic, isolation="read_uncommitted")
    steps = word_count(source, f"ku_{topic}")
    # When a batch runs in process under read_uncommitted
    report = steps.run_batch()
    # Then the aborted record is emitted too, as a read_uncommitted consumer (and Spark) reads it
    assert report.records_in == 4
    assert counts(steps, ["kept", "aborted"]) == {"kept": 2, "aborted": 2}


def _wait_stable(bootstrap: str, topic: str, end: int) -> None:
    from airflow_trident.spout.kafka_client import consumer, watermarks

    reader = consumer({"bootstrap.servers": bootstrap})
    try:
        deadline = time.monotonic() + 30
        while watermarks(reader, topic, [0, 1], 10) != {0: (0, end), 1: (0, end)}:
            assert time.monotonic() < deadline, watermarks(reader, topic, [0, 1], 10)
            time.sleep(0.2)
    finally:
        reader.close()


def _delete_before(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, partition, offset)])
    for future in futures.values():
        future.result(30)


def test_retention_refuses_a_transactional_replay_and_opaque_skips_and_records(
    kafka_bootstrap: str, topic: str
) -> None:
    produce(kafka_bootstrap, topic, ["a", "b", "a", "b"])
    steps = word_count(spout(KafkaSpout, kafka_bootstrap, topic), f"kr_{topic}")
    assert steps.run_batch().records_in == 4
    # When the records of partition 0 are deleted (as retention does) and txid 1 is re-emitted
    _delete_before(kafka_bootstrap, topic, 0, 2)
    # Then the transactional replay is refused, naming topic, partition and offsets
    with pytest.raises(SpoutEmitError, match=rf"topic '{topic}' partition 0 offsets \[0, 2\)"):
        emitted(steps, 1)
    # And an opaque spout behind the deletion skips what is gone and records the loss
    opaque = OpaqueKafkaSpout(topic, config={"bootstrap.servers": kafka_bootstrap},
                              value_format="json", fields=["w"], timeout_s=10.0)  # fmt: skip
    produce(kafka_bootstrap, topic, ["c", "d"])
    from airflow_trident.attempt import TransactionAttempt
    from airflow_trident.spout.base import ListCollector

    emitter = opaque.get_opaque_emitter()
    meta = opaque.get_partitions_for_batch()
    emitter.get_ordered_partitions(meta)
    collector = ListCollector()
    last = {"topic": topic, "partition": 0, "first": 0, "next": 1}
    found = emitter.emit_partition_batch(TransactionAttempt(2, 1), collector, f"{topic}:0", last)
    assert found["lost"] == [1, 2]
    assert (found["first"], found["next"]) == (2, 3)
    assert [r[1] for r in collector.tuples] == ["c"]


def test_malformed_records_go_to_dead_letters_or_fail_the_batch(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for value in ('{"w": "a"}', "not json", '{"w": 3}', '{"w": "b"}'):
        producer.produce(topic, value=value, partition=0)
    producer.flush(30)
    # Without a dead-letter location the batch fails naming the offset
    failing = word_count(spout(KafkaSpout, kafka_bootstrap, topic), f"km_{topic}")
    with pytest.raises(MalformedRecordError, match=rf"topic '{topic}' partition 0 offset 1"):
        failing.run_batch()
    # With one, the good records count and the bad ones are written there
    letters = tmp_path / "dead"
    steps = word_count(spout(KafkaSpout, kafka_bootstrap, topic, dead_letter=letters),
                       f"kd_{topic}")  # fmt: skip
    assert steps.run_batch().records_in == 2
    assert counts(steps, ["a", "b"]) == {"a": 1, "b": 1}
    [written] = (letters / topic / "0").glob("txid=*.jsonl")
    dead = [json.loads(line) for line in written.read_text().splitlines()]
    assert [(d["offset"], d["record"]) for d in dead] == [(1, "not json"), (2, '{"w": 3}')]


def test_configuration_is_checked_when_the_spout_is_made() -> None:
    with pytest.raises(ConfigurationError, match="kafka_config_id"):
        KafkaSpout("t", kafka_config_id="k", config={"bootstrap.servers": "b:1"})
    assert KafkaSpout("t").kafka_config_id == "kafka_default"  # the Kafka provider's default
    with pytest.raises(ConfigurationError, match="fields"):
        KafkaSpout("t", config={"bootstrap.servers": "b:1"}, value_format="json")
    spout_ = KafkaSpout("t", kafka_config_id="events_kafka")
    assert "events_kafka" in repr(spout_)


def test_a_pattern_picks_up_topics_created_later_and_start_by_timestamp(
    kafka_bootstrap: str,
) -> None:
    prefix = unique_topic("kpat")
    create_topic(kafka_bootstrap, f"{prefix}_a", partitions=1)
    produce(kafka_bootstrap, f"{prefix}_a", ["early"], partition=0)
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    produce(kafka_bootstrap, f"{prefix}_a", ["late"], partition=0)
    config = {"bootstrap.servers": kafka_bootstrap}
    kafka_spout = KafkaSpout(pattern=rf"{prefix}_.*", config=config, value_format="json",
                             fields=["w"], start=cut, timeout_s=10.0)  # fmt: skip
    steps = word_count(kafka_spout, f"kt_{prefix}")
    # The first batch starts at the first record at or after the timestamp
    assert steps.run_batch().records_in == 1
    # A topic matching the pattern created later is read from its earliest offset
    create_topic(kafka_bootstrap, f"{prefix}_b", partitions=1)
    produce(kafka_bootstrap, f"{prefix}_b", ["b1", "b2"], partition=0)
    assert steps.run_batch().records_in == 2
    assert counts(steps, ["early", "late", "b1", "b2"]) == {"late": 1, "b1": 1, "b2": 1}


def test_a_broker_that_does_not_answer_makes_the_spout_wait_and_say_why() -> None:
    kafka_spout = KafkaSpout("t", config={"bootstrap.servers": "127.0.0.1:1"}, timeout_s=1.0)
    assert kafka_spout.is_ready(1) is False
    assert kafka_spout.waiting is not None
    assert "127.0.0.1:1 did not answer" in kafka_spout.waiting


def test_a_kafka_connection_resolves_at_run_time_and_ships_as_its_settings() -> None:
    from airflow_trident import connections

    class Resolver:
        def database_url(self, conn_id: str) -> str:
            raise AssertionError(conn_id)

        def storage_options(self, conn_id: str) -> dict[str, str]:
            raise AssertionError(conn_id)

        def kafka_config(self, conn_id: str) -> dict[str, str]:
            return {"bootstrap.servers": "b:9092", "sasl.password": "secret"}

    kafka_spout = KafkaSpout("t", kafka_config_id="events_kafka_test")
    connections.install_resolver(Resolver())
    try:
        assert kafka_spout.config()["bootstrap.servers"] == "b:9092"
        shipped = json.loads(connections.shipment() or "{}")
        assert shipped["events_kafka_test"] == {
            "kafka_config": {"bootstrap.servers": "b:9092", "sasl.password": "secret"}
        }
        assert "secret" not in repr(kafka_spout)
    finally:
        connections.install_resolver(None)


def test_an_airflow_kafka_connection_is_read_when_the_batch_runs(
    kafka_bootstrap: str, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_trident import connections
    from airflow_trident.hooks.connections import install

    # Given an Airflow `kafka` connection (the Kafka provider's form: settings in its extra)
    extra = {"bootstrap.servers": kafka_bootstrap, "client.id": "trident-test"}
    monkeypatch.setenv("AIRFLOW_CONN_EVENTS_KAFKA", json.dumps({"conn_type": "kafka",
                                                                 "extra": extra}))  # fmt: skip
    produce(kafka_bootstrap, topic, ["a", "b", "a"])
    # When a spout made with only its id (a DAG file parse: no lookup) runs a batch in a task
    connections.install_resolver(None)
    kafka_spout = KafkaSpout(topic, kafka_config_id="events_kafka", value_format="json",
                             fields=["w"], timeout_s=10.0)  # fmt: skip
    assert "events_kafka" in repr(kafka_spout)
    install()
    try:
        steps = word_count(kafka_spout, f"kc_{topic}")
        steps.run_batch()
        # Then it read the topic through the connection
        assert counts(steps, ["a", "b"]) == {"a": 2, "b": 1}
        shipped = json.loads(connections.shipment() or "{}")
        assert shipped["events_kafka"] == {"kafka_config": extra}
    finally:
        connections.install_resolver(None)


@pytest.mark.parametrize(
    ("extra", "says"),
    [({}, "no bootstrap.servers"),
     ({"bootstrap.servers": "b:9092", "oauth_cb": "pkg.mod.token"}, "callback_allowlist")],
)  # fmt: skip
def test_a_kafka_connection_without_servers_or_with_callbacks_is_refused(
    monkeypatch: pytest.MonkeyPatch, extra: dict[str, str], says: str
) -> None:
    from airflow_trident.hooks.connections import AirflowConnections

    monkeypatch.setenv("AIRFLOW_CONN_BAD_KAFKA", json.dumps({"conn_type": "kafka",
                                                             "extra": extra}))  # fmt: skip
    with pytest.raises(ConfigurationError, match=says):
        AirflowConnections().kafka_config("bad_kafka")


def test_a_named_topic_not_on_the_cluster_fails_the_begin_with_the_name_and_a_hint(
    kafka_bootstrap: str, topic: str
) -> None:
    # Given a spout whose topic name has a typo (the real topic exists)
    typo = topic[:-1] + ("x" if topic[-1] != "x" else "y")
    steps = word_count(spout(KafkaSpout, kafka_bootstrap, typo), f"kty_{topic}")
    # When its sensor asks and its begin runs: both fail, and nothing is committed (a retry
    # after the fix re-binds the txid the begin allocated)
    for ask in (lambda: steps.is_ready(), lambda: steps.begin(None)):
        with pytest.raises(ConfigurationError) as raised:
            ask()
        said = str(raised.value)
        assert f"topic {typo!r} not on the cluster" in said
        assert topic in said  # the topic with a similar name
        assert "nothing is committed" in said
    assert steps.store.commits.committed_txid() == 0


def test_a_pattern_matching_no_topic_waits_and_says_so(kafka_bootstrap: str) -> None:
    prefix = unique_topic("knone")
    kafka_spout = spout(KafkaSpout, kafka_bootstrap, (), pattern=rf"{prefix}_.*")
    assert kafka_spout.is_ready(1) is False
    assert kafka_spout.waiting is not None
    assert "matches no topic" in kafka_spout.waiting


def test_a_kafka_connection_whose_extra_is_not_json_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_trident.hooks.connections import AirflowConnections

    torn = {"conn_type": "kafka", "extra": "{bootstrap.servers"}
    monkeypatch.setenv("AIRFLOW_CONN_TORN_KAFKA", json.dumps(torn))
    with pytest.raises(ConfigurationError) as raised:
        AirflowConnections().kafka_config("torn_kafka")
    assert "Kafka connection 'torn_kafka'" in str(raised.value)
    assert "no bootstrap.servers" not in str(raised.value)
