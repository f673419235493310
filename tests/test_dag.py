"""The DAG factory: deferrable defaults from Airflow's configuration, templated connection ids,
and every DAG argument it does not own passed on to the DAG."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from airflow_trident.dag import trident_dag
from airflow_trident.errors import ConfigurationError

TOPOLOGY = "airflow_trident.examples.topologies:word_count"
DEFAULT_DEFERRABLE = "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"


@pytest.mark.parametrize("configured", [True, False])
def test_commit_and_sensor_follow_default_deferrable(
    monkeypatch: pytest.MonkeyPatch, configured: bool
) -> None:
    # Given [operators] default_deferrable set through the environment
    monkeypatch.setenv(DEFAULT_DEFERRABLE, str(configured))
    # When the factory builds a DAG without saying whether its waits defer
    dag = trident_dag(TOPOLOGY, dag_id="wc_defer")
    # Then the commit and the readiness sensor both take the configured value
    assert dag.get_task("batch.commit").deferrable is configured
    assert dag.get_task("batch.wait_ready").deferrable is configured


def test_explicit_deferrable_arguments_beat_the_configuration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given default_deferrable on
    monkeypatch.setenv(DEFAULT_DEFERRABLE, "True")
    # When the DAG asks for a polling commit and a deferrable sensor... and the reverse
    dag = trident_dag(TOPOLOGY, dag_id="wc_a", deferrable=False, ready_deferrable=True)
    monkeypatch.setenv(DEFAULT_DEFERRABLE, "False")
    other = trident_dag(TOPOLOGY, dag_id="wc_b", deferrable=True, ready_deferrable=False)
    # Then each task does what its argument says
    assert dag.get_task("batch.commit").deferrable is False
    assert dag.get_task("batch.wait_ready").deferrable is True
    assert other.get_task("batch.commit").deferrable is True
    assert other.get_task("batch.wait_ready").deferrable is False


def test_connection_ids_are_rendered_from_templates() -> None:
    # Given connection ids that name the environment through a DAG param
    dag = trident_dag(
        TOPOLOGY,
        dag_id="wc_templated",
        params={"env": "prod"},
        zookeeper_conn_id="zk_{{ params.env }}",
        state_conn_id="state_{{ params.env }}",
        spark_connect_conn_id="connect_{{ params.env }}",
        process_mode="connect",
    )
    context: dict[str, Any] = {"params": {"env": "prod"}}
    # When each task renders its templates
    rendered = {}
    for task in dag.tasks:
        task.render_template_fields(context)
        rendered[task.task_id] = task
    # Then every connection id is the rendered one
    for task_id in ("batch.wait_ready", "batch.begin", "batch.process", "batch.commit"):
        assert rendered[task_id].zookeeper_conn_id == "zk_prod", task_id
    for task_id in ("batch.begin", "batch.process", "batch.commit", "batch.success"):
        assert rendered[task_id].state_conn_id == "state_prod", task_id
    assert rendered["batch.process"].spark_connect_conn_id == "connect_prod"


def test_dag_arguments_it_does_not_own_reach_the_dag() -> None:
    # Given callbacks, params, default_args, catchup, tags and doc_md
    def on_failure(context: Any) -> None: ...

    def on_success(context: Any) -> None: ...

    dag = trident_dag(
        TOPOLOGY,
        dag_id="wc_args",
        catchup=True,
        tags=["etl", "words"],
        doc_md="Counts words of **the feed**.",
        params={"region": "eu"},
        default_args={"owner": "data-team", "retries": 5, "execution_timeout": timedelta(hours=2)},
        on_failure_callback=on_failure,
        on_success_callback=on_success,
        dagrun_timeout=timedelta(hours=1),
        description="word counts",
        max_active_batches=2,
    )
    # Then the DAG carries them, and the tasks the default_args
    assert dag.catchup is True
    assert dag.tags == {"etl", "words"}
    assert dag.doc_md is not None
    assert dag.doc_md.startswith("Counts words of **the feed**.")
    assert "one run = one batch" in dag.doc_md
    assert dag.params["region"] == "eu"
    assert dag.on_failure_callback == on_failure
    assert dag.on_success_callback == on_success
    assert dag.dagrun_timeout == timedelta(hours=1)
    assert dag.description == "word counts"
    assert dag.max_active_runs == 2
    commit = dag.get_task("batch.commit")
    assert commit.owner == "data-team"
    assert commit.retries == 5  # default_args override the factory's default of 2
    assert commit.execution_timeout == timedelta(hours=2)
    assert commit.retry_delay == timedelta(seconds=30)


def test_explicit_retries_beat_default_args() -> None:
    dag = trident_dag(TOPOLOGY, dag_id="wc_r", retries=0, default_args={"retries": 7})
    assert dag.get_task("batch.begin").retries == 0


@pytest.mark.parametrize(
    ("argument", "match"),
    [
        ({"max_active_runs": 3}, "sets max_active_runs itself: use max_active_batches"),
        ({"task_group": None}, "sets task_group itself"),
        ({"on_failure_calback": print}, "unknown argument 'on_failure_calback'"),
    ],
)
def test_arguments_the_factory_owns_or_nobody_takes_are_refused(
    argument: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigurationError, match=match):
        trident_dag(TOPOLOGY, dag_id="wc_bad", **argument)
