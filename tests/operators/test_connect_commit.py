"""Which way a Spark commit goes: through the DAG's Spark Connect server in Connect mode, by
``spark-submit`` otherwise (the run itself: ``tests/e2e/test_dag_runs.py``)."""

from __future__ import annotations

from typing import Any

from airflow_trident.dag import trident_dag

TOPOLOGY = "airflow_trident.examples.topologies:word_count"


def test_connect_mode_gives_the_commit_task_the_connect_connection() -> None:
    # Given a DAG processing on a Spark Connect server, committing on Spark
    dag = trident_dag(
        TOPOLOGY,
        dag_id="wc_connect_commit",
        params={"env": "prod"},
        process_mode="connect",
        commit_mode="spark",
        spark_connect_conn_id="connect_{{ params.env }}",
    )
    commit = dag.get_task("batch.commit")
    # When the commit task renders its templates
    context: dict[str, Any] = {"params": {"env": "prod"}}
    commit.render_template_fields(context)
    # Then its Spark commit goes through the same (rendered) Connect connection
    assert commit.spark_connect_conn_id == "connect_prod"
    assert commit.commit_mode == "spark"


def test_submit_mode_keeps_the_spark_submit_commit() -> None:
    # Given a DAG processing by spark-submit, committing on Spark (or choosing: "auto")
    for mode in ("spark", "auto"):
        dag = trident_dag(TOPOLOGY, dag_id=f"wc_submit_commit_{mode}", commit_mode=mode)
        commit = dag.get_task("batch.commit")
        # Then the commit task has no Connect connection: its Spark commit is a spark-submit
        assert commit.spark_connect_conn_id is None
        assert commit.spark_conn_id == "spark_default"
