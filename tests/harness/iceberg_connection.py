"""A topology whose Iceberg sink names its catalog by an Airflow connection
(``iceberg_conn_id``), loaded by reference on Spark executors: they get the catalog the task
resolved in their task closure, never from an Airflow of their own (issue 53, item 6)."""

from __future__ import annotations

from airflow_trident.state.iceberg import iceberg_state
from airflow_trident.topology import TridentTopology
from tests.harness.iceberg_sinks import words_topology

__all__ = ["CONN_ID", "REFERENCE", "TABLE", "iceberg_by_connection"]

CONN_ID = "trident_iceberg_shipped"
TABLE = "trident_tests.shipped_words"
REFERENCE = "tests.harness.iceberg_connection:iceberg_by_connection"


def iceberg_by_connection() -> TridentTopology:
    """Every word appended to :data:`TABLE` of the catalog connection :data:`CONN_ID`."""
    sink = iceberg_state(TABLE, "iceberg_by_connection.events", iceberg_conn_id=CONN_ID)
    return words_topology("iceberg_by_connection", sink)
