"""The batch operators' conventions: the commit's deferrable default comes from Airflow's
``[operators] default_deferrable``, connection ids are templated."""

from __future__ import annotations

import pytest

from airflow_trident.operators.batch import CommitBatchOperator

COMMON = {"task_id": "commit", "topology": "m:t", "staging_root": "/x"}


@pytest.mark.parametrize(("configured", "expected"), [("True", True), ("False", False)])
def test_commit_deferrable_defaults_to_the_configuration(
    monkeypatch: pytest.MonkeyPatch, configured: str, expected: bool
) -> None:
    # Given AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE set either way
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", configured)
    # When a commit is built without deferrable, and one with it
    default = CommitBatchOperator(**COMMON)
    explicit = CommitBatchOperator(deferrable=not expected, **COMMON)
    # Then the first follows the configuration, the second its argument
    assert default.deferrable is expected
    assert explicit.deferrable is (not expected)


def test_commit_deferrable_is_off_without_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", raising=False)
    assert CommitBatchOperator(**COMMON).deferrable is False


def test_commit_templates_its_connection_ids() -> None:
    # Given a commit whose connection ids are templates
    commit = CommitBatchOperator(
        zookeeper_conn_id="zk_{{ params.env }}",
        state_conn_id="db_{{ params.env }}",
        spark_conn_id="spark_{{ params.env }}",
        **COMMON,
    )
    # When rendered
    commit.render_template_fields({"params": {"env": "qa"}})
    # Then each id is the rendered one
    assert (commit.zookeeper_conn_id, commit.state_conn_id, commit.spark_conn_id) == (
        "zk_qa",
        "db_qa",
        "spark_qa",
    )
