"""The process and Spark-commit tasks fail with their Spark job's own error.

Without this, a failed job surfaces as the Spark provider's ``Cannot execute: spark-submit ...
Error code is: 1``, and the job's error (step, txid, record, hint) is an INFO line among Spark's
output. The job writes its error where the task can read it
(:mod:`airflow_trident.batch.job_report`); the task logs it as its last ERROR line and raises
it, with the provider's exception as the cause.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from airflow_trident.batch.job_report import clear_job_error, read_job_error

__all__ = ["spark_job_errors"]

log = logging.getLogger(__name__)


@contextmanager
def spark_job_errors(staging_root: str, reference: str, txid: int, step: str) -> Iterator[None]:
    """Around the ``spark-submit`` of the ``step`` job (``"process"`` or ``"commit"``) of
    ``txid``: clear an earlier report first; if the submit raises, raise the job's reported
    error instead (the submit's exception as its ``__cause__``), else the submit's own."""
    clear_job_error(staging_root, reference, txid, step)
    try:
        yield
    except Exception as exc:
        reported = read_job_error(staging_root, reference, txid, step)
        if reported is None:
            raise
        message = f"{reported} (the Spark job of the {step} step of txid {txid} failed)"
        log.error("%s", message)
        raise type(reported)(message) from exc
