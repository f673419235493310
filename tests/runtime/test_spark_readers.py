"""Spark's readers of source ranges (issue 54, item 3): chosen by the kind a spec declares,
behind one protocol; the moved names still answer, with a ``DeprecationWarning``."""

from __future__ import annotations

import pytest

from airflow_trident.runtime.spark.readers import READERS, reader_of
from airflow_trident.runtime.spark.readers.base import ARROW_TYPES, SQL_TYPES, SparkReader
from airflow_trident.runtime.spark.readers.files import CORRUPT, FILES
from airflow_trident.runtime.spark.readers.jdbc import JDBC
from airflow_trident.runtime.spark.readers.kafka import KAFKA, read_kafka
from airflow_trident.spout.kafka_records import KafkaRange, KafkaRecordParser, KafkaSpan
from airflow_trident.spout.ranges import AgesOut, ReadSpec


def test_a_spec_is_read_by_the_reader_of_the_kind_it_declares() -> None:
    # Given specs of each kind, When their readers are looked up, Then by format
    schema = (("n", "bigint"),)
    assert reader_of(ReadSpec("json", ("/a",), schema)) is FILES
    assert reader_of(ReadSpec("csv", ("/a",), schema)) is FILES
    assert reader_of(ReadSpec("parquet", ("/a",), schema)) is FILES
    assert reader_of(ReadSpec("jdbc", (), schema)) is JDBC
    source = KafkaRange("t", 3, 5, 9, KafkaRecordParser("str"), {}, {"kafka.x": "1"})
    assert reader_of(source.read_spec()) is KAFKA
    # (a kind not listed: files, read as CSV, as before the registry)
    assert reader_of(ReadSpec("text", ("/a",), schema)) is FILES
    assert all(isinstance(reader, SparkReader) for reader in READERS.values())


def test_a_kafka_spec_carries_its_span_as_data_and_builds_its_options_once() -> None:
    # Given a Kafka range, When Spark is told how to read it
    source = KafkaRange("t", 3, 5, 9, KafkaRecordParser("str"), {}, {"kafka.x": "1"})
    spec = source.read_spec()
    # Then its span is data, and the options hold the connection's and the offsets'
    assert spec.spans == (KafkaSpan("t", 3, 5, 9),)
    assert spec.options == {"kafka.x": "1"}
    assert spec.reader_options() == {
        "kafka.x": "1",
        "assign": '{"t": [3]}',
        "startingOffsets": '{"t": {"3": 5}}',
        "endingOffsets": '{"t": {"3": 9}}',
    }
    assert isinstance(source, AgesOut)


@pytest.mark.parametrize(
    ("module", "name", "now"),
    [
        ("kafka_read", "read_kafka", read_kafka),
        ("kafka_read", "ARROW", ARROW_TYPES),
        ("kafka_read", "SQL", SQL_TYPES),
        ("native", "ARROW_TYPES", ARROW_TYPES),
        ("native", "CORRUPT", CORRUPT),
    ],
)
def test_a_moved_name_answers_with_a_deprecation_warning(
    module: str, name: str, now: object
) -> None:
    import importlib

    old = importlib.import_module(f"airflow_trident.runtime.spark.{module}")
    with pytest.warns(DeprecationWarning, match="moved to airflow_trident.runtime.spark.readers"):
        assert getattr(old, name) is now
    with pytest.raises(AttributeError):
        _ = old.no_such_name
