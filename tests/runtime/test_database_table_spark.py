"""The database table source on Spark: a PostgreSQL range is read by the executors through JDBC
(the driver ``org.postgresql:postgresql`` of ``jvm/pom.xml``) in parallel, and a batch processed
on Spark counts what the in-process runtime counts."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.operation import Count
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.database_table import DatabaseTableSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology
from tests.harness.jars import jar

pytestmark = pytest.mark.integration

ROWS = [(u, f"w{(u * 7) % 11}") for u in range(300)]


@pytest.fixture
def jdbc_spark(spark: Any) -> Any:
    """The shared session: the PostgreSQL JDBC driver is on its spark.jars (tests/conftest.py)."""
    assert spark.sparkContext._jvm.org.apache.spark.util.Utils.classIsLoadable(
        "org.postgresql.Driver"
    ), "the session-wide Spark lacks the JDBC driver: run `bash scripts/jars.sh spark`"
    return spark


@pytest.fixture
def events(pg_url: str, unique_name: str) -> Iterator[str]:
    engine = sa.create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                f"CREATE TABLE {unique_name} (id BIGSERIAL PRIMARY KEY, user_id INT, word TEXT)"
            )
        )
        conn.execute(
            sa.text(f"INSERT INTO {unique_name} (user_id, word) VALUES (:u, :w)"),
            [{"u": u, "w": w} for u, w in ROWS],
        )
    yield unique_name
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS {unique_name}"))
    engine.dispose()


def test_a_range_is_read_by_spark_in_parallel_as_in_process(
    jdbc_spark: Any, pg_url: str, events: str
) -> None:
    from airflow_trident.runtime.spark.native import read_range

    # Given the first range of partition p1 (odd users), 100 rows at most
    spout = DatabaseTableSpout(
        pg_url, events, ["id", "word"], partitions=2, partition_column="user_id",
        max_rows_per_batch=100, spark_partitions=3,
    )  # fmt: skip
    source = spout.plan("p1", None)
    assert source is not None
    # When Spark reads it
    df = read_range(jdbc_spark, source)
    # Then in 3 parallel reads, exactly the rows SQLAlchemy reads here, typed
    assert df.rdd.getNumPartitions() == 3
    got = sorted(tuple(r) for r in df.collect())
    assert got == sorted(source.rows())
    assert len(got) == source.count == 100
    assert dict(df.dtypes) == {"id": "bigint", "word": "string"}


def test_batches_processed_on_spark_count_every_row_once(
    jdbc_spark: Any, pg_url: str, events: str, zk_store: CoordinatorStore, tmp_path: Path
) -> None:
    from airflow_trident.batch.on_spark import process_on_spark

    # Given word counts of the table, 3 partitions of at most 120 rows a batch
    topology = TridentTopology(zk_store.paths.topology)
    state = sql_state(
        f"sqlite:///{tmp_path}/state.db", "counts", "transactional", key_fields=("word",),
        value_fields=("count",), value_type="bigint",
    )  # fmt: skip
    spout = DatabaseTableSpout(
        pg_url, events, ["word"], partitions=3, partition_column="user_id", max_rows_per_batch=60
    )
    (
        topology.new_stream("events", spout)
        .group_by(["word"])
        .persistent_aggregate(state, Count(), ["count"], name="counts")
    )
    steps = BatchSteps(topology, zk_store, StagingArea(str(tmp_path / "staging"), topology.name))
    # When two batches are processed on Spark (the second one twice) and committed
    for run in ("r1", "r2"):
        txid = int(steps.begin(run)["txid"])
        process_on_spark(steps, jdbc_spark, txid, 0.0)
        if run == "r2":
            process_on_spark(steps, jdbc_spark, txid, 0.0)
        assert steps.commit(txid)["applied"]
        steps.success(txid)
    # Then the counts are those of the 2 x 3 x 60 rows the batches' ranges hold
    by_user = sorted(ROWS, key=lambda r: r[0])
    read = [w for p in range(3) for (_, w) in [r for r in by_user if r[0] % 3 == p][:120]]
    want = Counter(read)
    counts: Any = state.make_state()
    assert dict(zip(want, counts.multi_get([(w,) for w in want]), strict=True)) == want


_FRESH_SESSION = """
import sys
from airflow_trident.runtime.spark.native import read_range
from airflow_trident.runtime.spark.session import local_session
from airflow_trident.spout.database_table import DatabaseTableSpout
url, table, jar = sys.argv[1:4]
spark = local_session("local[1]", app_name="jdbc-fresh")  # no spark.jars
kwargs = {} if jar == "-" else {"jdbc_jar": jar}
spout = DatabaseTableSpout(url, table, ["id", "word"], max_rows_per_batch=1000, **kwargs)
source = spout.plan("all", None)
try:
    print("rows", read_range(spark, source).count())
except Exception as exc:
    print("error", type(exc).__name__, str(exc).splitlines()[0][:400])
spark.stop()
"""


@pytest.mark.long  # a SparkSession of its own: ~30 s
def test_a_session_without_the_jdbc_driver_gets_the_named_jar_or_a_clear_error(
    pg_url: str, events: str, tmp_path: Path
) -> None:
    # Given a fresh Spark session started without spark.jars (a process of its own)
    driver = jar("spark", "postgresql")  # org.postgresql:postgresql of jvm/pom.xml
    script = tmp_path / "fresh.py"
    script.write_text(_FRESH_SESSION)

    def read(jar: str) -> str:
        done = subprocess.run(
            [sys.executable, str(script), pg_url, events, jar],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        return "\n".join(ln for ln in done.stdout.splitlines() if ln.startswith(("rows", "error")))

    # When a PostgreSQL range is read on Spark: the spout's jar is added by itself
    assert read(driver) == f"rows {len(ROWS)}"
    # And a jar that does not exist is a configuration error naming the fix
    missing = read(str(tmp_path / "nowhere.jar"))
    assert missing.startswith("error ConfigurationError")
    assert "nowhere.jar" in missing
    assert "spark.jars" in missing
