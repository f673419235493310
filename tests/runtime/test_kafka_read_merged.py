"""One ``format("kafka")`` read of a batch's ranges (``readers/kafka.py::read_kafka_ranges``): each
task's records are parsed with the parser of their own range, so a malformed record's error
names the batch partition the in-process read names. No Spark: the read's Arrow UDF alone, over
Arrow batches as the connector hands them over (``tests.harness.kafka_rows.spark_side``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from airflow_trident.errors import MalformedRecordError
from airflow_trident.spout.kafka_records import KafkaRecordParser
from tests.harness.kafka_rows import spark_side


def _rows(records: list[tuple[str, int, int, bytes]]) -> pa.RecordBatch:
    """Connector rows ``(topic, partition, offset, value)``, no key, no headers."""
    n = len(records)
    return pa.RecordBatch.from_pydict({
        "key": pa.nulls(n, pa.binary()),
        "value": pa.array([r[3] for r in records], pa.binary()),
        "topic": [r[0] for r in records],
        "partition": pa.array([r[1] for r in records], pa.int32()),
        "offset": pa.array([r[2] for r in records], pa.int64()),
        "ts": pa.array([0] * n, pa.int64()),
        "headers": pa.nulls(n, pa.string()),
    })  # fmt: skip


PARSER = KafkaRecordParser("json", (("n", "bigint"),), where="first range")
WHERES = (("t", 0, "txid 1, partition 't:0'"), ("t", 1, "txid 1, partition 't:1'"))


@pytest.mark.parametrize("mixed", [False, True], ids=["a task per partition", "one batch of two"])
def test_each_record_is_parsed_with_its_own_ranges_parser(mixed: bool) -> None:
    good = [("t", 0, 0, b'{"n": 1}'), ("t", 0, 1, b'{"n": 2}')]
    bad = [("t", 1, 7, b"oops")]
    batches = [_rows(good + bad)] if mixed else [_rows(good), _rows(bad)]
    *before, last = batches
    out = [row for batch in before for row in spark_side(PARSER, batch, WHERES)]
    with pytest.raises(RuntimeError) as failed:
        spark_side(PARSER, last, WHERES)
    # Then partition 0's records were parsed (alone in their batch), and partition 1's
    # malformed one names its range
    assert len(out) == (0 if mixed else 2)
    assert "txid 1, partition 't:1': malformed record at topic 't' partition 1 offset 7" in str(
        failed.value
    )
    assert MalformedRecordError.__name__ in str(failed.value)


def test_a_range_read_alone_keeps_its_parser() -> None:
    (row,) = spark_side(PARSER, _rows([("t", 3, 0, b'{"n": 5}')]))
    assert row[1] == 5
    with pytest.raises(RuntimeError, match="first range: malformed record at topic 't'"):
        spark_side(PARSER, _rows([("t", 3, 1, b"[1]")]))
