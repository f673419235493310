#!/usr/bin/env bash
# The long real-scheduler fault run: >= 50 pipelined batches under a real Airflow (scheduler, DAG
# processor, triggerer, API server; LocalExecutor) with process_mode="connect", while a seeded
# schedule kill -9s commit tasks, kill -9s and restarts a private ZooKeeper and PostgreSQL (the
# DAG's coordinator and state database), clears committed runs and a failed one through the REST
# API (the UI's Clear) and backfills committed txids with `airflow-trident backfill`. The final
# states must equal the reference computed from the source data, key by key, and the commit
# ledger must hold txids 1..N. See tests/harness/scheduler_faults.py.
#
#   bash scripts/faults-scheduler.sh                        # 50 batches, random seed (printed)
#   bash scripts/faults-scheduler.sh --seed 7 --batches 60  # replay a seed, more batches
#
# Takes ~10-15 min on 2 cores; holds /tmp/heavy.lock (it starts Spark and Airflow). Exit code 0
# when the last line is "OK (seed=S)", 1 when it is "FAILED (seed=S)".
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# -o: the lock is not inherited by the servers it starts (a leaked daemon would hold it for ever)
exec flock -o /tmp/heavy.lock .venv/bin/python -m tests.harness.scheduler_faults \
    --batches 50 "$@"
