"""Kerberos (GSSAPI) on Spark's Kafka connector, against a real MIT KDC from Debian and a broker
with a ``SASL_PLAINTEXT``/``GSSAPI`` listener, both started here (issue 53, item 1;
docs/security.md):

* the connection's librdkafka settings as a user writes them (``sasl.kerberos.keytab``,
  ``sasl.kerberos.principal``...) become, through ``spark_options``, the connector's
  ``kafka.*`` options (a ``Krb5LoginModule`` JAAS line), and a range read with exactly those
  options on the tests' classic session returns every record: the KDC's log shows the client's
  service ticket for the broker;
* the in-process client (the wheel's librdkafka has no libsasl2) refuses the same connection at
  begin, naming ``sasl.mechanism GSSAPI``.

Run by the cluster tier (``bash scripts/cluster-test.sh``: a KDC, a broker JVM and Spark's
session; ~15 s here). Skipped, naming the tools, where Debian's ``krb5-kdc``/
``krb5-admin-server`` are not installed (``bash scripts/bootstrap.sh kerberos``).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.kafka import create_topic, unique_topic
from tests.harness.kafka_kerberos import KerberizedKafka
from tests.harness.kerberos import BROKER, CLIENT, MitKdc, missing

pytestmark = pytest.mark.cluster

PARTITIONS = 3
RECORDS = 60
TIMES: dict[str, float] = {}
"""Seconds each step took (the KDC's start, the broker's), shown by the tests' ``-s`` output."""


@pytest.fixture(scope="module")
def kerberized(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KerberizedKafka]:
    absent = missing()
    if absent:
        pytest.skip(f"no MIT Kerberos KDC here ({', '.join(absent)} not installed): "
                    "run `bash scripts/bootstrap.sh kerberos`")  # fmt: skip
    workdir = tmp_path_factory.mktemp("kerberos")
    started = time.monotonic()
    with MitKdc(workdir) as kdc:
        TIMES["kdc_start_s"] = time.monotonic() - started
        started = time.monotonic()
        with KerberizedKafka(workdir, kdc) as kafka:
            TIMES["broker_start_s"] = time.monotonic() - started
            yield kafka


@pytest.fixture(scope="module")
def produced(kerberized: KerberizedKafka) -> tuple[str, set[tuple[int, int, str, str]]]:
    """A topic of :data:`PARTITIONS` partitions and the :data:`RECORDS` records produced to it
    on the PLAINTEXT listener, as ``(partition, offset, key, value)``."""
    from confluent_kafka import Producer

    topic = unique_topic("kkrb")
    create_topic(kerberized.plaintext, topic, partitions=PARTITIONS)
    delivered: set[tuple[int, int, str, str]] = set()

    def on_delivery(error: Any, message: Any) -> None:
        assert error is None, error
        delivered.add((message.partition(), message.offset(), message.key().decode(),
                       message.value().decode()))  # fmt: skip

    producer = Producer({"bootstrap.servers": kerberized.plaintext})
    for i in range(RECORDS):
        producer.produce(topic, key=f"k{i}", value=json.dumps({"i": i}),
                         partition=i % PARTITIONS, on_delivery=on_delivery)  # fmt: skip
    assert producer.flush(30) == 0
    assert len(delivered) == RECORDS
    return topic, delivered


@pytest.fixture
def krb5_conf_in_the_jvm(spark: Any, kerberized: KerberizedKafka) -> Iterator[None]:
    """The session's JVM (driver and, ``local[2]``, executors) reads the KDC's ``krb5.conf``;
    the property as it was afterwards. (A cluster's executors take it as
    ``spark.executor.extraJavaOptions=-Djava.security.krb5.conf=...``.)"""
    system = spark._jvm.java.lang.System
    before = system.getProperty("java.security.krb5.conf")
    system.setProperty("java.security.krb5.conf", str(kerberized.kdc.krb5_conf))
    spark._jvm.sun.security.krb5.Config.refresh()  # a realm read before is read again
    try:
        yield
    finally:
        if before is None:
            system.clearProperty("java.security.krb5.conf")
        else:
            system.setProperty("java.security.krb5.conf", before)
        with contextlib.suppress(Exception):  # no krb5.conf at all is fine for later tests
            spark._jvm.sun.security.krb5.Config.refresh()


def test_spark_s_connector_reads_every_record_through_kerberos(
    spark: Any,
    kerberized: KerberizedKafka,
    produced: tuple[str, set[tuple[int, int, str, str]]],
    krb5_conf_in_the_jvm: None,
) -> None:
    from airflow_trident.spout.kafka_records import spark_options

    topic, expected = produced
    config = kerberized.config()
    options = spark_options(config, "read_committed")
    # the connector's own settings: a Krb5LoginModule line with the client's keytab
    assert options["kafka.security.protocol"] == "SASL_PLAINTEXT"
    assert options["kafka.sasl.mechanism"] == "GSSAPI"
    assert options["kafka.sasl.kerberos.service.name"] == "kafka"
    jaas = options["kafka.sasl.jaas.config"]
    assert jaas.startswith("com.sun.security.auth.module.Krb5LoginModule required ")
    assert f'keyTab="{kerberized.kdc.keytab(CLIENT)}"' in jaas
    assert f'principal="{CLIENT}"' in jaas
    ends = {p: 0 for p in range(PARTITIONS)}
    for partition, offset, _, _ in expected:
        ends[partition] = max(ends[partition], offset + 1)
    reader = spark.read.format("kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    started = time.monotonic()
    rows = (
        reader.option("assign", json.dumps({topic: sorted(ends)}))
        .option("startingOffsets", json.dumps({topic: {str(p): 0 for p in ends}}))
        .option("endingOffsets", json.dumps({topic: {str(p): e for p, e in ends.items()}}))
        .load()
        .selectExpr("partition", "offset", "CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v")
        .collect()
    )
    TIMES["spark_read_s"] = time.monotonic() - started
    got = [(r["partition"], r["offset"], r["k"], r["v"]) for r in rows]
    assert len(got) == RECORDS
    assert set(got) == expected
    # the client did authenticate with Kerberos: the KDC issued etl a ticket for the broker
    log = (kerberized.kdc.workdir / "kdc.log").read_text(errors="replace")
    assert f"{CLIENT} for {BROKER}" in log, log[-2000:]
    print(f"kerberos timings: {TIMES}")  # the probe's numbers (-s)


def test_the_in_process_client_refuses_gssapi_at_begin(
    kerberized: KerberizedKafka, produced: tuple[str, set[tuple[int, int, str, str]]]
) -> None:
    from airflow_trident.errors import ConfigurationError
    from airflow_trident.spout.kafka import KafkaSpout

    topic, _ = produced
    spout = KafkaSpout(topic, config=kerberized.config(), value_format="json", fields=["i"])
    with pytest.raises(ConfigurationError) as raised:
        spout.get_partitions_for_batch()
    assert "sasl.mechanism GSSAPI" in str(raised.value)


def test_a_principal_the_keytab_does_not_hold_fails_the_read_naming_the_login(
    spark: Any,
    kerberized: KerberizedKafka,
    produced: tuple[str, set[tuple[int, int, str, str]]],
    krb5_conf_in_the_jvm: None,
) -> None:
    from airflow_trident.spout.kafka_records import spark_options

    topic, _ = produced
    # the client's principal with the broker's keytab: the login cannot get a ticket
    config = {**kerberized.config(), "sasl.kerberos.keytab": str(kerberized.kdc.keytab(BROKER))}
    reader = spark.read.format("kafka")
    for key, value in spark_options(config, "read_committed").items():
        reader = reader.option(key, value)
    started = time.monotonic()
    with pytest.raises(Exception) as raised:  # noqa: PT011 - py4j's, whatever its class
        reader.option("assign", json.dumps({topic: [0]})).option(
            "startingOffsets", json.dumps({topic: {"0": 0}})
        ).option("endingOffsets", json.dumps({topic: {"0": 1}})).load().collect()
    TIMES["refused_read_s"] = time.monotonic() - started
    causes = [line for line in str(raised.value).splitlines() if "Caused by" in line]
    print(f"kerberos refusal: {causes}")
    assert any("javax.security.auth.login.LoginException" in line for line in causes), causes
    assert TIMES["refused_read_s"] < 15.0  # at once, not after retries
