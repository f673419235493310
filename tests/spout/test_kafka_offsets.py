"""Lag that Kafka's own tools see (issue 53, item 3), against the real single broker: after each
txid commits, the Kafka spouts commit the batch's end offsets to a consumer group, and the
broker distribution's ``kafka-consumer-groups.sh --describe`` (``ConsumerGroupCommand``, from the
``kafka`` jar group) shows CURRENT-OFFSET, LOG-END-OFFSET and LAG per partition. A group that
cannot take the commit (an active member owns it) never fails the batch; a success step of an
old txid never moves the group backwards; the success step's lag gauges are the status table's
lag."""

from __future__ import annotations

import json
import logging
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_trident.batch.runner import LocalRunner
from airflow_trident.operation import Count
from airflow_trident.spout.kafka import KafkaSpout, OpaqueKafkaSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology
from tests.harness import PROJECT_ROOT
from tests.harness.jars import group_dir
from tests.harness.kafka import create_topic, unique_topic

pytestmark = pytest.mark.integration

GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


@pytest.fixture
def topic(kafka_bootstrap: str) -> Iterator[str]:
    name = unique_topic("ko")
    create_topic(kafka_bootstrap, name, partitions=2)
    yield name
    from confluent_kafka.admin import AdminClient

    AdminClient({"bootstrap.servers": kafka_bootstrap}).delete_topics([name])


def produce(bootstrap: str, topic: str, per_partition: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(per_partition):
        for part in (0, 1):
            producer.produce(topic, value=json.dumps({"w": f"w{i % 3}"}), partition=part)
    producer.flush(30)


def runner(spout: Any, name: str, kind: str = "transactional") -> LocalRunner:
    t = TridentTopology(name)
    t.new_stream("events", spout).group_by(["w"]).persistent_aggregate(
        memory_state(name, kind), Count(), ["n"], name="counts"
    )
    return LocalRunner(t)


def kafka_spout(cls: Any, bootstrap: str, topic: str, **kw: Any) -> Any:
    return cls(topic, config={"bootstrap.servers": bootstrap}, value_format="json",
               fields=["w"], timeout_s=10.0, **kw)  # fmt: skip


def group_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offset of each partition of ``topic`` (none: left out)."""
    from confluent_kafka import Consumer, TopicPartition

    client = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = client.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=10)
    finally:
        client.close()
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}


def tools_classpath() -> str:
    """The ``kafka`` jar group with the distribution's tools (``kafka-tools``), resolved by
    ``scripts/jars.sh kafka`` if this checkout's group predates it."""
    directory = group_dir("kafka")
    if not list(directory.glob("kafka-tools-[0-9]*.jar")):
        subprocess.run(["bash", str(PROJECT_ROOT / "scripts" / "jars.sh"), "kafka"],
                       check=True, capture_output=True, timeout=900)  # fmt: skip
    return f"{directory}/*"


def describe(bootstrap: str, group: str) -> dict[tuple[str, int], dict[str, str]]:
    """``kafka-consumer-groups.sh --bootstrap-server ... --describe --group ...``: its table,
    by (topic, partition)."""
    done = subprocess.run(
        ["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", tools_classpath(),
         GROUP_COMMAND, "--bootstrap-server", bootstrap, "--describe", "--group", group],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = [line.split() for line in done.stdout.splitlines() if line.strip()]
    header = next(i for i, cols in enumerate(lines) if cols[:2] == ["GROUP", "TOPIC"])
    names = lines[header]
    rows = [dict(zip(names, cols, strict=False)) for cols in lines[header + 1 :]]
    return {(row["TOPIC"], int(row["PARTITION"])): row for row in rows if row["GROUP"] == group}


def columns(table: dict[tuple[str, int], dict[str, str]], topic: str) -> dict[int, tuple[str, ...]]:
    return {
        p: (row["CURRENT-OFFSET"], row["LOG-END-OFFSET"], row["LAG"])
        for (t, p), row in sorted(table.items())
        if t == topic
    }


def test_kafka_consumer_groups_describe_shows_the_lag_after_each_commit(
    kafka_bootstrap: str, topic: str
) -> None:
    # Given 5 records in each of two partitions, at most 3 offsets a partition a batch
    produce(kafka_bootstrap, topic, 5)
    spout = kafka_spout(KafkaSpout, kafka_bootstrap, topic, max_offsets_per_partition=3)
    run = runner(spout, f"lag_{topic}")
    group = f"trident-lag_{topic}-events"
    # When the first batch commits
    run.run_batch()
    # Then Kafka's own tool shows the batch's end as the group's offset, and the lag after it
    assert columns(describe(kafka_bootstrap, group), topic) == {
        0: ("3", "5", "2"), 1: ("3", "5", "2"),
    }  # fmt: skip
    # And when the second batch commits and 4 more records arrive in each partition
    run.run_batch()
    produce(kafka_bootstrap, topic, 4)
    # Then the offsets moved to the second batch's end, and the lag is what arrived since
    assert columns(describe(kafka_bootstrap, group), topic) == {
        0: ("5", "9", "4"), 1: ("5", "9", "4"),
    }  # fmt: skip


def test_the_opaque_spout_commits_to_its_group_and_the_group_can_be_named_or_off(
    kafka_bootstrap: str, topic: str
) -> None:
    # Given 4 records a partition, an opaque spout, a named group and a spout with none
    produce(kafka_bootstrap, topic, 4)
    opaque = runner(kafka_spout(OpaqueKafkaSpout, kafka_bootstrap, topic),
                    f"op_{topic}", "opaque")  # fmt: skip
    named = runner(kafka_spout(KafkaSpout, kafka_bootstrap, topic,
                               commit_group=f"ops-{topic}"), f"nm_{topic}")  # fmt: skip
    off = runner(kafka_spout(KafkaSpout, kafka_bootstrap, topic, commit_group=False),
                 f"off_{topic}")  # fmt: skip
    # When each commits a batch
    for each in (opaque, named, off):
        each.run_batch()
    # Then the opaque one's default group and the named group hold the ends; the other none
    assert group_offsets(kafka_bootstrap, f"trident-op_{topic}-events", topic) == {0: 4, 1: 4}
    assert group_offsets(kafka_bootstrap, f"ops-{topic}", topic) == {0: 4, 1: 4}
    assert group_offsets(kafka_bootstrap, f"trident-off_{topic}-events", topic) == {}
    from airflow_trident.spout.kafka_offsets import group_name

    assert group_name(None, "t", "s") is None


def test_a_group_with_an_active_member_fails_the_offset_commit_not_the_batch(
    kafka_bootstrap: str, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    from confluent_kafka import Consumer

    # Given a consumer that is an active member of the spout's group (subscribed, assigned)
    produce(kafka_bootstrap, topic, 3)
    name = f"busy_{topic}"
    group = f"trident-{name}-events"
    member = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group,
                       "enable.auto.commit": False, "auto.offset.reset": "latest"})  # fmt: skip
    member.subscribe([topic])
    deadline = time.monotonic() + 30
    while not member.assignment() and time.monotonic() < deadline:
        member.poll(0.2)
    assert member.assignment(), "the member was never assigned"
    run = runner(kafka_spout(KafkaSpout, kafka_bootstrap, topic), name)
    try:
        # When a batch commits
        with caplog.at_level(logging.WARNING, logger="airflow_trident.spout.kafka_offsets"):
            report = run.run_batch()
        # Then the batch committed and counted, the offset commit only warned (group, servers)
        assert run.store.commits.committed_txid() == report.txid == 1
        assert run.state("counts").multi_get([("w0",), ("w1",), ("w2",)]) == [2, 2, 2]
        warned = [r.getMessage() for r in caplog.records if "consumer group" in r.getMessage()]
        assert len(warned) == 1, caplog.text
        for part in (repr(group), kafka_bootstrap, "txid 1", "stays committed"):
            assert part in warned[0]
        assert group_offsets(kafka_bootstrap, group, topic) == {}
    finally:
        member.close()
    # And once the member left, the next batch's commit catches up
    produce(kafka_bootstrap, topic, 2)
    run.run_batch()
    assert group_offsets(kafka_bootstrap, group, topic) == {0: 5, 1: 5}


def test_an_old_txids_success_never_moves_the_group_backwards(
    kafka_bootstrap: str, topic: str
) -> None:
    # Given two committed batches of 2 offsets a partition (ends 2, then 4)
    produce(kafka_bootstrap, topic, 4)
    spout = kafka_spout(KafkaSpout, kafka_bootstrap, topic, max_offsets_per_partition=2)
    run = runner(spout, f"old_{topic}")
    run.run(2)
    group = f"trident-old_{topic}-events"
    assert group_offsets(kafka_bootstrap, group, topic) == {0: 4, 1: 4}
    # When txid 1 is replayed, and its success step runs again (a cleared success task)
    assert not run.replay(1).committed
    run.steps.success(1)
    # And even when the spout is told directly that txid 1 (ends 2) committed
    executor: Any = run.steps.ctx.coordinator.spouts["events"]
    ends = executor.batch_partitions(1, run.store.metas.get_meta("events", 1))
    assert sorted(meta["next"] for meta in ends.values()) == [2, 2]
    spout.batch_committed(f"old_{topic}", "events", 1, ends)
    # Then the group keeps the newest batch's ends
    assert group_offsets(kafka_bootstrap, group, topic) == {0: 4, 1: 4}
    assert columns(describe(kafka_bootstrap, group), topic) == {
        0: ("4", "4", "0"), 1: ("4", "4", "0"),
    }  # fmt: skip


def test_the_success_step_emits_a_lag_gauge_per_partition(
    kafka_bootstrap: str, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_trident.operators import metrics

    gauges: list[tuple[str, int, dict[str, str]]] = []

    def gauge(name: str, value: int, tags: dict[str, str] | None = None, **_: Any) -> None:
        gauges.append((name, value, dict(tags or {})))

    from airflow.sdk.observability.stats import Stats

    monkeypatch.setattr(Stats, "gauge", gauge)
    # Given 5 records a partition and two committed batches of at most 2 offsets a partition
    produce(kafka_bootstrap, topic, 5)
    name = f"gauge_{topic}"
    run = runner(kafka_spout(KafkaSpout, kafka_bootstrap, topic, max_offsets_per_partition=2),
                 name)  # fmt: skip
    run.run(2)
    # When the success step's gauges are emitted for the newest txid, and for an older one
    emitted = metrics.emit_lag(run.steps, 2)
    older = metrics.emit_lag(run.steps, 1)
    # Then each partition's gauge is its lag after txid 2 (5 - 4), tagged, as the status says
    assert emitted == {f"trident.lag.{name}.events.{topic}_0": 1,
                       f"trident.lag.{name}.events.{topic}_1": 1}  # fmt: skip
    assert gauges[0][2] == {"topology": name, "spout": "events", "partition": f"{topic}_0",
                            "unit": "offsets"}  # fmt: skip
    # And an older txid's success emits none (its lag would be stale)
    assert older == {}
    assert len(gauges) == 2


def test_the_pom_pins_the_kafka_tools_beside_the_broker() -> None:
    pom = (PROJECT_ROOT / "jvm" / "pom.xml").read_text(encoding="utf-8")
    kafka_profile = pom.partition("<id>kafka</id>")[2].partition("</profile>")[0]
    assert "<artifactId>kafka-tools</artifactId>" in kafka_profile
    assert kafka_profile.count("<version>${kafka.version}</version>") == 2
    assert Path(tools_classpath()[:-2]).is_dir()
