"""Names that moved keep working, with a DeprecationWarning where the old path goes away."""

from __future__ import annotations

import importlib

import pytest


def test_express_operator_old_path_warns_and_is_the_same_class() -> None:
    from airflow_trident.operators.express import ExpressBatchOperator

    old = importlib.import_module("airflow_trident.sensors.express")
    with pytest.warns(DeprecationWarning, match=r"operators\.express\.ExpressBatchOperator"):
        assert old.ExpressBatchOperator is ExpressBatchOperator
    with pytest.raises(AttributeError, match="NoSuchName"):
        _ = old.NoSuchName


def test_transaction_attempt_old_path_is_the_same_class() -> None:
    from airflow_trident.attempt import TransactionAttempt
    from airflow_trident.coordination.attempt import TransactionAttempt as Old

    assert Old is TransactionAttempt


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [("airflow_trident.operators.notes", "airflow_trident.tasks.notes", "run_note"),
     ("airflow_trident.operators.notes", "airflow_trident.tasks.notes", "TridentNotesPlugin"),
     ("airflow_trident.operators.steps", "airflow_trident.tasks.base", "TridentTask")],
)  # fmt: skip
def test_task_side_names_moved_to_tasks_warn_and_are_the_same(
    old: str, new: str, name: str
) -> None:
    moved = getattr(importlib.import_module(new), name)
    with pytest.warns(DeprecationWarning, match=rf"{old}\.{name} moved to {new}\.{name}"):
        assert getattr(importlib.import_module(old), name) is moved
    with pytest.raises(AttributeError, match="NoSuchName"):
        _ = importlib.import_module(old).NoSuchName


@pytest.mark.parametrize(
    ("old", "name", "new"),
    [("airflow_trident.tasks.base", "TridentTask", "airflow_trident.tasks.batch_task.BatchTask"),
     ("airflow_trident.operators.commit_turn", "CommitInTurn",
      "airflow_trident.tasks.batch_task.BatchTask"),
     ("airflow_trident.operators.lineage", "TridentLineageMixin",
      "airflow_trident.operators.lineage.task_lineage"),
     ("airflow_trident.tasks.begin", "BeginWhenReady",
      "airflow_trident.sensors.begin.BeginWhenReadySensor"),
     ("airflow_trident.tasks.readiness", "ReadinessWait",
      "airflow_trident.tasks.readiness.BatchStepsSensor")],
)  # fmt: skip
def test_batch_task_mixins_are_no_bases_and_their_old_names_warn(
    old: str, name: str, new: str
) -> None:
    # Given a mixin the batch tasks no longer inherit (issue 54: they hold a task object)
    module, _, attribute = new.rpartition(".")
    moved = getattr(importlib.import_module(module), attribute)
    # When its old name is imported, Then it warns, naming the new place, and is that object
    with pytest.warns(DeprecationWarning, match=rf"{old}\.{name} moved to {new}, goes away in"):
        assert getattr(importlib.import_module(old), name) is moved
    with pytest.raises(AttributeError, match="NoSuchName"):
        _ = importlib.import_module(old).NoSuchName
