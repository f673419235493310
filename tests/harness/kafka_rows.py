"""Raw Kafka records as the Spark side's ``mapInArrow`` receives them from
``kafka_read._connector_rows``: an Arrow batch of the connector's columns, ``headers`` as the
JSON text Spark's ``to_json`` makes of them (values in base64, a value-less header without
``value``, ``null`` for a record without headers). The tests without a JVM build these; the
tests with Spark read the real ones."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

__all__ = ["connector_batch", "spark_headers"]


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
