"""Misuse of trident_dag / trident_batch arguments is a ConfigurationError when the DAG is built
(issue 20, finding 9): before, each of these built a DAG and failed later, or never."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk import DAG

from airflow_trident.dag import trident_batch, trident_dag
from airflow_trident.errors import ConfigurationError

TOPOLOGY = "airflow_trident.examples.topologies:word_count"


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"max_active_batches": "3"}, r"max_active_batches must be an int >= 1 .*got '3' \(str\)"),
        ({"max_active_batches": True}, r"max_active_batches must be an int >= 1 .*got True"),
        ({"deferrable": "yes"}, r"deferrable must be True, False or None .*got 'yes' \(str\)"),
        ({"ready_deferrable": 1}, r"ready_deferrable must be True, False or None"),
        ({"keep_txids": 0}, r"keep_txids must be an int >= 1 .*got 0"),
        ({"spark_conf": ["spark.executor.memory=2g"]}, r"spark_conf must be a dict .*\(list\)"),
        ({"spark_conf": {"spark.jars": ["a.jar"]}}, r"spark_conf\['spark.jars'\] must be a str"),
        ({"spark_commit_min_rows": -1}, r"spark_commit_min_rows must be an int >= 0"),
        ({"retries": "2"}, r"retries must be an int >= 0"),
        ({"spark_conn_id": ""}, r"spark_conn_id must be a non-empty string"),
        ({"staging_root": 5}, r"staging_root must be a string or None"),
    ],
)
def test_trident_dag_refuses_mistyped_arguments(arguments: dict[str, Any], match: str) -> None:
    # Given a DAG file passing a mistyped argument
    # When the DAG is built (parsed), Then a ConfigurationError names it and what arrived
    with pytest.raises(ConfigurationError, match=f"^trident_dag: {match}"):
        trident_dag(TOPOLOGY, dag_id="wc_misuse", **arguments)


def test_trident_batch_refuses_mistyped_arguments() -> None:
    # Given a batch inside a user's own DAG, When keep_txids is a string
    with (
        DAG("misuse_batch", schedule=None),
        pytest.raises(ConfigurationError, match=r"^trident_batch: keep_txids must be an int"),
    ):
        trident_batch(TOPOLOGY, group_id="b", keep_txids="16")


def test_well_typed_arguments_build_the_dag() -> None:
    # Given every checked argument well typed, Then the DAG builds with them
    dag = trident_dag(
        TOPOLOGY, dag_id="wc_typed", max_active_batches=2, retries=0, deferrable=None,
        ready_deferrable=False, keep_txids=1, spark_conf={"spark.sql.shuffle.partitions": 4},
        spark_commit_min_rows=0, staging_root=None, py_files=None,
    )  # fmt: skip
    assert dag.max_active_runs == 2
    assert dag.get_task("batch.commit").keep_txids == 1
