#!/usr/bin/env bash
# The real-scheduler tests of one feature each (pytest marker `scheduler`, tests/e2e/): the
# express layout with `schedule="on_data"`, files landing while batches run, a running run's txid
# in the Trident tab. Each starts a whole Airflow (scheduler, DAG processor, triggerer, API
# server). Runs `pytest -m scheduler tests/e2e` with TRIDENT_SCHEDULER=1, plus the short
# real-scheduler runs the test command has too. Extra arguments go to pytest. ~13 min on 2 cores.
set -uo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
export TRIDENT_SCHEDULER=1
timed_pytest scheduler-test -q tests/e2e/test_scheduler.py tests/e2e/test_scheduler_faults.py \
    tests/e2e/test_express_scheduler.py tests/e2e/test_file_log_scheduler.py \
    tests/e2e/test_run_txid_scheduler.py "$@"
