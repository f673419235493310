#!/usr/bin/env bash
# The long tier (pytest marker `long`, any folder): tests of a mode that a shorter test of the
# test command covers too — DAG runs with spark-submit of each layout and commit mode, the
# standard layout's backfill and blocked runs, the Delta sink's DAG run, the browser's DAG run,
# Spark repeats of parametrized schedules. Runs them with TRIDENT_LONG=1 (docs/testing.md,
# "Tiers"). Extra arguments go to pytest. ~20 min on 2 cores.
set -uo pipefail
export TRIDENT_NEEDS="${TRIDENT_NEEDS:-} browser"
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
export TRIDENT_LONG=1
timed_pytest long-test -q -p no:cacheprovider -m long "$@"
