"""The batch steps of a topology by reference over the real ZooKeeper and a PostgreSQL state,
for the Spark commit tests: its state table emptied, its coordinator state deleted before and
after."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.runtime.reference import load_topology
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.state.binding import StateBinding


@contextmanager
def zk_batch_steps(
    reference: str, table: str, *, pg_url: str, zk_config: ZkConfig, tmp_path: Path,
    schema: str | None = None,
) -> Iterator[BatchSteps]:  # fmt: skip
    engine = sa.create_engine(pg_url)
    # emptied, not dropped: Spark's reused Python workers remember the table exists
    if sa.inspect(engine).has_table(table, schema):
        name = f'"{table}"' if schema is None else f"{schema}.{table}"
        with engine.begin() as conn:
            conn.execute(sa.text(f"DELETE FROM {name}"))
    engine.dispose()
    topology = load_topology(reference)
    client = connect(zk_config)
    store = CoordinatorStore(client, CoordinatorPaths(zk_config.root, topology.name))
    store.delete_all()
    try:
        yield BatchSteps(
            topology,
            store,
            StagingArea(str(tmp_path / "staging"), topology.name),
            states=StateBinding(pg_url),
        )
    finally:
        store.delete_all()
        client.stop()
        client.close()
