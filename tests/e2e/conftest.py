"""Real-scheduler tests of one feature each (pytest marker ``scheduler``) run only with
``TRIDENT_SCHEDULER=1`` (``bash scripts/scheduler-test.sh`` sets it): ~2-4 min each under a
whole Airflow (scheduler, DAG processor, triggerer, API server). The test command keeps the short
real-scheduler runs: pipelined runs (``test_scheduler.py``) and one of each fault
(``test_scheduler_faults.py``)."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("TRIDENT_SCHEDULER") == "1":
        return
    skip = pytest.mark.skip(reason="its own command: bash scripts/scheduler-test.sh")
    for item in items:
        if item.get_closest_marker("scheduler") is not None:
            item.add_marker(skip)
