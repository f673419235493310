#!/usr/bin/env bash
# The main job: the file word count DAG on the embedded default (SQLite state, local ZooKeeper,
# one local Spark Connect server). Arguments go to it (tests/harness/run_dag.py).
set -euo pipefail
export TRIDENT_SERVICES="${TRIDENT_SERVICES:-zookeeper}"  # SQLite state: no PostgreSQL needed
# what its DAGs use (dags/): Spark Connect, Delta, Iceberg, Kafka; no test tools (bootstrap.sh)
export TRIDENT_EXTRAS="${TRIDENT_EXTRAS:-connect,delta,iceberg,kafka,postgres}"
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec .venv/bin/python -m tests.harness.run_dag "$@"
