"""OpenLineage of the process and commit tasks: inputs are the spouts, outputs the state tables.

The suite's environment has no ``apache-airflow-providers-openlineage``: there the method returns
``None``. With it (``PYTHONPATH`` holding the provider and the OpenLineage client), the test of the
``OperatorLineage`` runs: ``pip install --target /tmp/ol apache-airflow-providers-openlineage
openlineage-python openlineage-integration-common openlineage-sql httpx2 --no-deps``, then
``PYTHONPATH=/tmp/ol .venv/bin/pytest tests/operators/test_lineage.py``.
"""

from __future__ import annotations

import importlib.util

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
    # Then the spout is the input and the state's table the output, with no password
    assert inputs == [(f"trident://{topology.name}", "sentences")]
    assert outputs == [("postgresql://db:5433/st", topology.name)]


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
