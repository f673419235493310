"""OpenLineage of the process and commit tasks: inputs are the spouts, outputs the states,
named per the OpenLineage naming spec (``postgres://host:port`` / ``db.schema.table``, files as
``file://`` / ``s3://``) so they join other producers' datasets.

``apache-airflow-providers-openlineage`` is in the ``dev`` extra: the test of the
``OperatorLineage`` runs with it; without it the method returns ``None``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from airflow_trident.operators.batch import CommitBatchOperator
from airflow_trident.operators.connect import ConnectProcessBatchOperator
from airflow_trident.operators.lineage import lineage_datasets
from airflow_trident.operators.process import ProcessBatchOperator
from airflow_trident.runtime.reference import load_topology

REFERENCE = "tests.harness.topologies:e2e_word_count"
HAS_OPENLINEAGE = importlib.util.find_spec("airflow.providers.openlineage") is not None


def _operators() -> list[object]:
    common = {"topology": REFERENCE, "staging_root": "/tmp/staging"}
    return [
        ProcessBatchOperator(task_id="process", **common),
        ConnectProcessBatchOperator(task_id="connect", **common),
        CommitBatchOperator(task_id="commit", deferrable=False, **common),
    ]


def test_datasets_are_the_spouts_and_the_state_tables_without_credentials() -> None:
    # Given the e2e topology (one spout, one SQL state) and a PostgreSQL state URL
    topology = load_topology(REFERENCE)
    # When its lineage datasets are listed
    inputs, outputs = lineage_datasets(topology, "postgresql+psycopg://u:s3cret@db:5433/st")
    # Then the spout is the input and the state's table the output, named per the spec
    assert inputs == [(f"trident://{topology.name}", "sentences")]
    assert outputs == [("postgres://db:5433", f"st.public.{topology.name}")]
    assert "s3cret" not in repr(outputs)


def test_a_table_source_and_a_file_log_are_named_as_other_producers_name_them(
    tmp_path: Path,
) -> None:
    from airflow_trident.operation import Count
    from airflow_trident.spout.database_table import DatabaseTableSpout
    from airflow_trident.spout.file_log import FileLogSpout
    from airflow_trident.state.sql import sql_state
    from airflow_trident.topology import TridentTopology

    # Given a topology reading a PostgreSQL table and a directory of files into SQL states
    t = TridentTopology("lineage_sources")
    table = DatabaseTableSpout("postgresql+psycopg://etl:pw@pg.example/shop", "orders", ["id"])
    files = FileLogSpout(tmp_path / "log", ["k"])
    orders = sql_state(None, "order_counts", "opaque", key_fields=("id",))
    events = sql_state(None, "event_counts", "opaque", key_fields=("k",))
    t.new_stream("orders", table).group_by(["id"]).persistent_aggregate(
        orders, Count(), ["n"], name="order_counts")
    t.new_stream("events", files).group_by(["k"]).persistent_aggregate(
        events, Count(), ["n"], name="event_counts")  # fmt: skip
    # When its lineage is listed
    inputs, outputs = lineage_datasets(t, "postgresql://u:pw@warehouse:6432/dw")
    # Then the table is the PostgreSQL dataset another producer of it emits, the files are file://
    assert inputs == [("file://", str(tmp_path / "log")),
                      ("postgres://pg.example:5432", "shop.public.orders")]  # fmt: skip
    assert outputs == [("postgres://warehouse:6432", "dw.public.event_counts"),
                       ("postgres://warehouse:6432", "dw.public.order_counts")]  # fmt: skip


@pytest.mark.parametrize(
    ("location", "dataset"),
    [
        ("s3://lake/raw/events/", ("s3", "lake", "raw/events")),
        ("s3a://lake/raw", ("s3", "lake", "raw")),
        ("gs://b/k", ("gs", "b", "k")),
        ("hdfs://nn:8020/data/x", ("hdfs", "nn:8020", "/data/x")),
        ("file:///data/x/", ("file", "", "/data/x")),
    ],
)
def test_locations_follow_the_naming_spec(location: str, dataset: tuple[str, str, str]) -> None:
    from airflow_trident.operators.lineage import location_dataset

    scheme, authority, name = dataset
    assert location_dataset(location) == (f"{scheme}://{authority}", name)


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


def test_a_table_source_by_connection_id_is_named_from_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_trident.operation import Count
    from airflow_trident.operators.lineage import _connection_url
    from airflow_trident.spout.database_table import DatabaseTableSpout
    from airflow_trident.state.sql import sql_state
    from airflow_trident.topology import TridentTopology

    # Given an Airflow connection to PostgreSQL and a table source naming it by id
    monkeypatch.setenv("AIRFLOW_CONN_LINEAGE_PG", "postgres://etl:s3cret@pg.example:5433/shop")
    t = TridentTopology("lineage_conn")
    spout = DatabaseTableSpout(conn_id="lineage_pg", table="orders", fields=["id"])
    state = sql_state(None, "counts", "opaque", key_fields=("id",))
    t.new_stream("orders", spout).group_by(["id"]).persistent_aggregate(
        state, Count(), ["n"], name="counts")  # fmt: skip
    # When its lineage is listed as the task lists it
    inputs, _ = lineage_datasets(t, None, _connection_url)
    # Then the table is named from the connection's host, port and database, without secrets
    assert inputs == [("postgres://pg.example:5433", "shop.public.orders")]
