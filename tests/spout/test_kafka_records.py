"""The Kafka record parser alone (no broker, no JVM): the tuple of a raw record per
``value_format``, malformed values, and the Spark side's ``mapInArrow`` function over a batch
shaped like the connector's rows, which gives the in-process parser's tuples."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_trident.errors import MalformedRecordError
from airflow_trident.spout.kafka_records import KafkaRecordParser, spark_options
from tests.harness.kafka_rows import connector_batch, spark_side

RAW = (b"k\xff", b'{"n": 1, "x": true}', "t", 0, 5, 10, [("h", b"\x00\xff"), ("e", None)])
BARE = (None, None, "t", 1, 6, 11, None)


def test_each_value_format_gives_its_tuple() -> None:
    headers = '[["h", "\\u0000\\\\xff"], ["e", null]]'
    assert KafkaRecordParser("str").parse(RAW) == (
        "k\\xff", '{"n": 1, "x": true}', "t", 0, 5, 10, headers)  # fmt: skip
    assert KafkaRecordParser("bytes").parse(BARE) == (None, None, "t", 1, 6, 11, None)
    rescuing = KafkaRecordParser("json", (("n", "bigint"),), rescue=True)
    assert rescuing.parse(RAW) == ("k\\xff", 1, '{"x": true}', "t", 0, 5, 10, headers)
    csv = KafkaRecordParser("csv", (("a", "string"), ("n", "int")))
    assert csv.parse((None, b"x,2\r\n", "t", 0, 1, 2, None)) == (None, "x", 2, "t", 0, 1, 2, None)


@pytest.mark.parametrize("value", [None, b"", b"\xfe{}", b"[1]", b'{"n": "one"}'])
def test_a_malformed_value_fails_naming_its_offset_or_is_dropped(value: bytes | None) -> None:
    raw = (None, value, "t", 3, 42, 0, None)
    with pytest.raises(MalformedRecordError, match="topic 't' partition 3 offset 42"):
        KafkaRecordParser("json", (("n", "bigint"),), where="txid 1").parse(raw)
    assert KafkaRecordParser("json", (("n", "bigint"),), drop=True).parse(raw) is None


@pytest.mark.parametrize("value", [b"a\nb,1", b"a,x", b"a", b"\xfea,1", b" "])
def test_a_malformed_csv_value_fails_naming_its_offset_a_line_break_too(value: bytes) -> None:
    # (csv.reader raises csv.Error, not ValueError, for a line break in an unquoted cell)
    parser = KafkaRecordParser("csv", (("s", "string"), ("n", "int")), where="txid 1")
    with pytest.raises(MalformedRecordError, match="topic 't' partition 0 offset 7"):
        parser.parse((None, value, "t", 0, 7, 0, None))
    assert parser.parse((None, b'"a\nb",1', "t", 0, 8, 0, None))[1:3] == ("a\nb", 1)


def test_the_spark_side_reports_the_malformed_records_with_the_in_process_error() -> None:
    from airflow_trident.runtime.spark.readers.kafka import _Malformed

    parser = KafkaRecordParser("json", (("n", "bigint"),), where="txid 1")
    raws = [(None, b'{"n": 1}', "t", 0, 3, 0, None), (None, b"oops", "t", 0, 4, 0, None),
            (None, None, "t", 0, 5, 0, None)]  # fmt: skip
    [out] = list(_Malformed(parser)(iter([connector_batch(raws)])))
    errors = []
    for raw in raws[1:]:
        with pytest.raises(MalformedRecordError) as caught:
            parser.parse(raw)
        errors.append(str(caught.value))
    assert out.to_pylist() == [{"offset": 4, "error": errors[0]}, {"offset": 5, "error": errors[1]}]


@pytest.mark.parametrize("value_format", ["str", "bytes", "json"])
def test_the_spark_side_parses_the_connectors_rows_as_in_process(value_format: str) -> None:
    schema = (("n", "bigint"),) if value_format == "json" else ()
    parser = KafkaRecordParser(value_format, schema, rescue=value_format == "json", drop=True)
    raws = [RAW, BARE]
    batch = connector_batch(raws)
    expected = [row for row in map(parser.parse, raws) if row is not None]
    assert spark_side(parser, batch) == expected


def test_spark_options_carry_the_shared_settings_and_sasl_as_jaas() -> None:
    options = spark_options(
        {"bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL", "sasl.mechanism":
         "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "p\"w", "linger.ms": "5"},
        "read_committed",
    )  # fmt: skip
    assert options["kafka.bootstrap.servers"] == "b:9093"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" '
        'password="p\\"w";'
    )
    assert "kafka.linger.ms" not in options
    assert options["kafka.isolation.level"] == "read_committed"


def test_spark_options_carry_tls_files_as_pem_and_each_sasl_mechanism(tmp_path: Path) -> None:
    from airflow_trident.errors import ConfigurationError
    from airflow_trident.spout.kafka_security import java_settings

    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n")
    tls = java_settings({"bootstrap.servers": "b:9093", "security.protocol": "ssl",
                         "ssl.ca.location": str(ca),
                         "ssl.endpoint.identification.algorithm": "none"})  # fmt: skip
    assert tls["security.protocol"] == "SSL"
    assert tls["ssl.truststore.type"] == "PEM"
    assert tls["ssl.truststore.certificates"] == ca.read_text()
    assert tls["ssl.endpoint.identification.algorithm"] == ""
    kerberos = java_settings({"bootstrap.servers": "b:9093", "sasl.mechanism": "GSSAPI",
                              "sasl.kerberos.keytab": "/etc/etl.keytab",
                              "sasl.kerberos.principal": "etl@EXAMPLE.COM"})  # fmt: skip
    assert kerberos["sasl.kerberos.service.name"] == "kafka"
    assert kerberos["sasl.jaas.config"] == (
        'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true '
        'keyTab="/etc/etl.keytab" principal="etl@EXAMPLE.COM";'
    )
    oidc = java_settings({"bootstrap.servers": "b:9093", "sasl.mechanism": "OAUTHBEARER",
                          "sasl.oauthbearer.method": "oidc",
                          "sasl.oauthbearer.client.id": "etl",
                          "sasl.oauthbearer.client.secret": "s",
                          "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
                          "sasl.oauthbearer.scope": "kafka"})  # fmt: skip
    assert oidc["sasl.login.callback.handler.class"].endswith("OAuthBearerLoginCallbackHandler")
    assert oidc["sasl.oauthbearer.token.endpoint.url"] == "https://idp/token"
    assert 'clientId="etl" clientSecret="s" scope="kafka";' in oidc["sasl.jaas.config"]
    assert "sasl.oauthbearer.method" not in oidc
    with pytest.raises(ConfigurationError, match=r"ssl\.certificate"):
        java_settings({"bootstrap.servers": "b:1", "ssl.certificate.location": str(ca)})
    with pytest.raises(ConfigurationError, match=r"sasl\.mechanism 'AWS_MSK_IAM'"):
        java_settings({"bootstrap.servers": "b:1", "sasl.mechanism": "AWS_MSK_IAM"})
