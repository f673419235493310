# shellcheck shell=bash
# Sourced by test.sh and main.sh: venv + services + environment.
# TRIDENT_NEEDS: the Debian packages a command needs beyond the main job's (scripts/bootstrap.sh).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
bash scripts/bootstrap.sh
bash scripts/services.sh start ${TRIDENT_SERVICES:-}  # e.g. "zookeeper" only: the main job
eval "$(bash scripts/services.sh env)"
export SPARK_LOCAL_IP=127.0.0.1
export PATH="$ROOT/.venv/bin:$PATH"
# The test harness (tests/harness, not installed) and its topologies, which tests and bench ship
# by module reference to Airflow tasks, spark-submit and Spark's Python workers.
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# timed_pytest NAME ARGS...: pytest with ARGS, then "[NAME] pytest exited RC after S s" on stderr;
# returns pytest's exit code (the gated-test scripts: cluster, scheduler, long).
timed_pytest() {
    local name=$1 started=$SECONDS rc=0
    shift
    .venv/bin/pytest "$@" || rc=$?
    echo "[$name] pytest exited $rc after $((SECONDS - started)) s" >&2
    return $rc
}
