"""How the batch tasks reach Spark, from Airflow connections and config: the ``spark-submit``
of the batch's Spark job, and sessions on a Spark Connect server — the clients the routes of
:mod:`airflow_trident.batch.routes` are given.

**spark-submit** (the process task, and a Spark commit without Connect): the job is
``airflow_trident/batch/spark_job.py``; its arguments carry no secret (:func:`job_arguments`),
its Spark conf defaults the driver's and workers' Python to this interpreter (:func:`job_conf`),
and its secrets (:func:`job_secrets`) are exported into the task's own environment, which
``spark-submit`` inherits, only while it runs (:func:`exported`). The Spark provider's hook turns
``env_vars`` into ``--conf spark.yarn.appMasterEnv.X=...`` / ``spark.kubernetes.driverEnv.X=...``
arguments on YARN and Kubernetes, i.e. onto the command line: secrets therefore never go through
``env_vars``. A failed job fails its task with the job's own error (:func:`spark_job_errors`):
the job writes it where the task reads it (:mod:`airflow_trident.batch.job_report`); without
this the task would only say ``Cannot execute: spark-submit ... Error code is: 1``.

**Spark Connect** (``process_mode="connect"``): the task is the driver's client
(:func:`connect_session`); :func:`connect_route` is the route
(:class:`~airflow_trident.batch.routes.OnSpark`) that emits the batch, runs the plan and stages
it, or commits with the staged partitions applied by Spark tasks on the server's executors — no
JVM starts per batch. The server's Python workers run the topology's
user code: they must import ``airflow_trident`` and the topology's modules (run the server with
the same Python environment), and the staging root and state database must be reachable by the
server and the worker alike. The connection's token travels inside the ``sc://`` URL handed to
pyspark, never to a log.

>>> from airflow_trident.coordination.client import ZkConfig
>>> job_arguments("pkg.mod:t", 7, "/stage", ZkConfig(hosts="zk:2181", username="u",
...               password="secret"), emit_wait_s=60.0, commit=True)
['--topology', 'pkg.mod:t', '--txid', '7', '--staging-root', '/stage', '--zk-hosts', 'zk:2181',
 '--zk-root', '/trident', '--emit-wait', '60.0', '--zk-user', 'u', '--commit']
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import airflow_trident.batch
from airflow_trident import connections
from airflow_trident.batch.job_report import clear_job_error, read_job_error
from airflow_trident.batch.routes import OnSpark
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.client import ZkConfig, security_env
from airflow_trident.hooks.config import spark_jars
from airflow_trident.state.sql.factory import STATE_URL_ENV

__all__ = [
    "SPARK_JOB",
    "ZK_PASSWORD_ENV",
    "JobSubmitter",
    "connect_route",
    "connect_session",
    "connect_share_key",
    "LOG4J2_CONF",
    "deploy_mode",
    "durable_submit",
    "exported",
    "job_arguments",
    "job_conf",
    "job_secrets",
    "spark_job_errors",
    "warn_if_remote_driver",
]

ZK_PASSWORD_ENV = "TRIDENT_ZK_PASSWORD"

SPARK_JOB = str(Path(airflow_trident.batch.__file__).parent / "spark_job.py")
"""The Spark application of a batch's process and Spark-commit steps
(``airflow_trident/batch/spark_job.py``, a thin ``__main__`` over
:mod:`airflow_trident.batch.on_spark`)."""

log = logging.getLogger(__name__)


# -- spark-submit ---------------------------------------------------------------------------------


def job_arguments(
    topology: str,
    txid: int,
    staging_root: str,
    zookeeper: ZkConfig,
    *,
    emit_wait_s: float,
    commit: bool = False,
    read_here_bytes: int | None = None,
    read_here_records: int | None = None,
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
    if read_here_bytes is not None:
        args += ["--read-here-bytes", str(read_here_bytes)]
    if read_here_records is not None:
        args += ["--read-here-records", str(read_here_records)]
    from airflow_trident.hooks.config import inline_user_code

    if not inline_user_code():  # [trident] inline
        args.append("--no-inline")
    return args


LOG4J2_CONF = str(Path(airflow_trident.batch.__file__).parent / "log4j2.properties")
"""The Spark job's log4j2 configuration in client deploy mode: WARN and above
(``airflow_trident/batch/log4j2.properties``)."""


def job_conf(conf: Mapping[str, Any] | None, *, mode: str | None = None) -> dict[str, Any]:
    """``conf`` with defaults for the batch's Spark job: the driver's and workers' Python is
    this interpreter, and Spark logs WARN and above (``spark.log.level``; in client deploy
    ``mode``, where the driver is ``spark-submit`` on this worker, also from the JVM's start:
    :data:`LOG4J2_CONF`), so the task's log leads with the batch's own lines. ``conf`` wins;
    ``spark.jars`` is ``conf``'s jars, then ``[trident] spark_jars``'s.

    >>> conf = job_conf({"spark.log.level": "INFO"}, mode="cluster")
    >>> conf["spark.log.level"], "spark.driver.extraJavaOptions" in conf
    ('INFO', False)
    >>> job_conf(None)["spark.driver.extraJavaOptions"]
    '-Dlog4j2.configurationFile=file:.../airflow_trident/batch/log4j2.properties'
    >>> import os
    >>> os.environ["AIRFLOW__TRIDENT__SPARK_JARS"] = "/jars/kafka.jar,/jars/pg.jar"
    >>> job_conf({"spark.jars": "/mine/udf.jar,/jars/pg.jar"})["spark.jars"]
    '/mine/udf.jar,/jars/pg.jar,/jars/kafka.jar'
    >>> del os.environ["AIRFLOW__TRIDENT__SPARK_JARS"]
    """
    python = sys.executable
    defaults: dict[str, Any] = {
        "spark.pyspark.python": python,
        "spark.pyspark.driver.python": python,
        "spark.log.level": "WARN",
    }
    if mode != "cluster":  # the file is on this machine, not on a cluster's driver
        defaults["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{LOG4J2_CONF}"
    merged = {**defaults, **(conf or {})}
    # [trident] spark_jars: the deployment's jars, after the DAG's own (docs/jvm.md)
    given = [j.strip() for j in str(merged.get("spark.jars") or "").split(",") if j.strip()]
    jars = list(dict.fromkeys([*given, *spark_jars()]))
    if jars:
        merged["spark.jars"] = ",".join(jars)
    return merged


def durable_submit(hook: Any, requested: bool | None) -> bool:
    """Whether the process step's ``spark-submit`` is *durable*: a retry of the task reconnects
    to the Spark job its earlier try submitted (the Spark provider's ``durable``, Airflow 3.3)
    instead of submitting a new one.

    Either way the batch stays exact: the Spark job itself starts the attempt (the next attempt
    id of the txid, in ZooKeeper) and stages under it with a manifest; the commit applies the
    manifest of the txid's current attempt only. A resumed job therefore finishes the attempt it
    started, which is still the current one (only a process step starts attempts); a new job
    starts a newer attempt and an older job's staging is never read.

    ``requested`` is the operator's ``durable`` if the DAG set it (then the provider's rules
    apply: YARN cluster mode needs ``yarn_track_via_rm_api=True``). Unset, it is durable where
    the provider can find the job again — Spark standalone cluster mode (the master's REST
    API), Kubernetes with ``track_driver_via_k8s_api``, YARN cluster mode with
    ``yarn_track_via_rm_api`` — and not on YARN cluster mode without the ResourceManager's API,
    where the provider would refuse to submit at all.
    """
    if requested is not None:
        return bool(requested)
    # the provider's 5.x line (the `spark` extra) has neither attribute, nor durable submits
    yarn_cluster = getattr(hook, "_is_yarn_cluster_mode", False)
    return not (yarn_cluster and not getattr(hook, "_yarn_track_via_rm_api", False))


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
    used = connections.declared()  # the sources' and sinks' conn_ids the topology declared
    if used:
        secrets[connections.CONNECTIONS_ENV] = json.dumps(connections.resolved(used))
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


def deploy_mode(spark_conn_id: str, override: str | None = None) -> str | None:
    """The deploy mode a ``spark-submit`` through ``spark_conn_id`` uses: ``override`` (the
    operator's ``deploy_mode``) if given, else the connection's ``deploy-mode`` extra — as the
    Spark provider's hook resolves it. ``None`` when the connection cannot be read (the submit
    itself then says why)."""
    if override:
        return override
    from airflow.sdk import BaseHook

    try:
        extra = BaseHook.get_connection(spark_conn_id).extra_dejson
    except Exception as exc:  # the provider reports a missing connection its own way
        log.debug("no Spark connection %s: %s", spark_conn_id, exc)
        return None
    mode = extra.get("deploy-mode")
    return None if mode is None else str(mode)


def warn_if_remote_driver(mode: str | None, secrets: Mapping[str, str]) -> None:
    """In cluster deploy mode (``mode``) the driver does not inherit the task's environment:
    say which secrets it must get from the cluster instead (never their values)."""
    if secrets and mode == "cluster":
        log.warning(
            "deploy_mode=cluster: the Spark driver runs remotely and does not see %s; provide "
            "them to the driver through the cluster's secrets (they are never put on the "
            "spark-submit command line)",
            ", ".join(sorted(secrets)),
        )


@contextmanager
def spark_job_errors(staging_root: str, reference: str, txid: int, step: str) -> Iterator[None]:
    """Around the ``spark-submit`` of the ``step`` job (``"process"`` or ``"commit"``) of
    ``txid``: clear an earlier report first; if the submit raises, raise the job's reported
    error instead (the submit's exception as its ``__cause__``), logged as the task's last ERROR
    line; else the submit's own."""
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


# -- Spark Connect --------------------------------------------------------------------------------


@contextmanager
def connect_session(spark_connect_conn_id: str, *, share: str | None = None) -> Iterator[Any]:
    """A session on the Spark Connect server of the Spark provider's ``spark_connect``
    connection, stopped after the block; ``share``: the key of a server-side session that
    outlives the block (:func:`connect_share_key`)."""
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    from airflow_trident.runtime.spark.session import remote_session

    url = SparkConnectHook(conn_id=spark_connect_conn_id).get_connection_url()
    with remote_session(url, share=share) as spark:
        yield spark


def connect_share_key(steps: BatchSteps) -> str | None:
    """The shared Connect session of ``steps``' topology (``None`` with ``[trident]
    connect_session_reuse = false``): keyed by the topology, this provider's version and the
    digest of the code this task imported (:func:`~airflow_trident.runtime.reference.
    user_code_digest`), so changed code gets a session whose Python workers import it anew."""
    from airflow_trident import __version__
    from airflow_trident.hooks.config import connect_session_reuse
    from airflow_trident.runtime.reference import user_code_digest

    if not connect_session_reuse():
        return None
    return f"{steps.topology.name}|{__version__}|{user_code_digest()}"


def connect_route(spark_connect_conn_id: str, reference: str) -> OnSpark:
    """The Spark Connect route (:class:`~airflow_trident.batch.routes.OnSpark`) of the topology
    ``reference`` through the server of ``spark_connect_conn_id``: sessions shared per topology
    and code (:func:`connect_share_key`), ``[trident] spark_read_here_bytes``,
    ``spark_read_here_records`` and ``inline`` read now."""
    from airflow_trident.hooks.config import (
        inline_user_code,
        spark_read_here_bytes,
        spark_read_here_records,
    )

    def session(steps: BatchSteps) -> AbstractContextManager[Any]:
        return connect_session(spark_connect_conn_id, share=connect_share_key(steps))

    return OnSpark(
        session=session,
        reference=reference,
        where=f"on Spark Connect (connection {spark_connect_conn_id})",
        read_here_bytes=spark_read_here_bytes(),
        read_here_records=spark_read_here_records(),
        inline=inline_user_code() or None,
    )


class JobSubmitter:
    """The ``spark-submit`` of the batch's Spark job through the Spark provider's
    ``SparkSubmitHook``: the ``submit`` of a :class:`~airflow_trident.batch.routes.BySubmit`
    route (a commit task's Spark commit without Connect). The job's arguments carry no secret;
    its secrets are exported only while it runs; a failed job raises its own error.

    :param hook: the task's ``TridentHook`` (ZooKeeper settings, state URL).
    :param reference: the topology's ``module:attribute``.
    :param staging_root: the staging root.
    :param spark_conn_id: the Spark connection.
    :param spark_conf: the job's Spark conf (:func:`job_conf` adds the batch's defaults).
    :param py_files: ``--py-files`` (the topology's package).
    """

    def __init__(
        self,
        hook: Any,
        reference: str,
        staging_root: str,
        *,
        spark_conn_id: str = "spark_default",
        spark_conf: Mapping[str, Any] | None = None,
        py_files: str | None = None,
    ) -> None:
        self.hook = hook
        self.reference = reference
        self.staging_root = staging_root
        self.spark_conn_id = spark_conn_id
        self.spark_conf = spark_conf
        self.py_files = py_files
        self._running: Any = None

    def __call__(self, step: str, txid: int, emit_wait_s: float) -> None:
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        from airflow_trident.hooks.config import spark_read_here_bytes, spark_read_here_records

        config = self.hook.zookeeper_config()
        secrets = job_secrets(config, self.hook.state_url())
        name = self.reference.rpartition(":")[2]
        self._running = SparkSubmitHook(
            conf=job_conf(self.spark_conf),
            conn_id=self.spark_conn_id,
            py_files=self.py_files,
            name=f"trident-{name}-{step}",
            application_args=job_arguments(
                self.reference,
                txid,
                self.staging_root,
                config,
                emit_wait_s=emit_wait_s,
                commit=step == "commit",
                read_here_bytes=spark_read_here_bytes(),
                read_here_records=spark_read_here_records(),
            ),
        )
        warn_if_remote_driver(deploy_mode(self.spark_conn_id), secrets)
        with exported(secrets), spark_job_errors(self.staging_root, self.reference, txid, step):
            self._running.submit(SPARK_JOB)

    def on_kill(self) -> None:
        """Stop a running job (a commit's applied partitions keep their txid)."""
        if self._running is not None:
            self._running.on_kill()
