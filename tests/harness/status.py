"""A Trident DAG with real batches in every phase, for tests of ``airflow-trident status`` and
the UI view (and for anyone who wants to see them with something in them).

:func:`status_env` gives the environment of an Airflow process that runs (or looks at) the DAG
file :data:`STATUS_DAG_FILE`: a ``trident_zookeeper`` connection, a ``postgres`` state connection
and the staging root. :func:`run_batches` runs batches of that DAG's topology through the same
lifecycle the DAG's tasks run (begin, process, commit, success, on ZooKeeper, a staging root and
the state database), and leaves later txids in flight: processed, and begun.

This module does not import ``airflow``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import sqlalchemy as sa

from airflow_trident.batch.lifecycle import zookeeper_batch_steps
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.client import ZkConfig, connect
from tests.harness.topologies import e2e_word_count

__all__ = [
    "STATE_CONN_ID",
    "STATUS_DAG_FILE",
    "ZOOKEEPER_CONN_ID",
    "run_batches",
    "status_env",
    "topology_steps",
]

ZOOKEEPER_CONN_ID = "trident_status_zk"
STATE_CONN_ID = "trident_status_state"

STATUS_DAG_FILE = f"""
import os

from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.topologies:e2e_word_count",
    dag_id=os.environ.get("TRIDENT_STATUS_DAG_ID", "trident_status"),
    spark_conn_id="spark_local",
    zookeeper_conn_id={ZOOKEEPER_CONN_ID!r},
    state_conn_id={STATE_CONN_ID!r},
    max_active_batches=3,
)
broken = trident_dag(
    "tests.harness.topologies:e2e_word_count",
    dag_id="trident_status_no_connection",
    spark_conn_id="spark_local",
    zookeeper_conn_id="trident_status_undefined",
)
"""
"""A DAG file: the Trident DAG ``$TRIDENT_STATUS_DAG_ID`` with the connections of
:func:`status_env`, and ``trident_status_no_connection`` whose ZooKeeper connection is not
defined."""


def status_env(
    *, dag_id: str, topology: str, zk: ZkConfig, state_url: str, staging_root: str
) -> dict[str, str]:
    """The environment of a process that runs or inspects :data:`STATUS_DAG_FILE`'s DAG."""
    host, _, port = zk.hosts.split(",")[0].partition(":")
    url = sa.make_url(state_url)
    state = {
        "conn_type": "postgres", "host": url.host, "port": url.port, "login": url.username,
        "password": url.password, "schema": url.database,
    }  # fmt: skip
    zookeeper = {"conn_type": "trident_zookeeper", "host": host, "port": int(port or 2181),
                 "extra": {"root": zk.root}}  # fmt: skip
    return {
        f"AIRFLOW_CONN_{ZOOKEEPER_CONN_ID.upper()}": json.dumps(zookeeper),
        f"AIRFLOW_CONN_{STATE_CONN_ID.upper()}": json.dumps(state),
        "TRIDENT_STATUS_DAG_ID": dag_id,
        "TRIDENT_TEST_TOPOLOGY": topology,
        "TRIDENT_STAGING_ROOT": staging_root,
    }


@contextmanager
def topology_steps(env: Mapping[str, str], zk: ZkConfig, state_url: str) -> Iterator[BatchSteps]:
    """The lifecycle of the DAG's topology (named by ``env``), connected to ZooKeeper."""
    saved = os.environ.get("TRIDENT_TEST_TOPOLOGY")
    os.environ["TRIDENT_TEST_TOPOLOGY"] = env["TRIDENT_TEST_TOPOLOGY"]
    try:
        topology = e2e_word_count()
    finally:
        if saved is None:
            os.environ.pop("TRIDENT_TEST_TOPOLOGY")
        else:
            os.environ["TRIDENT_TEST_TOPOLOGY"] = saved
    client = connect(zk)
    try:
        yield zookeeper_batch_steps(topology, client, root=zk.root,
                                    staging_root=env["TRIDENT_STAGING_ROOT"],
                                    state_url=state_url)  # fmt: skip
    finally:
        client.stop()
        client.close()


def run_batches(steps: BatchSteps, *, committed: int, processed: int = 0, begun: int = 0) -> None:
    """Commit ``committed`` batches as the DAG's tasks do (runs ``run_1``, ``run_2``, ...),
    then leave ``processed`` batches staged and ``begun`` ones begun, uncommitted."""
    first = steps.store.runs.current_txid() + 1
    for txid in range(first, first + committed):
        steps.begin(f"run_{txid}", None)
        steps.process_local(txid)
        steps.commit(txid)
        steps.success(txid)
    start = first + committed
    for txid in range(start, start + processed + begun):
        steps.begin(f"run_{txid}", None)
    for txid in range(start, start + processed):
        steps.process_local(txid)
