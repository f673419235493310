"""A Spark job's own error, reported to its task: written by the job, read back by the task."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from airflow_trident.batch.job_report import read_job_error, reporting_errors
from airflow_trident.errors import BatchFailedError, StateStoreUnavailableError
from airflow_trident.hooks.spark import spark_job_errors

REFERENCE = "pkg.flows:word_count"


def _job(error: BaseException) -> object:
    def main(argv: Sequence[str] | None) -> int:
        raise error

    return main


def _argv(root: Path, *extra: str) -> list[str]:
    return ["--topology", REFERENCE, "--txid", "7", "--staging-root", str(root), *extra]


def test_a_failing_job_reports_its_error_under_its_step_and_raises_it(tmp_path: Path) -> None:
    # Given a Spark commit job whose state database is unreachable
    error = StateStoreUnavailableError("state 'counts' unreachable at txid 7; hint: ...")
    # When the job runs under the reporter
    with pytest.raises(StateStoreUnavailableError):
        reporting_errors(_job(error), _argv(tmp_path, "--commit"))  # type: ignore[arg-type]
    # Then its error is reported for the commit step of txid 7, as the same error class
    reported = read_job_error(str(tmp_path), REFERENCE, 7, "commit")
    assert isinstance(reported, StateStoreUnavailableError)
    assert str(reported) == "state 'counts' unreachable at txid 7; hint: ..."
    assert read_job_error(str(tmp_path), REFERENCE, 7, "process") is None


def test_the_task_raises_the_reported_error_instead_of_the_submit_failure(tmp_path: Path) -> None:
    # Given a process job that fails on a record and reports it, inside the task's submit
    wanted = r"KeyError: 'word' \(the Spark job of the process step of txid 7 failed\)"
    # When the submit fails
    with (
        pytest.raises(BatchFailedError, match=wanted) as raised,
        spark_job_errors(str(tmp_path), REFERENCE, 7, "process"),
    ):
        reporting_errors(_job(KeyError("word")), _argv(tmp_path))  # type: ignore[arg-type]
    # Then the task raises the job's error, the submit's failure as its cause
    assert isinstance(raised.value.__cause__, KeyError)
    # and a report of an earlier attempt is cleared before the next submit: a failure without
    # a report is the submit's own
    with (
        pytest.raises(RuntimeError, match="spark-submit exited 1"),
        spark_job_errors(str(tmp_path), REFERENCE, 7, "process"),
    ):
        raise RuntimeError("spark-submit exited 1")
