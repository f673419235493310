#!/usr/bin/env bash
# The test command: lint, type-check, check the import contracts (layers, pyproject.toml's
# [tool.importlinter]) and pytest against local ZooKeeper + PostgreSQL; every mode at least once,
# the tiers (cluster, scheduler, long) have their own commands (.ci/run runs them after it).
# Extra arguments go to pytest. Runs every step and exits non-zero if any failed.
set -euo pipefail
export TRIDENT_NEEDS="${TRIDENT_NEEDS:-} browser"
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
failed=()
step() { echo "[test] $*" >&2; "$@" || failed+=("$1"); }
if [ -d airflow_trident ] || [ -d tests ]; then step .venv/bin/ruff check .; fi
if [ -d airflow_trident ]; then step .venv/bin/mypy --strict airflow_trident; fi
if [ -d tests/harness ]; then step .venv/bin/mypy --strict tests/harness; fi
if [ -d airflow_trident ]; then step .venv/bin/lint-imports --no-cache --no-logo; fi
# pytest in two parts: the tests without DAG runs on two workers (a test file stays on one
# worker, in order), then the DAG runs (marker e2e) one at a time: each starts Airflow, Spark
# and servers of its own and would only slow the other down (docs/testing.md, "Tiers").
if [ -d tests ]; then
    step .venv/bin/pytest -q -p no:cacheprovider -n 2 --dist loadfile -m "not e2e" \
        --durations=20 "$@"
    step .venv/bin/pytest -q -p no:cacheprovider -m e2e --durations=20 "$@"
fi
if [ ${#failed[@]} -gt 0 ]; then echo "[test] FAILED: ${failed[*]}" >&2; exit 1; fi
echo "[test] all passed" >&2
