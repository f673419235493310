#!/usr/bin/env bash
# The long tier (pytest marker `long`, any folder): tests of a mode that a shorter test of the
# test command covers too — DAG runs with spark-submit of each layout and commit mode, the
# standard layout's backfill and blocked runs, the Delta sink's DAG run, the browser's DAG run,
# Spark repeats of parametrized schedules. Runs them with TRIDENT_LONG=1 (docs/testing.md,
# "Tiers"). Extra arguments go to pytest. On two pytest-xdist workers (a file per worker): a DAG
# run keeps ~1.1 of the 2 cores busy (Airflow's loop and Spark's jobs wait on each other), so two
# at once nearly halve the tier; each test gets 900 s before pytest-timeout stops it (300 s in
# the test command), as two at once take longer each. ~20-25 min on 2 cores (1208 s and 1484 s on 2026-12-03; 33 min one at a time).
set -uo pipefail
export TRIDENT_NEEDS="${TRIDENT_NEEDS:-} browser"
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
export TRIDENT_LONG=1
timed_pytest long-test -q -p no:cacheprovider -n 2 --dist loadfile --timeout 900 -m long \
    --durations=30 "$@"
