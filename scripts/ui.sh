#!/usr/bin/env bash
# Look at the main job's runs in the Airflow UI (http://127.0.0.1:8080; the login is printed).
# Run after `bash scripts/main.sh`; Ctrl-C stops the servers. Arguments go to
# tests.harness.main_ui (--port, --work-dir, --check).
set -euo pipefail
export TRIDENT_SERVICES="${TRIDENT_SERVICES:-zookeeper}"  # the main job's home: no PostgreSQL
# what its DAGs use (dags/): Spark Connect, Delta, Iceberg, Kafka; no test tools (bootstrap.sh)
export TRIDENT_EXTRAS="${TRIDENT_EXTRAS:-connect,delta,iceberg,kafka,postgres}"
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec .venv/bin/python -m tests.harness.main_ui "$@"
