#!/usr/bin/env bash
# The long in-process fault run: for each exactly-once combination (transactional spout x
# transactional state, transactional spout x opaque state, opaque spout with partition outages x
# opaque state) a seeded schedule plays Airflow against BatchSteps for >= 200 batches with every
# fault kind: exceptions at each phase of a batch (ZooKeeper calls, before/after the commit's
# compare-and-set, in the middle of a state commit, the spout's emitter, user code), ZooKeeper
# session expiry, kill -9 of a step in a child process, two committers on one txid, retries and
# clears of any step, and kill -9 + restart of a private ZooKeeper and a private PostgreSQL (the
# state database). The shared services are never restarted.
# See airflow_trident/testing/schedule.py (the schedules) and tests/harness/fault_schedule.py
# (this command line, which starts the private servers).
#
#   bash scripts/faults.sh                                   # 200 batches each, random seed
#   bash scripts/faults.sh --seed 7 --batches 300            # replay a seed, more batches
#   bash scripts/faults.sh --seed 7 --combo opaque-opaque    # one combination
#
# Prints, per combination, the batches run, the faults injected by kind and the number of keys
# whose final value differs from the reference (must be 0). Exit code 0 when every combination
# is exactly once with no broken invariant. Takes ~5 min on 2 cores; holds /tmp/heavy.lock.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec flock /tmp/heavy.lock .venv/bin/python -m tests.harness.fault_schedule \
    --batches 200 --private-zk --private-pg "$@"
