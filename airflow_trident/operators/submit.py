"""What the process and Spark-commit tasks hand to ``spark-submit``: the job's arguments (no
secret among them), its Spark conf, and its secrets — exported into the task's own environment,
which ``spark-submit`` inherits, only while it runs.

The Spark provider's hook turns ``env_vars`` into ``--conf spark.yarn.appMasterEnv.X=...`` /
``spark.kubernetes.driverEnv.X=...`` arguments on YARN and Kubernetes, i.e. onto the command
line: secrets therefore never go through ``env_vars``.

>>> from airflow_trident.coordination.client import ZkConfig
>>> job_arguments("pkg.mod:t", 7, "/stage", ZkConfig(hosts="zk:2181", username="u",
...               password="secret"), emit_wait_s=60.0, commit=True)
['--topology', 'pkg.mod:t', '--txid', '7', '--staging-root', '/stage', '--zk-hosts', 'zk:2181',
 '--zk-root', '/trident', '--emit-wait', '60.0', '--zk-user', 'u', '--commit']
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import airflow_trident.batch
from airflow_trident.coordination.client import ZkConfig, security_env
from airflow_trident.state.sql.factory import STATE_URL_ENV

__all__ = [
    "SPARK_JOB",
    "ZK_PASSWORD_ENV",
    "exported",
    "job_arguments",
    "job_conf",
    "job_secrets",
    "warn_if_remote_driver",
]

ZK_PASSWORD_ENV = "TRIDENT_ZK_PASSWORD"

SPARK_JOB = str(Path(airflow_trident.batch.__file__).parent / "spark_job.py")
"""The Spark application of a batch's process and Spark-commit steps
(``airflow_trident/batch/spark_job.py``)."""

log = logging.getLogger(__name__)


def job_arguments(
    topology: str,
    txid: int,
    staging_root: str,
    zookeeper: ZkConfig,
    *,
    emit_wait_s: float,
    commit: bool = False,
) -> list[str]:
    """The Spark job's command-line arguments (``batch/spark_job.py``): never a secret."""
    args = [
        "--topology", topology,
        "--txid", str(txid),
        "--staging-root", staging_root,
        "--zk-hosts", zookeeper.hosts,
        "--zk-root", zookeeper.root,
        "--emit-wait", str(emit_wait_s),
    ]  # fmt: skip
    if zookeeper.chroot:
        args += ["--zk-chroot", zookeeper.chroot]
    if zookeeper.username:
        args += ["--zk-user", zookeeper.username]
    if commit:
        args.append("--commit")
    return args


def job_conf(conf: Mapping[str, Any] | None) -> dict[str, Any]:
    """``conf`` with the driver's and workers' Python defaulting to this interpreter."""
    python = sys.executable
    return {"spark.pyspark.python": python, "spark.pyspark.driver.python": python, **(conf or {})}


def job_secrets(zookeeper: ZkConfig, url: str | None) -> dict[str, str]:
    """The secrets the job reads from its environment: the ZooKeeper digest password, its TLS
    and SASL settings (:func:`~airflow_trident.coordination.client.security_env`) and the
    state database URL (:meth:`TridentHook.state_url
    <airflow_trident.hooks.trident.TridentHook.state_url>`)."""
    secrets = security_env(zookeeper)
    if zookeeper.password:
        secrets[ZK_PASSWORD_ENV] = zookeeper.password
    if url is not None:
        secrets[STATE_URL_ENV] = url
    return secrets


@contextmanager
def exported(secrets: Mapping[str, str]) -> Iterator[None]:
    """Set ``secrets`` in this process's environment (inherited by ``spark-submit``) for the
    duration of the block, then restore it."""
    previous = {key: os.environ.get(key) for key in secrets}
    os.environ.update(secrets)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def warn_if_remote_driver(connection: Mapping[str, Any], secrets: Mapping[str, str]) -> None:
    """In cluster deploy mode the driver does not inherit the task's environment: say which
    secrets it must get from the cluster instead (never their values)."""
    if secrets and connection.get("deploy_mode") == "cluster":
        log.warning(
            "deploy_mode=cluster: the Spark driver runs remotely and does not see %s; provide "
            "them to the driver through the cluster's secrets (they are never put on the "
            "spark-submit command line)",
            ", ".join(sorted(secrets)),
        )
