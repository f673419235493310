"""The provider's [trident] section, read when a task runs (issue 20, finding 3): before, the
staging root was baked into the DAG when its file was parsed, and a worker with nothing
configured staged and counted into files of its own machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_trident.dag import trident_dag
from airflow_trident.errors import ConfigurationError
from airflow_trident.hooks import config
from airflow_trident.hooks.trident import TridentHook

TOPOLOGY = "airflow_trident.examples.topologies:word_count"
UNSET = ("AIRFLOW__TRIDENT__STAGING_ROOT", "AIRFLOW__TRIDENT__STATE_CONN_ID",
         "AIRFLOW__TRIDENT__HOME", "AIRFLOW__TRIDENT__EMBEDDED", "TRIDENT_STAGING_ROOT",
         "TRIDENT_STATE_URL", "TRIDENT_HOME")  # fmt: skip


@pytest.fixture(autouse=True)
def _nothing_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in UNSET:
        monkeypatch.delenv(name, raising=False)


def test_the_staging_root_is_read_when_the_task_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a DAG parsed on a machine whose environment names a staging root
    monkeypatch.setenv("TRIDENT_STAGING_ROOT", "/parsing/machine/staging")
    dag = trident_dag(TOPOLOGY, dag_id="wc_config")
    commit = dag.get_task("batch.commit")
    # Then the DAG does not carry it
    assert commit.staging_root is None
    # When the task runs where [trident] staging_root is set
    monkeypatch.setenv("AIRFLOW__TRIDENT__STAGING_ROOT", "/mnt/shared/staging")
    commit.render_template_fields({})
    # Then the task stages there
    assert commit.staging_root == "/mnt/shared/staging"


def test_a_dags_own_staging_root_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__TRIDENT__STAGING_ROOT", "/mnt/shared/staging")
    task = trident_dag(TOPOLOGY, dag_id="wc_own", staging_root="/dag/root").get_task("batch.begin")
    task.render_template_fields({})
    assert task.staging_root == "/dag/root"


def test_a_distributed_deployment_with_nothing_configured_fails_clearly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given workers on several machines (Celery) and no staging root or state database
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    task = trident_dag(TOPOLOGY, dag_id="wc_celery").get_task("batch.process")
    # When a task runs, Then it names the setting instead of using a file of its own machine
    with pytest.raises(ConfigurationError, match=r"no staging root .*CeleryExecutor.*"
                       r"\[trident\] staging_root \(AIRFLOW__TRIDENT__STAGING_ROOT"):  # fmt: skip
        task.render_template_fields({})
    with pytest.raises(ConfigurationError, match=r"no state database .*\[trident\] state_conn_id"):
        TridentHook(state_conn_id=None).state_url()


def test_the_single_machine_default_is_chosen_by_the_executor_or_embedded(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Given a home for the single-machine default
    monkeypatch.setenv("AIRFLOW__TRIDENT__HOME", str(tmp_path))
    # When every task runs on this machine (LocalExecutor), Then it is used
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")
    assert config.staging_root(None) == str(tmp_path / "staging")
    assert TridentHook().state_url() == f"sqlite:///{tmp_path / 'state.db'}"
    # And with Celery only when [trident] embedded = true says so
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    monkeypatch.setenv("AIRFLOW__TRIDENT__EMBEDDED", "true")
    assert config.staging_root(None) == str(tmp_path / "staging")
    # And LocalExecutor refuses it with embedded = false
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")
    monkeypatch.setenv("AIRFLOW__TRIDENT__EMBEDDED", "false")
    with pytest.raises(ConfigurationError, match="no staging root"):
        config.staging_root(None)
    monkeypatch.setenv("AIRFLOW__TRIDENT__EMBEDDED", "sometimes")
    with pytest.raises(ConfigurationError, match="embedded is 'sometimes'"):
        config.staging_root(None)


def test_the_state_connection_comes_from_the_config_then_the_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Given [trident] state_conn_id naming a connection, and TRIDENT_STATE_URL too
    monkeypatch.setenv("AIRFLOW_CONN_CFG_STATE", f"sqlite:///{tmp_path}/cfg.db")
    monkeypatch.setenv("AIRFLOW__TRIDENT__STATE_CONN_ID", "cfg_state")
    monkeypatch.setenv("TRIDENT_STATE_URL", f"sqlite:///{tmp_path}/env.db")
    # Then a DAG without state_conn_id uses the configured connection, the env var only without
    assert TridentHook().state_url() == f"sqlite:///{tmp_path}/cfg.db"
    monkeypatch.delenv("AIRFLOW__TRIDENT__STATE_CONN_ID")
    assert TridentHook().state_url() == f"sqlite:///{tmp_path}/env.db"


def test_the_driver_read_limit_follows_the_trident_section_to_the_spark_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_trident.batch.spark_job import _args
    from airflow_trident.coordination.client import ZkConfig
    from airflow_trident.hooks.spark import job_arguments

    # Given nothing configured: 1 MiB
    monkeypatch.delenv("AIRFLOW__TRIDENT__SPARK_READ_HERE_BYTES", raising=False)
    assert config.spark_read_here_bytes() == 1 << 20
    # When [trident] spark_read_here_bytes is 0 (always Spark's tasks)
    monkeypatch.setenv("AIRFLOW__TRIDENT__SPARK_READ_HERE_BYTES", "0")
    here = config.spark_read_here_bytes()
    # Then the spark-submit job is told so, and reads it
    argv = job_arguments("m:t", 3, "/s", ZkConfig(hosts="zk:2181"), emit_wait_s=1.0,
                         read_here_bytes=here)  # fmt: skip
    assert argv[-2:] == ["--read-here-bytes", "0"]
    assert _args(argv).read_here_bytes == 0
    assert _args(argv[:-2]).read_here_bytes is None  # the processor's default
    # and so is the Spark commit's job (it processes a stale staged batch again)
    committing = _args(job_arguments("m:t", 3, "/s", ZkConfig(hosts="zk:2181"), emit_wait_s=0.0,
                                     commit=True, read_here_bytes=here))  # fmt: skip
    assert (committing.commit, committing.read_here_bytes) == (True, 0)
    # And a value that is not a number of bytes is refused, naming the option
    monkeypatch.setenv("AIRFLOW__TRIDENT__SPARK_READ_HERE_BYTES", "1MB")
    with pytest.raises(ConfigurationError, match=r"\[trident\] spark_read_here_bytes is '1MB'"):
        config.spark_read_here_bytes()


def test_inlining_follows_the_trident_section_to_the_spark_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_trident.batch.spark_job import _args
    from airflow_trident.coordination.client import ZkConfig
    from airflow_trident.hooks.spark import job_arguments

    # Given nothing configured: inlined where it inlines (the topology may still say no)
    monkeypatch.delenv("AIRFLOW__TRIDENT__INLINE", raising=False)
    assert config.inline_user_code() is True
    argv = job_arguments("m:t", 3, "/s", ZkConfig(hosts="zk:2181"), emit_wait_s=1.0)
    assert "--no-inline" not in argv
    assert _args(argv).no_inline is False
    # When [trident] inline is false
    monkeypatch.setenv("AIRFLOW__TRIDENT__INLINE", "false")
    # Then the spark-submit job is told so (the commit's job too: it may process again)
    assert config.inline_user_code() is False
    for commit in (False, True):
        argv = job_arguments("m:t", 3, "/s", ZkConfig(hosts="zk:2181"), emit_wait_s=0.0,
                             commit=commit)  # fmt: skip
        assert _args(argv).no_inline is True
    # And a value that is not a boolean is refused, naming the option
    monkeypatch.setenv("AIRFLOW__TRIDENT__INLINE", "sometimes")
    with pytest.raises(ConfigurationError, match=r"\[trident\] inline is 'sometimes'"):
        config.inline_user_code()


def test_the_records_limit_of_the_driver_read_follows_the_trident_section_to_the_spark_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_trident.batch.spark_job import _args
    from airflow_trident.coordination.client import ZkConfig
    from airflow_trident.hooks.spark import job_arguments

    # Given nothing configured: 50,000 offsets (a Kafka batch's ranges)
    monkeypatch.delenv("AIRFLOW__TRIDENT__SPARK_READ_HERE_RECORDS", raising=False)
    assert config.spark_read_here_records() == 50_000
    # When [trident] spark_read_here_records is 0 (always Spark's connector)
    monkeypatch.setenv("AIRFLOW__TRIDENT__SPARK_READ_HERE_RECORDS", "0")
    here = config.spark_read_here_records()
    # Then the spark-submit jobs of process and commit are told so, beside the bytes limit
    for commit in (False, True):
        argv = job_arguments("m:t", 3, "/s", ZkConfig(hosts="zk:2181"), emit_wait_s=1.0,
                             commit=commit, read_here_bytes=7, read_here_records=here)  # fmt: skip
        args = _args(argv)
        assert (args.commit, args.read_here_bytes, args.read_here_records) == (commit, 7, 0)
    assert _args(argv[:-2]).read_here_records is None  # the processor's default
    # And a value that is not a number of records is refused, naming the option
    monkeypatch.setenv("AIRFLOW__TRIDENT__SPARK_READ_HERE_RECORDS", "-1")
    with pytest.raises(ConfigurationError, match=r"spark_read_here_records is '-1'"):
        config.spark_read_here_records()
