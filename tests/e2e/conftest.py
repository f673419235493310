"""Two kinds of DAG-run tests have their own commands, to keep the test command short:

- real-scheduler tests of one feature each (pytest marker ``scheduler``) run only with
  ``TRIDENT_SCHEDULER=1`` (``bash scripts/scheduler-test.sh`` sets it): ~2-4 min each under a
  whole Airflow (scheduler, DAG processor, triggerer, API server). The test command keeps the
  short real-scheduler runs: pipelined runs (``test_scheduler.py``) and one of each fault
  (``test_scheduler_faults.py``);
- long DAG-run tests of a mode that a shorter test of the test command covers too (marker
  ``long``) run only with ``TRIDENT_LONG=1`` (``bash scripts/long-test.sh``): the Spark commit
  over three spark-submit runs (the test command keeps Spark commit in Connect mode and in the
  compact layout), the compact layout in submit mode (kept: compact in Connect mode), the
  express layout's backfill (kept: the standard layout's backfill)."""

from __future__ import annotations

import os

import pytest

_GATES = {
    "scheduler": ("TRIDENT_SCHEDULER", "bash scripts/scheduler-test.sh"),
    "long": ("TRIDENT_LONG", "bash scripts/long-test.sh"),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for marker, (flag, command) in _GATES.items():
        if os.environ.get(flag) == "1":
            continue
        skip = pytest.mark.skip(reason=f"its own command: {command}")
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)
