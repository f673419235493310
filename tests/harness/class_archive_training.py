"""The training run of :mod:`tests.harness.class_archive`: a ``spark-submit`` application
that loads the classes the tests' JVMs load (SQL planning and code generation, shuffles, Python
and Arrow UDFs, Parquet/JSON/CSV files, JDBC, windows, a Spark Connect server answering a
client), so that its JVM's exit archives them. Not a test: what it computes is thrown away.

    spark-submit --master local[2] tests/harness/class_archive_training.py
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tests.harness.ports import free_port

_CLIENT = """
import sys
from pyspark.sql import SparkSession
s = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
df = s.range(100).selectExpr("id % 7 AS k", "id AS v").groupBy("k").sum("v")
df.orderBy("k").collect()
df.toArrow()
s.stop()
"""


def _batches(batches: Iterable[Any]) -> Iterator[Any]:
    yield from batches


def main() -> None:
    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F

    port = free_port()
    spark = (
        SparkSession.builder.appName("class archive training")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
        .config("spark.connect.grpc.binding.address", "127.0.0.1")
        .config("spark.connect.grpc.binding.port", str(port))
        .getOrCreate()
    )
    rows = [(i, f"w{i % 13} x{i % 5}") for i in range(200)]
    words = spark.createDataFrame(rows, "n INT, s STRING")
    exploded = words.select("n", F.explode(F.split("s", r"\s+")).alias("w"))
    counts = exploded.groupBy("w").agg(F.count("*").alias("c"), F.max("n").alias("m"))
    counts.join(exploded, "w").orderBy("w").limit(5).collect()
    window = Window.partitionBy("w").orderBy("n")
    exploded.withColumn("r", F.row_number().over(window)).where("r = 1").collect()
    upper = F.udf(lambda s: s.upper(), "string")
    exploded.select(upper("w")).distinct().collect()
    exploded.mapInArrow(_batches, exploded.schema).count()
    counts.toArrow()
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in ("parquet", "json", "csv"):
            path = str(Path(tmp) / fmt)
            counts.write.format(fmt).mode("overwrite").save(path)
            spark.read.format(fmt).load(path).collect()
        url = f"jdbc:sqlite:{Path(tmp) / 'db'}"
        # no SQLite JDBC driver: the JDBC source's classes are loaded all the same
        with contextlib.suppress(Exception):
            spark.read.format("jdbc").option("url", url).option("dbtable", "t").load()
    subprocess.run(
        [sys.executable, "-c", _CLIENT, f"sc://127.0.0.1:{port}"],
        env={**os.environ, "SPARK_CONNECT_MODE": "1"},
        check=False,
        timeout=300,
    )
    spark.stop()


if __name__ == "__main__":
    main()
