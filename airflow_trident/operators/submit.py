"""Where the ``spark-submit`` helpers lived before they moved below the operators: see
:mod:`airflow_trident.hooks.spark` (the commit's routes use them too)."""

from __future__ import annotations

from airflow_trident.hooks.spark import (
    SPARK_JOB,
    ZK_PASSWORD_ENV,
    exported,
    job_arguments,
    job_conf,
    job_secrets,
)

__all__ = ["SPARK_JOB", "ZK_PASSWORD_ENV", "exported", "job_arguments", "job_conf", "job_secrets"]
