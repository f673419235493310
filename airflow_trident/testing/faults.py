"""Crash injection for testing topologies end to end (shipped so users can test theirs).

>>> import tempfile, pathlib
>>> marker = pathlib.Path(tempfile.mkdtemp()) / "failed-once"
>>> fail = FailOnce(str(marker))
>>> from airflow_trident.tuple import TridentCollector, TridentTuple
>>> try:
...     fail.execute(TridentTuple(("x",), ("w",)), TridentCollector())
... except RuntimeError as exc:
...     print(exc)
injected failure (once): FailOnce at ...
>>> c = TridentCollector(); fail.execute(TridentTuple(("x",), ("w",)), c); c.rows
[('x',)]
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow_trident.operation.base import Function
from airflow_trident.tuple import TridentCollector, TridentTuple

__all__ = ["FailOnce"]


class FailOnce(Function):
    """Passes its input through, but raises on the first tuple it ever sees (across processes:
    a marker file remembers), so the first attempt of a batch fails and its retry succeeds.

    An empty ``marker`` disables it.
    """

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        if self.marker and not os.path.exists(self.marker):
            Path(self.marker).parent.mkdir(parents=True, exist_ok=True)
            Path(self.marker).write_text("failed once\n")
            msg = f"injected failure (once): FailOnce at {self.marker}"
            raise RuntimeError(msg)
        collector.emit(tuple_.values)
