"""Names that moved keep working, with a DeprecationWarning where the old path goes away."""

from __future__ import annotations

import importlib

import pytest


def test_local_runner_old_path_warns_and_is_the_same_class() -> None:
    from airflow_trident.batch.runner import BatchReport, LocalRunner

    old = importlib.import_module("airflow_trident.runtime.runner")
    with pytest.warns(DeprecationWarning, match=r"airflow_trident\.batch\.runner\.LocalRunner"):
        assert old.LocalRunner is LocalRunner
    with pytest.warns(DeprecationWarning, match="BatchReport moved"):
        assert old.BatchReport is BatchReport
    with pytest.raises(AttributeError, match="NoSuchName"):
        _ = old.NoSuchName


def test_transaction_attempt_old_path_is_the_same_class() -> None:
    from airflow_trident.attempt import TransactionAttempt
    from airflow_trident.coordination.attempt import TransactionAttempt as Old

    assert Old is TransactionAttempt
