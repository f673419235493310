"""Which batches the Spark runtime's driver reads itself (``reads_here``): ranges that say
their bytes against ``read_here_bytes``, ranges that say their records (Kafka offset ranges)
against ``read_here_records``, each limit of 0 leaving its kind of range to Spark. No Spark."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("pyarrow")

from airflow_trident.runtime.spark.driver_read import READ_HERE_RECORDS, reads_here
from airflow_trident.spout.kafka_records import KafkaRange, KafkaRecordParser
from airflow_trident.spout.ranges import PartitionRows

SCHEMA = (("s", "string"),)


@dataclass
class _Sized:
    """A range that says its bytes (the file log's)."""

    size_bytes: int | None

    def read_spec(self) -> Any:
        return _Spec(SCHEMA)


@dataclass
class _Spec:
    schema: tuple[tuple[str, str], ...]


def _kafka(first: int, next_: int, records: int | None = None) -> KafkaRange:
    return KafkaRange("t", 0, first, next_, KafkaRecordParser("str"), {}, {}, records=records)


def _parts(*pieces: Any) -> list[tuple[str, PartitionRows]]:
    out = []
    for i, piece in enumerate(pieces):
        rows = PartitionRows()
        rows.pieces.append(piece)
        out.append((f"p{i}", rows))
    return out


def test_kafka_ranges_are_read_here_up_to_the_records_limit_by_their_offsets() -> None:
    # Given two partitions' ranges of 30 and 20 offsets
    parts = _parts(_kafka(100, 130), _kafka(0, 20))
    # Then 50 offsets together are read here at a limit of 50, not at 49 nor at 0
    assert reads_here(parts, 1 << 20, 50)
    assert not reads_here(parts, 1 << 20, 49)
    assert not reads_here(parts, 1 << 20, 0)
    # The bytes limit does not decide for ranges that do not know their bytes
    assert reads_here(parts, 0, 50)
    # A range counted when planned (dead letters) says its count, not its offsets
    assert reads_here(_parts(_kafka(0, 100, records=40), _kafka(0, 10)), 0, 50)
    assert _kafka(5, 3).size_records == 0
    assert READ_HERE_RECORDS == 50_000


def test_file_ranges_keep_the_bytes_limit_and_unknown_sizes_go_to_spark() -> None:
    assert reads_here(_parts(_Sized(10), _Sized(20)), 30, 0)
    assert not reads_here(_parts(_Sized(10), _Sized(21)), 30, 10_000)
    assert not reads_here(_parts(_Sized(10)), 0, 10_000)
    assert not reads_here(_parts(_Sized(None)), 1 << 20)
    # Emitted tuples (not ranges) are never read here
    emitted = PartitionRows()
    emitted.pieces.append([("a",)])
    assert not reads_here([("p", emitted)], 1 << 20)


def test_a_driver_without_the_kafka_client_leaves_kafka_ranges_to_spark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a Spark driver whose Python has no confluent_kafka (a cluster node without the
    # provider's kafka extra)
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec",
        lambda name, *a: None if name == "confluent_kafka" else found(name, *a),
    )  # fmt: skip
    # Then a small Kafka batch is not read here (Spark's connector reads it), files still are
    assert _kafka(0, 10).size_records is None
    assert not reads_here(_parts(_kafka(0, 10)), 1 << 20, 50)
    assert reads_here(_parts(_Sized(10)), 1 << 20, 50)
