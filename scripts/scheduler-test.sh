#!/usr/bin/env bash
# The real-scheduler tier (pytest marker `scheduler`, tests/e2e/): tests of one feature each
# under a whole Airflow (scheduler, DAG processor, triggerer, API server): pipelined runs and a
# UI clear, the express layout with `schedule="on_data"`, files landing while batches run, a
# running run's txid in the Trident tab, a new topology's first pipelined commits, Kafka through
# every way in (spark-submit, retry, clear, backfill, on_data), the express layout's short fault
# run (the whole batch one task, killed in its commit step). The test command keeps the
# standard short real-scheduler fault run. Runs them with TRIDENT_SCHEDULER=1.
# Extra arguments go to pytest. ~11-15 min on 2 cores (from fresh clones on 2026-12-03: 659 s with no steal, 917 s under steal).
set -uo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
export TRIDENT_SCHEDULER=1
timed_pytest scheduler-test -q --durations=20 -p no:cacheprovider -m scheduler tests/e2e "$@"
