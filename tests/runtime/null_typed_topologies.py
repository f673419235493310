"""A topology writing a file log's inferred fields into Iceberg and Delta (issue 32, item 4),
loaded by reference (``tests.runtime.null_typed_topologies:events``) as Spark executors do: its
log, Delta table and Iceberg warehouse are under :data:`ROOT` (emptied by the test), its
Iceberg catalog is the run's state database."""

from __future__ import annotations

import tempfile
from pathlib import Path

from airflow_trident.spout.file_log import FileLogSpout
from airflow_trident.state.delta import DeltaWriter, delta_state
from airflow_trident.state.iceberg import IcebergWriter, iceberg_state
from airflow_trident.topology import TridentTopology

NAME = "null_typed_events"
ROOT = Path(tempfile.gettempdir()) / "trident-null-typed"
LOG, DELTA = ROOT / "log", ROOT / "delta"
TABLE = "trident_tests.null_typed_events"
ICEBERG = iceberg_state(TABLE, f"{NAME}.iceberg", warehouse=f"file://{ROOT}/warehouse",
                        evolve_schema=True)  # fmt: skip
FIELDS = ["word", "n", "lang"]


def events() -> TridentTopology:
    """Each record of the log (``word``, ``n``, ``lang``, types inferred) appended to an
    Iceberg and a Delta table that evolve."""
    topology = TridentTopology(NAME)
    lines = topology.new_stream("lines", FileLogSpout(LOG, FIELDS, infer_schema=True))
    lines.partition_persist(ICEBERG, FIELDS, IcebergWriter(), name="iceberg_events")
    lines.partition_persist(
        delta_state(str(DELTA), f"{NAME}.delta", evolve_schema=True),
        FIELDS,
        DeltaWriter(),
        name="delta_events",
    )
    return topology
