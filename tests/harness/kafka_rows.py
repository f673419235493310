"""Raw Kafka records as the Spark side's ``mapInArrow`` receives them from
``readers.kafka._connector_rows``: an Arrow batch of the connector's columns, ``headers`` as the
JSON text Spark's ``to_json`` makes of them (values in base64, a value-less header without
``value``, ``null`` for a record without headers). The tests without a JVM build these; the
tests with Spark read the real ones."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

__all__ = ["connector_batch", "spark_headers", "spark_side"]


def spark_headers(pairs: Sequence[tuple[str, bytes | None]] | None) -> str | None:
    """``pairs`` as Spark's ``to_json(headers)`` spells them (``None`` without any)."""
    if not pairs:
        return None
    out: list[dict[str, str]] = []
    for key, value in pairs:
        header = {"key": key}
        if value is not None:
            header["value"] = base64.b64encode(value).decode("ascii")
        out.append(header)
    return json.dumps(out, separators=(",", ":"))


def connector_batch(raws: Sequence[tuple[Any, ...]]) -> pa.RecordBatch:
    """``raws`` (``(key, value, topic, partition, offset, ts, headers)``) as the connector's
    rows."""
    return pa.RecordBatch.from_arrays(
        [pa.array([r[0] for r in raws], pa.binary()), pa.array([r[1] for r in raws], pa.binary()),
         pa.array([r[2] for r in raws], pa.string()), pa.array([r[3] for r in raws], pa.int32()),
         pa.array([r[4] for r in raws], pa.int64()), pa.array([r[5] for r in raws], pa.int64()),
         pa.array([spark_headers(r[6]) for r in raws], pa.string())],
        names=["key", "value", "topic", "partition", "offset", "ts", "headers"],
    )  # fmt: skip


def spark_side(
    parser: Any, batch: pa.RecordBatch, wheres: Sequence[tuple[str, int, str]] = ()
) -> list[tuple[Any, ...]]:
    """The tuples Spark's read makes of the connector's rows ``batch``
    (``readers.kafka.read_kafka`` without a JVM): the product's UDF over the columns it is given,
    its kept records joined with the columns that stay in the JVM (topic, partition, offset,
    timestamp), in the UDF's row order. Raises the UDF's ``RuntimeError``."""
    from airflow_trident.runtime.spark.readers.kafka import _ParseValues

    topics = batch.column("topic").to_pylist()
    parts = batch.column("partition").to_pylist()
    places = tuple(wheres) or tuple(dict.fromkeys((t, p, parser.where)
                                                  for t, p in zip(topics, parts, strict=True)))
    index = {(t, p): i for i, (t, p, _) in enumerate(places)}
    place = pa.array([index[(t, p)] for t, p in zip(topics, parts, strict=True)], pa.int32())
    made = _ParseValues(parser, places)(
        batch.column("key"), batch.column("value"), place, batch.column("offset"),
        batch.column("headers"),
    )  # fmt: skip
    rows = made.to_pylist()
    meta = zip(topics, parts, batch.column("offset").to_pylist(), batch.column("ts").to_pylist(),
               strict=True)  # fmt: skip
    out = []
    for row, (topic, partition, offset, ts) in zip(rows, meta, strict=True):
        if not row["keep"]:
            continue
        values = [row[f"f{i}"] for i in range(len(row) - 1)]
        out.append((*values[:-1], topic, partition, offset, ts, values[-1]))
    return out
