#!/usr/bin/env bash
# The cluster tests (pytest marker `cluster`, tests/cluster/): starts the local cluster of
# scripts/cluster.sh (Spark standalone master + 2 workers, 3-node ZooKeeper ensemble), runs
# `pytest -m cluster tests/cluster` with TRIDENT_CLUSTER=1, then stops the cluster, also when a
# test fails or the run is interrupted (a cluster that was already running is left running).
# Extra arguments go to pytest. The exit code is pytest's. ~5 min on 2 cores.
set -uo pipefail
export TRIDENT_NEEDS="${TRIDENT_NEEDS:-} redis kerberos"
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
already_running=0
bash scripts/cluster.sh status >/dev/null 2>&1 && already_running=1
stop_cluster() {
    if [ "$already_running" = 0 ]; then bash scripts/cluster.sh stop; fi
}
trap stop_cluster EXIT
bash scripts/cluster.sh start || exit 1
eval "$(bash scripts/cluster.sh env)"
export TRIDENT_CLUSTER=1
timed_pytest cluster-test -q --durations=20 -m cluster tests/cluster "$@"
