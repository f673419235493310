#!/usr/bin/env bash
# The test command: lint, type-check, check the import contracts (layers, pyproject.toml's
# [tool.importlinter]) and pytest against local ZooKeeper + PostgreSQL + Kafka; every mode at
# least once, the tiers (cluster, scheduler, long) have their own commands (.ci/run runs them
# after it). Extra arguments go to pytest. Runs every step, prints each one's time and exits
# non-zero if any failed.
set -euo pipefail
export TRIDENT_NEEDS="${TRIDENT_NEEDS:-} browser"
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
failed=()
step() {
    local t0=$SECONDS rc=0
    echo "[test] $*" >&2
    "$@" || rc=$?
    echo "[test] $1: exit $rc after $((SECONDS - t0)) s" >&2
    [ $rc -eq 0 ] || failed+=("$1")
}
checks() { # the type check and the import contracts (one mypy run: both trees share its analysis)
    local rc=0 trees=()
    [ -d airflow_trident ] && trees+=(airflow_trident)
    [ -d tests/harness ] && trees+=(tests/harness)
    [ ${#trees[@]} -eq 0 ] || .venv/bin/mypy --strict "${trees[@]}" || rc=1
    [ ! -d airflow_trident ] || .venv/bin/lint-imports --no-cache --no-logo || rc=1
    return $rc
}
if [ -d airflow_trident ] || [ -d tests ]; then step .venv/bin/ruff check .; fi
# pytest in two parts: the tests without DAG runs on two workers (a test file stays on one
# worker, in order), then the DAG runs (marker e2e) one at a time: each starts Airflow, Spark
# and servers of its own and would only slow the other down (docs/testing.md, "Tiers"). The
# type check runs beside the DAG runs, which mostly wait on Airflow's scheduling loop.
checks_log=$(mktemp)
if [ -d tests ]; then
    step .venv/bin/pytest -q -p no:cacheprovider -n 2 --dist loadfile -m "not e2e" \
        --durations=20 "$@"
    checks_t0=$SECONDS
    checks >"$checks_log" 2>&1 &
    checks_pid=$!
    step .venv/bin/pytest -q -p no:cacheprovider -m e2e --durations=20 "$@"
else
    checks_t0=$SECONDS
    checks >"$checks_log" 2>&1 &
    checks_pid=$!
fi
checks_rc=0
wait "$checks_pid" || checks_rc=$?
echo "[test] mypy --strict + lint-imports (beside the DAG runs):" >&2
cat "$checks_log" >&2
rm -f "$checks_log"
echo "[test] checks: exit $checks_rc after $((SECONDS - checks_t0)) s" >&2
[ $checks_rc -eq 0 ] || failed+=("mypy/lint-imports")
if [ ${#failed[@]} -gt 0 ]; then echo "[test] FAILED: ${failed[*]}" >&2; exit 1; fi
echo "[test] all passed" >&2
