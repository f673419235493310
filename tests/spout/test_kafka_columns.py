"""The Spark side's fast path for JSON Kafka values (``readers.kafka.fast_columns``: Arrow's JSON
reader over a whole batch of the connector's rows) gives exactly the tuples the per-record
parser gives, or declines so the parser runs: the same values, the same errors, the same
drops, whatever the keys, values and headers (no broker, no JVM: batches shaped like the
connector's rows)."""

from __future__ import annotations

import json
import random
from typing import Any

import pyarrow as pa
import pytest

from airflow_trident.errors import MalformedRecordError
from airflow_trident.runtime.spark.readers.kafka import fast_columns
from airflow_trident.spout.kafka_records import KafkaRecordParser
from tests.harness.kafka_rows import connector_batch, spark_side
from tests.spout.test_line_columns import EDGES, SCHEMAS, _object, same

KEYS: list[bytes | None] = [None, b"k", b"", "é中😀".encode(), b"\xff\xfe", b"a\x00b"]
HEADERS: list[list[tuple[str, bytes | None]] | None] = [
    None, [], [("h", b"v")], [("raw", b"\x00\xff"), ("e", None)], [("h", b"1"), ("h", b"2")],
]  # fmt: skip
EXTRA_VALUES: list[bytes | None] = [
    None, b"", b" ", b'{"s": "x"}\n', b'{"s":\n"x"}', b'{"s": "x"}\r', b'{"s": "x"}\n{"s": "y"}',
    b'{"s": "\xff"}', b"\xef\xbb\xbf{}", b'{"n": 1}\t',
]  # fmt: skip


def in_process(parser: KafkaRecordParser, raws: list[tuple[Any, ...]]) -> list[Any] | str:
    """The in-process read's tuples of ``raws``, or its error's text."""
    rows = []
    for raw in raws:
        try:
            row = parser.parse(raw)
        except MalformedRecordError as exc:
            return str(exc)
        if row is not None:
            rows.append(row)
    return rows


def on_spark(parser: KafkaRecordParser, batch: pa.RecordBatch) -> list[Any] | str:
    """What the executors' Arrow UDF gives for ``batch``, or its error's text."""
    try:
        return spark_side(parser, batch)
    except RuntimeError as exc:
        return str(exc)


def _fast(parser: KafkaRecordParser, batch: pa.RecordBatch) -> list[pa.Array] | None:
    """The fast path's columns of the connector's rows ``batch`` (``None``: declined)."""
    return fast_columns(parser, batch.column("key"), batch.column("value"), batch.column("headers"))


def agree(parser: KafkaRecordParser, raws: list[tuple[Any, ...]]) -> bool:
    """Assert both sides give the same for ``raws``; whether the fast path took the batch."""
    batch = connector_batch(raws)
    taken = _fast(parser, batch) is not None
    want, got = in_process(parser, raws), on_spark(parser, batch)
    if isinstance(want, str):
        assert not taken, f"the fast path took records the parser refuses: {raws!r}"
        assert isinstance(got, str), (want, got)
        assert want in got
        return False
    assert not isinstance(got, str), (raws, got)
    assert len(got) == len(want), (raws, want, got)
    for w, g in zip(want, got, strict=True):
        assert all(same(a, b) for a, b in zip(w, g, strict=True)), (raws, w, g)
    return taken


def raw(rng: random.Random, value: bytes | None, offset: int) -> tuple[Any, ...]:
    return (rng.choice(KEYS), value, "t", rng.randrange(3), offset,
            rng.choice([None, 0, 1_700_000_000_000]), rng.choice(HEADERS))  # fmt: skip


@pytest.mark.parametrize("drop", [False, True])
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_edge_value_alone_and_among_clean_ones(name: str, drop: bool) -> None:
    rng = random.Random(name)
    parser = KafkaRecordParser("json", SCHEMAS[name], drop=drop, where="txid 3")
    values = [line.encode("utf-8", "surrogatepass") for line in EDGES] + EXTRA_VALUES
    clean = [json.dumps({n: None for n, _ in SCHEMAS[name]}).encode()] * 5
    taken = 0
    for i, value in enumerate(values):
        taken += agree(parser, [raw(rng, value, i)])
        mixed = [raw(rng, v, j) for j, v in enumerate([*clean[:2], value, *clean[2:]])]
        agree(parser, mixed)
    assert taken > 3, "the fast path took no value at all"


def test_random_batches_agree_and_clean_ones_are_taken() -> None:
    rng = random.Random(35)
    taken = {name: 0 for name in SCHEMAS}
    for round_ in range(120):
        values = [_object(rng).encode() for _ in range(rng.randrange(1, 8))]
        if round_ % 5 == 0:
            values.insert(rng.randrange(len(values) + 1), rng.choice(EXTRA_VALUES))
        raws = [raw(rng, v, i) for i, v in enumerate(values)]
        for name, schema in SCHEMAS.items():
            taken[name] += agree(KafkaRecordParser("json", schema, where="txid 1"), raws)
    assert all(count > 5 for count in taken.values()), taken


def test_a_clean_batch_of_sentences_is_parsed_whole() -> None:
    rng = random.Random(1)
    parser = KafkaRecordParser("json", (("sentence", "string"),), where="txid 1")
    raws = [raw(rng, json.dumps({"sentence": f"the cow {i}"}).encode(), i) for i in range(2000)]
    assert agree(parser, raws)


@pytest.mark.parametrize("value_format", ["str", "bytes", "csv"])
def test_other_formats_and_rescue_are_left_to_the_parser(value_format: str) -> None:
    batch = connector_batch([(b"k", b'{"n": 1}', "t", 0, 1, 2, None)])
    assert _fast(KafkaRecordParser(value_format), batch) is None
    rescuing = KafkaRecordParser("json", (("n", "bigint"),), rescue=True)
    assert _fast(rescuing, batch) is None


def test_a_lone_surrogate_is_a_malformed_record_on_both_sides() -> None:
    # (before: the in-process tuple held a string no state can store; Spark's Arrow array
    # refused it with a raw UnicodeEncodeError)
    parser = KafkaRecordParser("json", (("s", "string"),), where="txid 2")
    raws = [(None, b'{"s": "ok"}', "t", 0, 1, 0, None),
            (None, b'{"s": "\\ud800"}', "t", 0, 2, 0, None)]  # fmt: skip
    want = in_process(parser, raws)
    assert isinstance(want, str)
    assert "offset 2: field 's'" in want
    assert "lone surrogate" in want
    agree(parser, raws)


def test_spark_large_binary_columns_are_parsed_record_by_record() -> None:
    # (spark.sql.execution.arrow.useLargeVarTypes=true hands large_binary columns to Python)
    rng = random.Random(7)
    parser = KafkaRecordParser("json", (("s", "string"),), where="txid 1")
    raws = [raw(rng, json.dumps({"s": f"w{i}"}).encode(), i) for i in range(20)]
    small = connector_batch(raws)
    large = pa.RecordBatch.from_arrays(
        [small.column(0).cast(pa.large_binary()), small.column(1).cast(pa.large_binary()),
         *small.columns[2:]], names=small.schema.names,
    )  # fmt: skip
    assert _fast(parser, large) is None
    assert on_spark(parser, large) == on_spark(parser, small) == in_process(parser, raws)
