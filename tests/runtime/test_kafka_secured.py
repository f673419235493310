"""Kafka security on every path (docs/security.md), against a real secured broker the test
starts (:mod:`tests.harness.kafka_secure`: mutual TLS, SASL_SSL with PLAIN and SCRAM-SHA-256/512
users made by the broker's own tool, OAUTHBEARER), with the connection as a user writes it:

* in process (the local runner's consumer), Spark's Kafka connector on the tests' classic
  session (a ``spark-submit`` job's driver runs the same ``process_on_spark``) and on the
  shared Spark Connect server: every batch commits every record once on each way in, the
  connector path forced (``read_here_records=0``) as a backlog past
  ``[trident] spark_read_here_records`` takes it;
* a wrong password, an untrusted CA and a missing client certificate fail the begin at once,
  naming the connection, the protocol and the mechanism (not "did not answer"), with the
  client's log through Python logging once per kind of line, and no client left retrying;
* a setting no path can carry is refused at begin by name (GSSAPI in the wheel's librdkafka;
  turning certificate verification off on Spark's connector).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_trident.errors import ConfigurationError, KafkaSecurityError
from tests.harness import with_project_path
from tests.harness.kafka import create_topic, unique_topic
from tests.harness.kafka_secure import MECHANISMS, SecuredKafka
from tests.harness.kafka_secure_batch import WORDS, counts, on_spark, word_count

pytestmark = pytest.mark.integration

PER_WORD = 7
WAYS_IN = (*MECHANISMS, "pkcs12")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
    with SecuredKafka(tmp_path_factory.mktemp("secured")) as kafka:
        yield kafka


@pytest.fixture(scope="module")
def topic(secured: SecuredKafka) -> str:
    """Three partitions, :data:`PER_WORD` records of each word, produced on PLAINTEXT."""
    from confluent_kafka import Producer

    name = unique_topic("ksec")
    create_topic(secured.plaintext, name, partitions=3)
    producer = Producer({"bootstrap.servers": secured.plaintext})
    for i in range(PER_WORD * len(WORDS)):
        word = WORDS[i % len(WORDS)]
        producer.produce(name, key=word, value=json.dumps({"w": word}), partition=i % 3)
    producer.flush(30)
    return name


EXPECTED = {w: PER_WORD for w in WORDS}


@pytest.mark.parametrize("way", WAYS_IN)
def test_a_batch_commits_every_record_once_in_process(
    secured: SecuredKafka, topic: str, way: str
) -> None:
    steps = word_count(secured.config(way), topic, f"ksec_local_{way.replace('-', '_')}", None)
    steps.run_batch()
    steps.replay(1)  # a replay reads the same ranges again and changes nothing
    assert counts(steps) == EXPECTED


@pytest.mark.parametrize("way", WAYS_IN)
def test_spark_s_connector_reads_a_batch_on_each_listener(
    spark: Any, secured: SecuredKafka, topic: str, way: str, tmp_path: Path
) -> None:
    steps = word_count(secured.config(way), topic, f"ksec_spark_{way.replace('-', '_')}",
                       tmp_path)  # fmt: skip
    on_spark(steps, spark)
    assert counts(steps) == EXPECTED


def test_spark_connect_reads_a_batch_on_each_listener_through_the_connector(
    connect_url: str, secured: SecuredKafka, topic: str, tmp_path: Path
) -> None:
    configs = {way: secured.config(way) for way in WAYS_IN}
    out = tmp_path / "out.json"
    env = with_project_path({k: v for k, v in os.environ.items()
                             if not k.startswith("SPARK_CONNECT")})  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "tests.harness.kafka_secure_batch", connect_url, topic,
         json.dumps(configs), str(out)],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(out.read_text()) == dict.fromkeys(WAYS_IN, EXPECTED)


@pytest.mark.parametrize(
    ("way", "bad", "says"),
    [
        ("scram-sha-512", "password", "refused the client's SASL authentication"),
        ("plain", "password", "refused the client's SASL authentication"),
        ("mtls", "ca", "TLS handshake with Kafka failed"),
        ("mtls", "client-cert", "TLS handshake with Kafka failed"),
    ],
)
def test_a_refused_client_fails_the_begin_at_once_naming_connection_and_mechanism(
    secured: SecuredKafka, topic: str, way: str, bad: str, says: str,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    from airflow_trident import connections

    config = secured.config(way, bad=bad)

    class Resolver:
        def database_url(self, conn_id: str) -> str:
            raise AssertionError(conn_id)

        def storage_options(self, conn_id: str) -> dict[str, str]:
            raise AssertionError(conn_id)

        def kafka_config(self, conn_id: str) -> dict[str, Any]:
            return config

    from airflow_trident.spout.kafka import KafkaSpout

    named = KafkaSpout(topic, kafka_config_id="events_secured", value_format="json",
                       fields=["w"], timeout_s=15.0)  # fmt: skip
    connections.install_resolver(Resolver())
    started = time.monotonic()
    try:
        with caplog.at_level(logging.INFO, logger="airflow_trident.kafka"):
            with pytest.raises(KafkaSecurityError) as raised:
                named.get_partitions_for_batch()
            took = time.monotonic() - started
            lines = [r for r in caplog.records if r.name == "airflow_trident.kafka"]
            # no client goes on retrying once the begin failed: no new line from it
            seen = len(caplog.records)
            time.sleep(1.0)
            after = len(caplog.records)
    finally:
        connections.install_resolver(None)
    said = str(raised.value)
    assert says in said
    assert "Kafka connection 'events_secured'" in said
    assert f"security.protocol {config['security.protocol']}" in said
    if "sasl.mechanism" in config:
        assert f"sasl.mechanism {config['sasl.mechanism']}" in said
    assert "did not answer" not in said
    assert config.get("sasl.password", "\0") not in said
    assert took < 15.0, took  # well before the spout's timeout: not a timed-out metadata call
    # librdkafka's retries: each kind of line once, not one per retry
    texts = [r.getMessage() for r in lines]
    assert texts, "the client's log went nowhere"
    assert len(texts) == len(set(texts)), texts
    assert after == seen


def test_gssapi_is_refused_at_begin_by_the_in_process_client() -> None:
    from airflow_trident.spout.kafka import KafkaSpout

    spout = KafkaSpout("t", config={"bootstrap.servers": "127.0.0.1:9",
                                    "security.protocol": "SASL_PLAINTEXT",
                                    "sasl.mechanism": "GSSAPI",
                                    "sasl.kerberos.service.name": "kafka"})  # fmt: skip
    with pytest.raises(ConfigurationError) as raised:
        spout.get_partitions_for_batch()
    said = str(raised.value)
    assert "sasl.mechanism GSSAPI" in said
    assert "in-process Kafka client" in said


def test_a_setting_spark_s_connector_cannot_carry_is_refused_at_begin(
    secured: SecuredKafka, topic: str
) -> None:
    from airflow_trident.spout.kafka import KafkaSpout

    config = {**secured.config("mtls"), "enable.ssl.certificate.verification": "false"}
    spout = KafkaSpout(topic, config=config, value_format="json", fields=["w"])
    with pytest.raises(ConfigurationError) as raised:
        spout.get_partitions_for_batch()
    said = str(raised.value)
    assert "enable.ssl.certificate.verification" in said
    assert "Spark's Kafka connector" in said
    # with the connector's own settings given, the begin goes on
    given = KafkaSpout(topic, config=config, value_format="json", fields=["w"],
                       spark_kafka_options={"kafka.ssl.truststore.type": "PEM"})  # fmt: skip
    assert sorted(given.get_partitions_for_batch()["partitions"]) == [
        f"{topic}:{p}" for p in range(3)
    ]


def test_the_kafka_provider_builds_the_client_its_allow_listed_callback_and_default_id(
    secured: SecuredKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.providers.apache.kafka.hooks.produce import KafkaProducerHook

    from airflow_trident import connections
    from airflow_trident.hooks.connections import install
    from airflow_trident.spout.kafka import KafkaSpout

    callback = "tests.harness.kafka_secure.unsecured_token"
    # Given the provider's default connection, OAUTHBEARER with a token callback by dotted path
    extra = {"bootstrap.servers": f"127.0.0.1:{secured.node.oauth_port}",
             "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
             "oauth_cb": callback}  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka",
                                                                 "extra": extra}))  # fmt: skip
    name = unique_topic("ksecprov")
    create_topic(secured.plaintext, name, partitions=1)
    install()
    try:
        # When the callback is not allow-listed, the provider refuses it, and so do we
        spout = KafkaSpout(name, value_format="json", fields=["w"], timeout_s=15.0,
                           spark_kafka_options={"kafka.sasl.mechanism": "OAUTHBEARER"})  # fmt: skip
        assert spout.kafka_config_id == "kafka_default"
        with pytest.raises(ConfigurationError, match=r"kafka_default.*callback_allowlist"):
            spout.get_partitions_for_batch()
        monkeypatch.setenv("AIRFLOW__APACHE_KAFKA__CALLBACK_ALLOWLIST", callback)
        # When the provider's own producer hook writes through the connection, unchanged
        producer = KafkaProducerHook().get_producer()
        for word in ("a", "b", "a"):
            producer.produce(name, value=json.dumps({"w": word}))
        assert producer.flush(30) == 0
        # Then our spout, made without a connection id, reads them through the same one
        steps = word_count_of(spout, f"ksec_prov_{name}")
        steps.run_batch()
        values = steps.query_state("counts").multi_get([("a",), ("b",)])
        assert values == [2, 1]
        # And the connection's callback travels to a spark-submit job's driver by its path
        shipped = json.loads(connections.shipment() or "{}")["kafka_default"]
        assert shipped["kafka_callbacks"] == {"oauth_cb": callback}
        assert "oauth_cb" not in shipped["kafka_config"]
    finally:
        connections.install_resolver(None)
    # and without spark_kafka_options the callback is refused at begin for Spark's connector
    monkeypatch.setenv("AIRFLOW__APACHE_KAFKA__CALLBACK_ALLOWLIST", callback)
    install()
    try:
        bare = KafkaSpout(name, value_format="json", fields=["w"], timeout_s=15.0)
        with pytest.raises(ConfigurationError, match=r"oauth_cb.*Spark's Kafka connector"):
            bare.get_partitions_for_batch()
    finally:
        connections.install_resolver(None)


def word_count_of(spout: Any, name: str) -> Any:
    from airflow_trident.batch.steps import BatchSteps
    from airflow_trident.coordination.memory import MemoryCoordinatorStore
    from airflow_trident.operation import Count
    from airflow_trident.state.memory import memory_state
    from airflow_trident.topology import TridentTopology

    t = TridentTopology(name)
    t.new_stream("events", spout).group_by(["w"]).persistent_aggregate(
        memory_state(name, "transactional"), Count(), ["n"], name="counts"
    )
    return BatchSteps(t, MemoryCoordinatorStore(t.name), None)


@pytest.mark.parametrize("way", ["mtls", "scram-sha-256", "oauthbearer"])
def test_the_kafka_sink_writes_each_txid_once_on_a_secured_listener(
    secured: SecuredKafka, way: str
) -> None:
    from collections import Counter

    from airflow_trident.state.kafka import kafka_sink
    from tests.harness.kafka_sinks import read_topic

    name = unique_topic("ksecsink")
    create_topic(secured.plaintext, name, partitions=2)
    sink = kafka_sink(name, config=secured.config(way), topology=f"ksink_{way.replace('-', '_')}")
    for txid in (1, 2, 2, 1):  # each txid, then a replay of each: nothing twice
        state = sink.make_state(0, 1)
        state.begin_commit(txid)
        state.write([(f"k{k}", {"txid": txid, "k": k}) for k in range(4)])
        state.commit(txid)
    records = read_topic(secured.plaintext, name)
    assert Counter(r.value["txid"] for r in records) == {1: 4, 2: 4}


def test_tls_files_travel_inside_the_shipment(secured: SecuredKafka) -> None:
    from airflow_trident import connections

    config = secured.config("mtls")
    entry = connections._shipped_kafka(config)["kafka_config"]
    # a Spark executor or spark-submit driver on another machine has no copy of the files
    assert not any(key.endswith(".location") for key in entry)
    assert entry["ssl.ca.pem"] == Path(config["ssl.ca.location"]).read_text()
    assert entry["ssl.key.pem"] == Path(config["ssl.key.location"]).read_text()
    from confluent_kafka.admin import AdminClient

    assert AdminClient(entry).list_topics(timeout=15).topics  # the inline form connects
