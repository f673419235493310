"""The Kafka sink against the real broker (``scripts/services.sh start kafka``): each txid's
records exactly once for a ``read_committed`` consumer, through crashes at every point of the
commit, replays, and a zombie producer; no mocks (docs/sinks/kafka.md)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import ConfigurationError, NotExactlyOnceError, StateError
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.memory import MemoryOpaqueSpout
from airflow_trident.state.kafka import KafkaSinkState, KafkaWriter, kafka_sink
from airflow_trident.topology import TridentTopology
from tests.harness.kafka import create_topic, unique_topic
from tests.harness.kafka_sinks import (
    CRASH_POINTS,
    SENTENCES,
    Crash,
    CrashingKafkaSink,
    assert_each_word_once,
    changelog_topology,
    commit_in_child,
    expected_words,
    kafka_sink_for,
    read_topic,
    words_topology,
)


@pytest.fixture
def topic(kafka_bootstrap: str) -> str:
    name = unique_topic("sink")
    create_topic(kafka_bootstrap, name, partitions=3)
    return name


def commit(state: Any, txid: int, records: list[tuple[Any, Any]]) -> None:
    state.begin_commit(txid)
    state.write(records)
    state.commit(txid)


# -- one commit partition at a time ---------------------------------------------------------


def test_each_txid_once_with_its_headers_and_replays_add_nothing(
    kafka_bootstrap: str, topic: str
) -> None:
    # Given a sink of two commit partitions, each committing txids 1 and 2
    sink = kafka_sink_for("ktopo", topic, kafka_bootstrap, name="events")
    parts = [sink.make_state(i, 2) for i in range(2)]
    for txid in (1, 2):
        for i, state in enumerate(parts):
            commit(state, txid, [(f"k{k}", {"txid": txid, "p": i, "k": k}) for k in range(5)])
    # When the newest txid and an older one are committed again (new state objects: a retry)
    for txid in (2, 1):
        for i in range(2):
            commit(sink.make_state(i, 2), txid, [("dup", {"txid": txid, "p": i})])
    # Then a read_committed consumer reads each record once, with its headers
    records = read_topic(kafka_bootstrap, topic)
    assert Counter((r.value["txid"], r.value["p"]) for r in records) == {
        (t, p): 5 for t in (1, 2) for p in (0, 1)
    }
    assert all(r.key != "dup" for r in records)
    first = next(r for r in records if r.value == {"txid": 2, "p": 1, "k": 3})
    assert first.headers == {
        "trident.topology": "ktopo",
        "trident.sink": "events",
        "trident.txid": "2",
        "trident.partition": "1/2",
    }
    # And a key always lands in one topic partition (partitioned by key)
    by_key: dict[str, set[int]] = {}
    for r in records:
        by_key.setdefault(r.key, set()).add(r.partition)
    assert all(len(p) == 1 for p in by_key.values())
    assert len({p for ps in by_key.values() for p in ps}) > 1
    # And the groups hold the txids: the sink's last (with its partition count), each partition's
    assert sink.records() == {"topology": "ktopo", "sink": "events", "txid": 2, "partitions": 2}
    assert [sink.make_state(i, 2).written_txid() for i in range(2)] == [2, 2]


def test_the_newest_txid_replayed_with_another_partition_count_is_refused(
    kafka_bootstrap: str, topic: str
) -> None:
    sink = kafka_sink_for("kshape", topic, kafka_bootstrap)
    commit(sink.make_state(0, 2), 1, [("a", 1)])
    with pytest.raises(StateError, match="written with 2 partitions and is committed again with 3"):
        commit(sink.make_state(0, 3), 1, [("a", 1)])
    # an older txid with another count is complete: nothing, no error
    commit(sink.make_state(0, 2), 2, [("b", 2)])
    commit(sink.make_state(1, 3), 1, [("a", 1)])
    assert sorted(r.key for r in read_topic(kafka_bootstrap, topic)) == ["a", "b"]


def test_a_zombie_with_the_same_transactional_id_is_fenced(
    kafka_bootstrap: str, topic: str
) -> None:
    # Given an attempt of txid 1, partition 0, that produced its records and hangs before its
    # commit, while a newer attempt of the same partition commits the txid
    sink = kafka_sink_for("kzombie", topic, kafka_bootstrap)
    newer: list[KafkaSinkState] = []

    class Zombie(KafkaSinkState):
        def _end_transaction(self, producer: Any, txid: int) -> None:
            producer.flush(30)
            retry = sink.make_state(0, 1)
            commit(retry, txid, [("k", "from the newer attempt")])
            newer.append(retry)
            super()._end_transaction(producer, txid)

    zombie = Zombie(sink, 0, 1)
    # When the zombie wakes up and commits
    with pytest.raises(StateError, match="fenced"):
        commit(zombie, 1, [("k", "from the zombie"), ("k2", "from the zombie")])
    # Then only the newer attempt's records are read, once
    records = read_topic(kafka_bootstrap, topic)
    assert [(r.key, r.value) for r in records] == [("k", "from the newer attempt")]
    assert newer[0].written_txid() == 1


def test_two_producers_of_one_transactional_id_the_older_is_fenced(
    kafka_bootstrap: str, topic: str
) -> None:
    # The broker's rule the sink relies on, with two raw producers of one transactional.id
    from confluent_kafka import KafkaException, Producer

    settings = {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"raw.{topic}"}
    old = Producer(settings)
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(topic, b"old", key=b"o")
    old.flush(30)
    new = Producer(settings)
    new.init_transactions(30)  # fences the old one and aborts its transaction
    new.begin_transaction()
    new.produce(topic, b"new", key=b"n")
    new.commit_transaction(30)
    with pytest.raises(KafkaException) as caught:
        old.commit_transaction(30)
    assert caught.value.args[0].fatal()
    records = read_topic_raw(kafka_bootstrap, topic)
    assert records == [b"new"]


def read_topic_raw(bootstrap: str, topic: str) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("r"),
                         "isolation.level": "read_committed"})  # fmt: skip
    try:
        parts = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        found = [m for m in consumer.consume(100, timeout=5) if m.error() is None]
        return [m.value() for m in found]
    finally:
        consumer.close()


def test_serialisation_json_str_bytes_and_null(kafka_bootstrap: str, topic: str) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    sink = kafka_sink(topic, config={"bootstrap.servers": kafka_bootstrap}, topology="kser",
                      key_format="str", value_format="bytes")  # fmt: skip
    commit(sink.make_state(), 1, [(7, b"\x00raw"), ("k", None), (None, b"v")])
    with pytest.raises(StateError, match="not bytes"):
        commit(sink.make_state(), 2, [("k", "text")])
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_topic("r"),
                         "isolation.level": "read_committed"})  # fmt: skip
    parts = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    found = [m for m in consumer.consume(10, timeout=5) if m.error() is None]
    consumer.close()
    assert sorted(((m.key(), m.value()) for m in found), key=repr) == sorted(
        [(b"7", b"\x00raw"), (b"k", None), (None, b"v")], key=repr
    )
    json_sink = kafka_sink_for("kjson", topic, kafka_bootstrap)
    with pytest.raises(StateError, match="not JSON"):
        commit(json_sink.make_state(), 1, [("k", {1, 2})])
    # A record that does not serialise fails only a commit that writes: a replay of a written
    # txid writes nothing and passes (its check runs beside the serialising), and a later
    # record's failure leaves nothing of its txid, naming that record
    commit(json_sink.make_state(), 1, [("k", {"n": 1})])
    commit(json_sink.make_state(), 1, [("k", {1, 2})])
    with pytest.raises(StateError, match=r"record value \{1, 2\} is not JSON"):
        commit(json_sink.make_state(), 2, [("a", 1), ("k", {1, 2})])
    assert (json_sink.records() or {}).get("txid") == 1


def test_a_record_the_broker_refuses_fails_the_commit_and_nothing_is_visible(
    kafka_bootstrap: str,
) -> None:
    # Given a topic whose record batches may hold 100,000 bytes, and a sink of one commit
    # partition
    topic = unique_topic("sink_small")
    create_topic(kafka_bootstrap, topic, partitions=2, config={"max.message.bytes": "100000"})
    sink = kafka_sink_for("krefused", topic, kafka_bootstrap)
    # When txid 1 holds a 200,000-byte value among small ones (the client accepts it, the broker
    # refuses it for good: no delivery callback sees it, the transaction's commit does)
    good = [(f"k{i}", {"n": i}) for i in range(50)]
    with pytest.raises(StateError, match="aborted: nothing was written"):
        commit(sink.make_state(), 1, [*good, ("big", "x" * 200_000), *good])
    # Then nothing of txid 1 is visible, the sink recorded no txid, and its retry without the
    # record commits it once
    assert read_topic(kafka_bootstrap, topic) == []
    assert sink.records() is None
    commit(sink.make_state(), 1, good)
    found = read_topic(kafka_bootstrap, topic)
    assert sorted((r.key, r.value["n"], r.headers["trident.txid"]) for r in found) == sorted(
        (f"k{i}", i, "1") for i in range(50)
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"config": {"bootstrap.servers": "x"}, "kafka_config_id": "k"}, "one of them"),
        ({"config": {"security.protocol": "SSL"}}, "no bootstrap.servers"),
        ({"config": {"bootstrap.servers": "x", "transactional.id": "t"}}, "sets itself"),
        ({"config": {"bootstrap.servers": "x"}, "key_format": "avro"}, "key_format"),
        ({"config": {"bootstrap.servers": "x"}, "topology": "bad name"}, "topology name"),
    ],
)
def test_bad_options_are_refused(kwargs: dict[str, Any], match: str) -> None:
    kwargs.setdefault("topology", "t")
    with pytest.raises(ConfigurationError, match=match):
        kafka_sink("events", **kwargs)


def test_a_missing_topic_is_refused_before_writing(kafka_bootstrap: str) -> None:
    sink = kafka_sink_for("kmissing", unique_topic("absent"), kafka_bootstrap)
    with pytest.raises(StateError, match="does not exist"):
        commit(sink.make_state(), 1, [("a", 1)])


def test_the_connection_is_an_airflow_kafka_connection_resolved_at_commit(
    kafka_bootstrap: str, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_trident import connections
    from airflow_trident.hooks.connections import install

    extra = json.dumps({"bootstrap.servers": kafka_bootstrap})
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_SINK_TEST", json.dumps({"conn_type": "kafka", "extra": extra})
    )
    sink = kafka_sink(topic, "kafka_sink_test", topology="kconn")
    assert kafka_bootstrap not in repr(sink)
    assert "kafka_sink_test" in connections.declared()
    install()
    try:
        commit(sink.make_state(), 1, [("a", 1)])
        shipped = json.loads(connections.shipment() or "{}")
    finally:
        connections.install_resolver(None)
    assert shipped["kafka_sink_test"] == {"kafka_config": {"bootstrap.servers": kafka_bootstrap}}
    assert [(r.key, r.value) for r in read_topic(kafka_bootstrap, topic)] == [("a", 1)]


# -- whole batches: refusal, crashes at every point, replays ---------------------------------


def test_an_opaque_spout_into_kafka_is_refused_unless_at_least_once() -> None:
    topology = TridentTopology("kafka_opaque")
    stream = topology.new_stream("s", MemoryOpaqueSpout(SENTENCES, ["sentence"], 2))
    sink = kafka_sink("t", config={"bootstrap.servers": "x"}, topology="kafka_opaque")
    with pytest.raises(NotExactlyOnceError, match="opaque"):
        stream.partition_persist(sink, ["sentence"], KafkaWriter())
    stream.partition_persist(sink, ["sentence"], KafkaWriter(), at_least_once=True)


def run_batch(steps: BatchSteps, run_id: str) -> int:
    txid = int(steps.begin(run_id)["txid"])
    steps.process_local(txid)
    assert steps.commit(txid)["applied"]
    steps.success(txid)
    return txid


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_commit_that_fails_at_any_point_then_retries_writes_each_record_once(
    point: str,
    kafka_bootstrap: str,
    topic: str,
    zk_store: CoordinatorStore,
    unique_name: str,
    tmp_path: Path,
) -> None:
    # Given word records produced by in-process batches (2 commit partitions), the coordinator
    # in ZooKeeper, txid 1 committed
    name = unique_name
    sink = CrashingKafkaSink(topic, config={"bootstrap.servers": kafka_bootstrap}, topology=name)
    topology = words_topology(name, sink)
    steps = BatchSteps(topology, zk_store, StagingArea(str(tmp_path), name))
    run_batch(steps, "r1")
    # When txid 2's last commit partition fails at the point (an exception: the commit fails)
    txid = int(steps.begin("r2")["txid"])
    steps.process_local(txid)
    sink.point = point
    with pytest.raises(Crash):
        steps.commit(txid)
    assert zk_store.commits.committed_txid() == 1
    # Then the retry commits it, and later batches, replays and a backfill add nothing twice
    assert steps.commit(txid)["applied"]
    steps.success(txid)
    for i in (3, 4):
        run_batch(steps, f"r{i}")
    for t in (4, 2, 1, 2, 3):
        steps.replay(t)
    assert_each_word_once(read_topic(kafka_bootstrap, topic), 4)


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_worker_killed_at_any_point_of_the_commit_then_retried_writes_each_record_once(
    point: str,
    kafka_bootstrap: str,
    topic: str,
    zk_store: CoordinatorStore,
    zk_hosts: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    # Given txid 1 committed and txid 2 staged, the coordinator in ZooKeeper
    name = unique_name
    sink = kafka_sink_for(name, topic, kafka_bootstrap)
    topology = words_topology(name, sink)
    steps = BatchSteps(topology, zk_store, StagingArea(str(tmp_path), name))
    run_batch(steps, "r1")
    txid = int(steps.begin("r2")["txid"])
    steps.process_local(txid)
    # When a worker process commits txid 2 and dies at the point (os._exit: no abort, no
    # close; its open transaction, if any, is left on the broker)
    commit_in_child(
        name=name,
        topic=topic,
        bootstrap=kafka_bootstrap,
        zk_hosts=zk_hosts,
        zk_root="/trident_test",
        staging=str(tmp_path),
        txid=txid,
        point=point,
    )
    assert zk_store.commits.committed_txid() == 1
    # Then the retry here commits it (fencing the dead worker's producer, aborting what it
    # left open, or recognising what it committed), and each record is read once
    assert steps.commit(txid)["applied"]
    steps.success(txid)
    run_batch(steps, "r3")
    steps.replay(2)
    assert_each_word_once(read_topic(kafka_bootstrap, topic), 3)


def test_a_compare_and_set_lost_after_every_kafka_commit_writes_nothing_twice(
    kafka_bootstrap: str,
    topic: str,
    zk_store: CoordinatorStore,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given txid 2 whose every partition committed to Kafka, and ZooKeeper's compare-and-set
    # failing (a lost session)
    from airflow_trident.errors import StateStoreUnavailableError

    name = unique_name
    topology = words_topology(name, kafka_sink_for(name, topic, kafka_bootstrap))
    steps = BatchSteps(topology, zk_store, StagingArea(str(tmp_path), name))
    run_batch(steps, "r1")
    txid = int(steps.begin("r2")["txid"])
    steps.process_local(txid)
    cas = zk_store.commits.commit

    def lost(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(zk_store.commits, "commit", cas)
        msg = "injected: the ZooKeeper session expired before the compare-and-set"
        raise StateStoreUnavailableError(msg)

    monkeypatch.setattr(zk_store.commits, "commit", lost)
    with pytest.raises(StateStoreUnavailableError):
        steps.commit(txid)
    assert zk_store.commits.committed_txid() == 1
    # When it is retried, then each record is read once
    assert steps.commit(txid)["applied"]
    steps.success(txid)
    assert_each_word_once(read_topic(kafka_bootstrap, topic), 2)


@pytest.mark.parametrize("point", ["mid_produce", "after_kafka_commit"])
def test_a_state_changelog_has_each_update_once_through_a_failed_commit(
    point: str, kafka_bootstrap: str, topic: str, tmp_path: Path, unique_name: str
) -> None:
    # Given word counts whose committed updates go to Kafka as a changelog (key, new count),
    # in the commit phase, before the txid's compare-and-set
    from airflow_trident.coordination.memory import MemoryCoordinatorStore

    name = unique_name
    sink = CrashingKafkaSink(topic, config={"bootstrap.servers": kafka_bootstrap}, topology=name)
    topology = changelog_topology(name, sink)
    store = MemoryCoordinatorStore(name)
    steps = BatchSteps(topology, store, StagingArea(str(tmp_path), name))
    run_batch(steps, "r1")
    # When txid 2's changelog commit fails at the point, and is retried
    txid = int(steps.begin("r2")["txid"])
    steps.process_local(txid)
    sink.point = point
    with pytest.raises(Crash):
        steps.commit(txid)
    assert steps.commit(txid)["applied"]
    steps.success(txid)
    run_batch(steps, "r3")
    steps.replay(3)
    # Then each (word, txid) update is read once, and each word's last value is its count
    records = read_topic(kafka_bootstrap, topic)
    assert len({(r.key, r.txid) for r in records}) == len(records)
    last: dict[str, tuple[int, int]] = {}
    for r in records:
        if r.key not in last or r.txid > last[r.key][0]:
            last[r.key] = (r.txid, r.value)
    assert {k: v for k, (_, v) in last.items()} == expected_words(3)
    for t in (1, 2, 3):
        assert {r.key for r in records if r.txid == t} == set(
            w
            for rows in SENTENCES.values()
            for (s,) in rows[2 * (t - 1) : 2 * t]
            for w in s.split()
        )


def test_a_field_the_tuples_lack_fails_the_update_naming_it() -> None:
    from airflow_trident.tuple import TridentCollector, tuple_type

    # Given a writer keyed by a field the batch's tuples do not have (no broker is asked)
    sink = kafka_sink("t", config={"bootstrap.servers": "127.0.0.1:9"}, topology="kmissing")
    state = sink.make_state()
    state.begin_commit(1)
    make = tuple_type(("word", "n"))
    # When the commit partition's tuples are handed over, Then the update fails, naming it
    with pytest.raises(KeyError, match="missing"):
        KafkaWriter(key="missing").update_state(state, [make(("a", 1))], TridentCollector())
    with pytest.raises(KeyError, match="nope"):
        KafkaWriter(value=["n", "nope"]).update_state(state, [make(("a", 1))], TridentCollector())
