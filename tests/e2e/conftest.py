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

# The gates themselves (markers ``scheduler`` and ``long`` -> their flags) are in tests/conftest.py:
# they apply to every folder.
