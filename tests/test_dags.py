"""The example DAGs import cleanly and have the batch shape."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

DAGS = Path(__file__).resolve().parents[1] / "dags"


def test_dagbag_has_no_import_errors() -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == [
        "trident_file_word_count",
        "trident_global_count",
        "trident_kafka_word_count",
        "trident_opaque_count",
        "trident_user_scores",
        "trident_word_count",
        "trident_word_count_report",
    ]
    dag = bag.dags.get("trident_word_count")
    assert dag is not None
    assert [t.task_id for t in dag.topological_sort()] == [
        "batch.wait_ready",
        "batch.begin",
        "batch.process",
        "batch.commit",
        "batch.success",
    ]
    commit = dag.get_task("batch.commit")
    assert commit.depends_on_past
    assert dag.get_task("batch.begin").depends_on_past
    assert dag.max_active_runs == 3


def test_unknown_commit_mode_is_refused() -> None:
    from airflow_trident.dag import trident_dag
    from airflow_trident.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="commit_mode 'driver' is not one of"):
        trident_dag("airflow_trident.examples.topologies:word_count", commit_mode="driver")


def test_spark_commit_mode_reaches_the_commit_task() -> None:
    from airflow_trident.dag import trident_dag

    dag = trident_dag(
        "airflow_trident.examples.topologies:word_count",
        commit_mode="auto",
        spark_commit_min_rows=10,
        spark_conf={"spark.executor.memory": "2g"},
    )
    commit = dag.get_task("batch.commit")
    assert (commit.commit_mode, commit.spark_commit_min_rows) == ("auto", 10)
    assert commit.spark_conf == {"spark.executor.memory": "2g"}


def test_connect_process_mode_makes_a_connect_process_task() -> None:
    from airflow_trident.dag import trident_dag
    from airflow_trident.errors import ConfigurationError
    from airflow_trident.operators.connect import ConnectProcessBatchOperator

    dag = trident_dag(
        "airflow_trident.examples.topologies:word_count",
        process_mode="connect",
        spark_connect_conn_id="my_connect",
    )
    process = dag.get_task("batch.process")
    assert isinstance(process, ConnectProcessBatchOperator)
    assert process.spark_connect_conn_id == "my_connect"
    with pytest.raises(ConfigurationError, match="process_mode 'local' is not one of"):
        trident_dag("airflow_trident.examples.topologies:word_count", process_mode="local")


def test_the_commit_task_feeds_the_asset_the_report_dag_is_scheduled_on() -> None:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk import AssetAlias

    from airflow_trident.operators.assets import commits_alias, committed_asset

    # Given the example DAGs
    bag = DagBag(dag_folder=str(DAGS))
    commit = bag.dags["trident_word_count"].get_task("batch.commit")
    report = bag.dags["trident_word_count_report"]
    # Then the commit task declares its topology's alias, through which it adds the events of
    # the asset the report DAG is scheduled on
    assert [o for o in commit.outlets if isinstance(o, AssetAlias)] == [commits_alias("word_count")]
    assert report.timetable.asset_condition.objects == (committed_asset("word_count"),)


@pytest.mark.parametrize("layout", ["standard", "compact", "express"])
def test_parsing_the_dag_registers_the_committed_asset_before_any_commit(layout: str) -> None:
    # Airflow creates an asset first seen through an alias event when the task's success is
    # recorded; two pipelined commits reporting their first events at once both insert it and
    # one task is failed (UniqueViolation on idx_asset_name_uri_unique, seen with 4 express
    # runs). The DAG processor must register the asset when it parses the DAG.
    from airflow.dag_processing.collection import _find_all_assets
    from airflow.serialization.serialized_objects import LazyDeserializedDAG

    from airflow_trident.dag import trident_dag
    from airflow_trident.operators.assets import committed_asset

    # Given a Trident DAG of each layout
    dag = trident_dag(
        "airflow_trident.examples.topologies:word_count",
        dag_id=f"assets_{layout}",
        layout=layout,
        process_mode="connect",
        spark_connect_conn_id="spark_connect_default",
    )
    # When the DAG processor collects the assets it registers
    found = {(a.name, a.uri) for a in _find_all_assets([LazyDeserializedDAG.from_dag(dag)])}
    # Then the topology's committed asset is among them
    asset = committed_asset("word_count")
    assert (asset.name, asset.uri) in found


def test_the_kafka_dag_runs_each_batch_in_one_task_reading_its_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.dag_processing.dagbag import DagBag

    from airflow_trident.spout.kafka import KafkaSpout

    # Given the Kafka example DAG, parsed with a topic named in the environment
    monkeypatch.setenv("TRIDENT_KAFKA_TOPIC", "demo_sentences")
    monkeypatch.delitem(sys.modules, "airflow_trident.examples.kafka", raising=False)
    bag = DagBag(dag_folder=str(DAGS / "trident_kafka_word_count.py"))
    assert bag.import_errors == {}
    dag = bag.dags["trident_kafka_word_count"]
    # Then each batch is one task (the express layout on Spark Connect)
    assert [t.task_id for t in dag.topological_sort()] == ["batch.run"]
    assert dag.max_active_runs == 3
    # And its topology reads that topic through the Airflow kafka connection trident_kafka
    from airflow_trident.examples.kafka import kafka_word_count

    (spout,) = [n.spout for n in kafka_word_count.nodes.values() if n.kind == "spout"]
    assert isinstance(spout, KafkaSpout)
    assert (spout.topics, spout.kafka_config_id) == (("demo_sentences",), "trident_kafka")
    assert spout.output_fields[:2] == ("key", "sentence")
