"""A Kafka range read by Spark (:class:`~airflow_trident.spout.kafka_records.KafkaReadSpec`):
``spark.read.format("kafka")`` with the range's per-partition ``startingOffsets`` /
``endingOffsets``, ``includeHeaders`` and the spout's isolation level, then the spout's own
record parser on the executors (``mapInArrow``), so both runtimes emit the same tuples.

The connector jar (``org.apache.spark:spark-sql-kafka-0-10``) is on the session's
``spark.jars`` (docs/jvm.md). The options hold the connection's ``kafka.*`` settings (SASL's
JAAS line among them): they go to the reader, never to a log.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from airflow_trident.errors import TridentError
from airflow_trident.runtime.spark.python_ops import failure_text
from airflow_trident.spout.kafka_records import KafkaReadSpec, KafkaRecordParser

__all__ = ["ARROW", "SQL", "read_kafka"]

ARROW = {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32(),
         "double": pa.float64(), "boolean": pa.bool_(), "binary": pa.binary()}  # fmt: skip
SQL = {"string": T.StringType(), "bigint": T.LongType(), "int": T.IntegerType(),
       "double": T.DoubleType(), "boolean": T.BooleanType(), "binary": T.BinaryType()}  # fmt: skip


@dataclass(frozen=True)
class _Parse:
    """``mapInArrow`` over the connector's rows: each record made a tuple by the parser."""

    parser: KafkaRecordParser

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = self.parser.out_schema
        arrow = pa.schema([pa.field(n, ARROW[k]) for n, k in schema])
        try:
            for batch in batches:
                cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
                rows = []
                for i in range(batch.num_rows):
                    headers = cols["headers"][i]
                    raw = (cols["key"][i], cols["value"][i], cols["topic"][i],
                           cols["partition"][i], cols["offset"][i], cols["ts"][i],
                           None if not headers else
                           [(h["key"], h["value"]) for h in headers])  # fmt: skip
                    row = self.parser.parse(raw)
                    if row is not None:
                        rows.append(row)
                yield pa.RecordBatch.from_arrays(
                    [pa.array([r[j] for r in rows], arrow.field(j).type)
                     for j in range(len(schema))], schema=arrow,
                )  # fmt: skip
        except TridentError as exc:
            raise RuntimeError(failure_text(exc)) from None


def read_kafka(spark: SparkSession, spec: KafkaReadSpec) -> DataFrame:
    """The DataFrame of a Kafka range: the spout's fields, typed, parsed as in process."""
    assert spec.parser is not None
    raw = (
        spark.read.format("kafka").options(**spec.options).load()
        .selectExpr("key", "value", "topic", "partition", "offset",
                    "unix_millis(timestamp) AS ts", "headers")
    )  # fmt: skip
    struct = T.StructType([T.StructField(n, SQL[k]) for n, k in spec.parser.out_schema])
    return raw.mapInArrow(_Parse(spec.parser), struct)
