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
    # pytest's 5: every test deselected (extra arguments that name none of this part's tests)
    if [ $rc -eq 5 ] && [[ $1 == *pytest ]]; then rc=0; fi
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
# pytest in two parts (docs/testing.md, "Tiers"): every test but the real-scheduler fault run
# and the in-process tests marked `beside` on three pytest-xdist workers (a test file stays on
# one worker, in order; the workers share one Spark Connect server): on 2 cores, a third worker
# fills the time the others wait on Airflow's loop, JVM starts and subprocesses. Then the fault
# run (marker solo) with light work beside it: the type check and the import contracts, and the
# `beside` tests on one worker (a PostgreSQL database of its own; they mostly wait on Kafka and
# ZooKeeper, ~80 s of CPU in ~3 minutes). The fault run's stall verdicts wait on time, so
# nothing that keeps a core busy for long runs beside it.
beside() {
    local rc=0
    .venv/bin/pytest -q -p no:cacheprovider -n 1 -m "beside and not solo" --durations=10 "$@" ||
        rc=$?
    [ $rc -ne 5 ] || rc=0
    return $rc
}
# aside NAME CMD...: CMD in the background, its output kept for `joined NAME`, which waits for it
# and prints its output, its exit code and its own time
declare -A aside_pid aside_log
aside() {
    local name=$1
    shift
    aside_log[$name]=$(mktemp)
    (t0=$SECONDS rc=0; "$@" || rc=$?; echo "[test] $name: exit $rc after $((SECONDS - t0)) s"
     exit $rc) >"${aside_log[$name]}" 2>&1 &
    aside_pid[$name]=$!
}
joined() {
    local rc=0
    wait "${aside_pid[$1]}" || rc=$?
    echo "[test] $1 (beside the fault run):" >&2
    cat "${aside_log[$1]}" >&2
    rm -f "${aside_log[$1]}"
    [ $rc -eq 0 ] || failed+=("$1")
}
if [ -d tests ]; then
    step .venv/bin/pytest -q -p no:cacheprovider -n 3 --dist loadfile -m "not solo and not beside" \
        --durations=30 "$@"
fi
aside "mypy/lint-imports" checks
if [ -d tests ]; then
    aside "pytest -m beside" beside "$@"
    step .venv/bin/pytest -q -p no:cacheprovider -m "e2e and solo" --durations=20 "$@"
    joined "pytest -m beside"
fi
joined "mypy/lint-imports"
if [ ${#failed[@]} -gt 0 ]; then echo "[test] FAILED: ${failed[*]}" >&2; exit 1; fi
echo "[test] all passed" >&2
