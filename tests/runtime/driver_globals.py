"""A user module with a global the driver changes between batches (tests/runtime/
test_declared_types.py, docs/api.md "What you can rely on"): Spark's Python workers import this
module themselves, so they see ``RATE`` as the import left it."""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow as pa

from airflow_trident.operation import Function
from airflow_trident.tuple import TridentCollector, TridentTuple

RATE = 1


class Rated(Function):
    """Emits the score times the module's ``RATE``."""

    output_types: ClassVar[dict[str, Any]] = {"rated": pa.int64()}

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        collector.emit((tuple_[0] * RATE,))
