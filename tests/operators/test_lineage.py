"""OpenLineage of the process and commit tasks: inputs are the spouts, outputs the states, each
named by its own system per the OpenLineage naming spec (``kafka://host:port`` / topic,
``postgres://host:port`` / ``db.schema.table``, files as ``file`` / ``s3://bucket``, Iceberg by its
catalog and ``namespace.table``) so they join other producers' datasets.

Connection ids are resolved when the task asks for its lineage (the topologies below are made
before their connections exist), and a source or sink that cannot be named then is named by its
topology, with a log line, never a failed task.

``apache-airflow-providers-openlineage`` is in the ``dev`` extra: the tests of the
``OperatorLineage`` run with it; without it the method returns ``None``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import warnings
from pathlib import Path
from typing import Any

import pytest

from airflow_trident.operation import Count
from airflow_trident.operators.batch import CommitBatchOperator
from airflow_trident.operators.connect import ConnectProcessBatchOperator
from airflow_trident.operators.lineage import lineage_datasets
from airflow_trident.operators.process import ProcessBatchOperator
from airflow_trident.runtime.reference import load_topology
from airflow_trident.spout.database_table import DatabaseTableSpout
from airflow_trident.spout.file_log import FileLogSpout, OpaqueFileLogSpout
from airflow_trident.spout.kafka import KafkaSpout, OpaqueKafkaSpout
from airflow_trident.spout.memory import MemoryOpaqueSpout, MemoryTransactionalSpout
from airflow_trident.state.delta import DeltaWriter, delta_state
from airflow_trident.state.iceberg import IcebergWriter, iceberg_state
from airflow_trident.state.kafka import KafkaWriter, kafka_sink
from airflow_trident.state.memory import memory_state
from airflow_trident.state.sql import sql_state
from airflow_trident.state.sql.factory import SqlMapStateFactory
from airflow_trident.topology import TridentTopology

REFERENCE = "tests.harness.topologies:e2e_word_count"
KAFKA_REFERENCE = "tests.operators.test_lineage:kafka_by_connection"
HAS_OPENLINEAGE = importlib.util.find_spec("airflow.providers.openlineage") is not None
PG_STATE = "postgresql+psycopg://u:s3cret@warehouse:6432/dw"


def _operators(reference: str = REFERENCE) -> list[object]:
    common: dict[str, Any] = {"topology": reference, "staging_root": "/tmp/staging"}
    return [
        ProcessBatchOperator(task_id="process", **common),
        ConnectProcessBatchOperator(task_id="connect", **common),
        CommitBatchOperator(task_id="commit", deferrable=False, **common),
    ]


def kafka_by_connection() -> TridentTopology:
    """Kafka in and out through the connection ``lineage_kafka`` (resolved when asked)."""
    t = TridentTopology("lineage_kafka")
    events = t.new_stream("events", KafkaSpout("events", kafka_config_id="lineage_kafka"))
    events.partition_persist(
        kafka_sink("copies", "lineage_kafka", topology="lineage_kafka"),
        ["key", "value"], KafkaWriter(key="key", value="value"), name="copies",
    )  # fmt: skip
    return t


def _kafka_connection(monkeypatch: pytest.MonkeyPatch, servers: str) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_LINEAGE_KAFKA", json.dumps({
        "conn_type": "kafka", "password": "s3cret",
        "extra": {"bootstrap.servers": servers, "security.protocol": "SASL_SSL",
                  "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "s3cret"},
    }))  # fmt: skip


def test_memory_spouts_and_states_are_named_by_their_topology() -> None:
    # Given the e2e topology (a memory spout, a SQL state) plus a memory state and an opaque
    # memory spout: nothing outside the topology holds them
    topology = load_topology(REFERENCE)
    t = TridentTopology("lineage_memory")
    t.new_stream("a", MemoryTransactionalSpout({"p": [("x",)]}, ["k"], 1)).group_by(
        ["k"]
    ).persistent_aggregate(memory_state("lineage_mem"), Count(), ["n"], name="mem")
    t.new_stream("b", MemoryOpaqueSpout({"p": [("x",)]}, ["k"], 1)).group_by(
        ["k"]
    ).persistent_aggregate(memory_state("lineage_mem2"), Count(), ["n"], name="mem2")
    # When their lineage is listed
    inputs, outputs = lineage_datasets(topology, PG_STATE)
    memory_in, memory_out = lineage_datasets(t, PG_STATE)
    # Then the memory spouts and states are the topology's own; the SQL state is its table
    assert inputs == [(f"trident://{topology.name}", "sentences")]
    assert outputs == [("postgres://warehouse:6432", f"dw.public.{topology.name}")]
    assert memory_in == [("trident://lineage_memory", "a"), ("trident://lineage_memory", "b")]
    assert memory_out == [("trident://lineage_memory", "mem"), ("trident://lineage_memory", "mem2")]


def test_kafka_spouts_and_the_kafka_sink_are_named_by_broker_and_topic() -> None:
    # Given Kafka in (both spouts, named topics and a pattern) and out, by their settings
    servers = {"bootstrap.servers": "SASL_SSL://b1.example:9093,b2.example:9093",
               "sasl.password": "s3cret"}  # fmt: skip
    t = TridentTopology("lineage_kafka_config")
    tx = KafkaSpout(["orders", "refunds"], config=servers)
    opaque = OpaqueKafkaSpout(pattern="logs-.*", config={"bootstrap.servers": "k"})
    t.new_stream("tx", tx).partition_persist(
        kafka_sink("order_copies", topology="lineage_kafka_config", config=servers),
        ["key", "value"],
        KafkaWriter(key="key", value="value"),
        name="copies",
    )
    t.new_stream("opaque", opaque).group_by(["key"]).persistent_aggregate(
        sql_state(None, "log_counts", "opaque", key_fields=("key",)), Count(), ["n"],
        name="log_counts",
    )  # fmt: skip
    # When its lineage is listed
    inputs, outputs = lineage_datasets(t, PG_STATE)
    # Then each topic is kafka://<first bootstrap server> + topic (a pattern: the pattern)
    assert inputs == [("kafka://k:9092", "logs-.*"),
                      ("kafka://b1.example:9093", "orders"),
                      ("kafka://b1.example:9093", "refunds")]  # fmt: skip
    assert outputs == [("kafka://b1.example:9093", "order_copies"),
                       ("postgres://warehouse:6432", "dw.public.log_counts")]  # fmt: skip
    assert "s3cret" not in repr((inputs, outputs))


@pytest.mark.skipif(not HAS_OPENLINEAGE, reason="needs apache-airflow-providers-openlineage")
def test_a_kafka_connection_is_resolved_when_the_task_reports_its_lineage(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Given a topology made before its Kafka connection exists (as a DAG file is parsed)
    monkeypatch.setenv("TRIDENT_STATE_URL", f"sqlite:///{tmp_path}/state.db")
    kafka_by_connection()
    # When the connection is defined, then the tasks report their lineage
    _kafka_connection(monkeypatch, "kafka-1.example:9094,kafka-2.example:9094")
    for operator in _operators(KAFKA_REFERENCE):
        lineage = operator.get_openlineage_facets_on_complete(None)  # type: ignore[attr-defined]
        # Then the spout and the sink are the topics on the connection's first broker
        assert [(d.namespace, d.name) for d in lineage.inputs] == [
            ("kafka://kafka-1.example:9094", "events")]  # fmt: skip
        assert [(d.namespace, d.name) for d in lineage.outputs] == [
            ("kafka://kafka-1.example:9094", "copies")]  # fmt: skip
        assert "s3cret" not in repr(lineage)


@pytest.mark.skipif(not HAS_OPENLINEAGE, reason="needs apache-airflow-providers-openlineage")
def test_a_missing_connection_is_logged_and_named_by_the_topology(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given the Kafka topology and no connection lineage_kafka
    monkeypatch.setenv("TRIDENT_STATE_URL", f"sqlite:///{tmp_path}/state.db")
    monkeypatch.delenv("AIRFLOW_CONN_LINEAGE_KAFKA", raising=False)
    (commit,) = [o for o in _operators(KAFKA_REFERENCE) if isinstance(o, CommitBatchOperator)]
    # When the task reports its lineage
    with caplog.at_level(logging.WARNING, logger="airflow_trident.operators.lineage"):
        lineage = commit.get_openlineage_facets_on_complete(None)
    # Then it does not fail: the spout and the sink are named by the topology, and a line says
    # which could not be named
    assert [(d.namespace, d.name) for d in lineage.inputs] == [
        ("trident://lineage_kafka", "events")
    ]
    assert [(d.namespace, d.name) for d in lineage.outputs] == [
        ("trident://lineage_kafka", "copies")]  # fmt: skip
    logged = [r.getMessage() for r in caplog.records]
    assert any("spout 'events' cannot be named" in m for m in logged), logged
    assert any("state 'copies' cannot be named" in m for m in logged), logged


def test_iceberg_sinks_are_named_by_their_catalog_and_namespace_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given Iceberg sinks: a REST catalog, a SQL catalog by connection id with an S3 warehouse,
    # and one in the run's state database with a local warehouse
    rest = {"type": "rest", "uri": "https://user:tok@catalog.example:8181/api/catalog",
            "warehouse": "prod", "credential": "id:s3cret"}  # fmt: skip
    t = TridentTopology("lineage_iceberg")
    stream = t.new_stream("s", MemoryTransactionalSpout({"p": [("x",)]}, ["k"], 1))
    stream.partition_persist(iceberg_state("db.rest_events", "a.r", catalog=rest), ["k"],
                             IcebergWriter(), name="rest")  # fmt: skip
    with warnings.catch_warnings():  # catalog_conn_id, or iceberg_conn_id where renamed
        warnings.simplefilter("ignore", DeprecationWarning)
        by_id = iceberg_state("db.sql_events", "a.s", catalog_conn_id="lineage_cat")
    stream.partition_persist(by_id, ["k"], IcebergWriter(), name="sql")
    stream.partition_persist(iceberg_state("db.own_events", "a.o", warehouse="/data/wh"), ["k"],
                             IcebergWriter(), name="own")  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_LINEAGE_CAT", json.dumps({
        "conn_type": "sqlite", "host": "/data/catalog.db",
        "extra": {"warehouse": "s3a://lake/warehouse/"}}))  # fmt: skip
    # When its lineage is listed
    _, outputs = lineage_datasets(t, PG_STATE)
    # Then each table is its catalog + namespace.table, never a PostgreSQL table of the state db
    assert outputs == [("file:///data/wh", "db.own_events"),
                       ("https://catalog.example:8181/api/catalog/prod", "db.rest_events"),
                       ("s3://lake/warehouse", "db.sql_events")]  # fmt: skip
    assert "s3cret" not in repr(outputs)
    assert "tok" not in repr(outputs)


def test_delta_sinks_are_named_by_their_storage_uri(tmp_path: Path) -> None:
    t = TridentTopology("lineage_delta")
    stream = t.new_stream("s", MemoryTransactionalSpout({"p": [("x",)]}, ["k"], 1))
    stream.partition_persist(delta_state(str(tmp_path / "events"), "a.l"), ["k"], DeltaWriter(),
                             name="local")  # fmt: skip
    stream.partition_persist(delta_state("s3a://lake/tables/events/", "a.s", conn_id="lake"),
                             ["k"], DeltaWriter(), name="remote")  # fmt: skip
    _, outputs = lineage_datasets(t, PG_STATE)
    assert outputs == [("file", str(tmp_path / "events")), ("s3://lake", "tables/events")]


def test_sql_states_are_tables_of_their_own_database_or_the_runs() -> None:
    # Given SQL states: one in the run's database (a schema-qualified table) and one in a
    # database of its own
    t = TridentTopology("lineage_sql")
    stream = t.new_stream("s", MemoryTransactionalSpout({"p": [("x",)]}, ["k"], 1))
    runs = SqlMapStateFactory(None, "analytics.counts", "transactional", key_fields=("k",))
    own = SqlMapStateFactory("postgresql://u:pw@other.example/ops", "totals", "transactional",
                             key_fields=("k",))  # fmt: skip
    stream.group_by(["k"]).persistent_aggregate(runs, Count(), ["n"], name="counts")
    stream.group_by(["k"]).persistent_aggregate(own, Count(), ["n"], name="totals")
    # When its lineage is listed against a PostgreSQL, then a SQLite state database
    _, on_postgres = lineage_datasets(t, PG_STATE)
    _, on_sqlite = lineage_datasets(t, "sqlite:////var/lib/trident/state.db")
    # Then the state in its own database keeps it; the other is in the run's
    assert on_postgres == [("postgres://warehouse:6432", "dw.analytics.counts"),
                           ("postgres://other.example:5432", "ops.public.totals")]  # fmt: skip
    assert on_sqlite == [("sqlite:///var/lib/trident/state.db", "counts"),
                         ("postgres://other.example:5432", "ops.public.totals")]  # fmt: skip


def test_a_table_source_and_a_file_log_are_named_as_other_producers_name_them(
    tmp_path: Path,
) -> None:
    # Given a topology reading a PostgreSQL table (also opaquely) and directories of files
    t = TridentTopology("lineage_sources")
    table = DatabaseTableSpout("postgresql+psycopg://etl:pw@pg.example/shop", "orders", ["id"])
    files = FileLogSpout(tmp_path / "log", ["k"])
    remote = OpaqueFileLogSpout("s3://landing/events/", ["k"])
    t.new_stream("orders", table).group_by(["id"]).persistent_aggregate(
        sql_state(None, "order_counts", "opaque", key_fields=("id",)),
        Count(),
        ["n"],
        name="order_counts",
    )
    t.new_stream("again", table.as_opaque()).group_by(["id"]).persistent_aggregate(
        sql_state(None, "again_counts", "opaque", key_fields=("id",)),
        Count(),
        ["n"],
        name="again_counts",
    )
    t.new_stream("events", files).group_by(["k"]).persistent_aggregate(
        sql_state(None, "event_counts", "opaque", key_fields=("k",)),
        Count(),
        ["n"],
        name="event_counts",
    )
    t.new_stream("remote", remote).group_by(["k"]).persistent_aggregate(
        sql_state(None, "remote_counts", "opaque", key_fields=("k",)), Count(), ["n"],
        name="remote_counts")  # fmt: skip
    # When its lineage is listed
    inputs, outputs = lineage_datasets(t, "postgresql://u:pw@warehouse:6432/dw")
    # Then the table is the PostgreSQL dataset another producer of it emits; local files are
    # `file` + their absolute path (as Airflow's file assets are), a bucket s3://bucket + key
    assert inputs == [("postgres://pg.example:5432", "shop.public.orders"),
                      ("file", str(tmp_path / "log")),
                      ("postgres://pg.example:5432", "shop.public.orders"),
                      ("s3://landing", "events")]  # fmt: skip
    assert len(outputs) == 4
    assert "pw" not in repr((inputs, outputs))


@pytest.mark.parametrize(
    ("location", "dataset"),
    [
        ("s3://lake/raw/events/", ("s3://lake", "raw/events")),
        ("s3a://lake/raw", ("s3://lake", "raw")),
        ("gs://b/k", ("gs://b", "k")),
        ("hdfs://nn:8020/data/x", ("hdfs://nn:8020", "/data/x")),
        ("file:///data/x/", ("file", "/data/x")),
        ("/data/x", ("file", "/data/x")),
        ("file://fileserver/data/x", ("file://fileserver", "/data/x")),
    ],
)
def test_locations_follow_the_naming_spec(location: str, dataset: tuple[str, str]) -> None:
    from airflow_trident.operators.lineage import location_dataset

    assert location_dataset(location) == dataset


@pytest.mark.skipif(HAS_OPENLINEAGE, reason="the OpenLineage provider is installed")
def test_without_the_openlineage_provider_there_is_no_lineage() -> None:
    for operator in _operators():
        assert operator.get_openlineage_facets_on_complete(None) is None  # type: ignore[attr-defined]


@pytest.mark.skipif(not HAS_OPENLINEAGE, reason="needs apache-airflow-providers-openlineage")
def test_process_and_commit_tasks_report_operator_lineage(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    # Given a state database in TRIDENT_STATE_URL (no state connection)
    monkeypatch.setenv("TRIDENT_STATE_URL", f"sqlite:///{tmp_path}/state.db")
    topology = load_topology(REFERENCE).name
    for operator in _operators():
        # When OpenLineage asks the task for its lineage on completion
        lineage = operator.get_openlineage_facets_on_complete(None)  # type: ignore[attr-defined]
        # Then it is the Spark provider's kind of OperatorLineage: spout in, state table out
        assert type(lineage).__name__ == "OperatorLineage"
        assert [(d.namespace, d.name) for d in lineage.inputs] == [
            (f"trident://{topology}", "sentences")
        ]
        assert [(d.namespace, d.name) for d in lineage.outputs] == [
            (f"sqlite://{tmp_path}/state.db", topology)
        ]


def test_a_table_source_by_connection_id_is_named_from_the_connection_at_run_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_trident.hooks import connections

    # Given a table source naming a connection that does not exist yet (a DAG file parsed)
    t = TridentTopology("lineage_conn")
    spout = DatabaseTableSpout(conn_id="lineage_pg", table="orders", fields=["id"])
    state = sql_state(None, "counts", "opaque", key_fields=("id",))
    t.new_stream("orders", spout).group_by(["id"]).persistent_aggregate(
        state, Count(), ["n"], name="counts")  # fmt: skip
    # When the connection is defined, and the lineage listed in a task (connections via Airflow)
    monkeypatch.setenv("AIRFLOW_CONN_LINEAGE_PG", "postgres://etl:s3cret@pg.example:5433/shop")
    connections.install()
    inputs, _ = lineage_datasets(t, None)
    # Then the table is named from the connection's host, port and database, without secrets
    assert inputs == [("postgres://pg.example:5433", "shop.public.orders")]
