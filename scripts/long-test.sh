#!/usr/bin/env bash
# The long DAG-run tests of a mode that a shorter test of the test command covers too (pytest
# marker `long`, tests/e2e/): the Spark commit over three spark-submit runs, the compact layout in
# submit mode with SQLite, the express layout's backfill. Runs them with TRIDENT_LONG=1.
# Extra arguments go to pytest. ~8 min on 2 cores.
set -uo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
export TRIDENT_LONG=1
timed_pytest long-test -q -m long tests/e2e "$@"
