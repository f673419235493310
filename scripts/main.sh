#!/usr/bin/env bash
# The main job: the file word count DAG on the embedded default (SQLite state, local ZooKeeper,
# one local Spark Connect server). Arguments go to it (tests/harness/run_dag.py).
set -euo pipefail
export TRIDENT_SERVICES="${TRIDENT_SERVICES:-zookeeper}"  # SQLite state: no PostgreSQL needed
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec .venv/bin/python -m tests.harness.run_dag "$@"
