#!/usr/bin/env bash
# The long source-chaos run (issue 19): seeded schedules of tests/harness/source_chaos_schedule.py
# over the database table source, >= 200 batches per mode (transactional: replays that see
# changed rows must be refused, then commit once restored; opaque: replays take the rows as they
# are) x state backend (SQLite, PostgreSQL) x runtime (in-process, Spark with JDBC reads): rows
# inserted during batches, out-of-order ids, attempts failing after processing or after writing
# state, rows of a failed txid updated/deleted/inserted below the mark before its retry, commits
# run again. After every commit the states are compared key by key with a reference computed
# from the rows each committed txid's metadata names.
#
# The replay profile (issue 32, --profile replay): committed txids, older ones too, replayed
# through the lifecycle (a conf txid run) and into each state alone (same state, or a Trident
# refusal with nothing written); new deployments with another parallelism_hint between batches and
# between an attempt that wrote its states and its retry; batches of 1, 2-6 or 1,000-4,000 rows;
# in transactional mode the Iceberg and Delta sinks beside the SQL states, checked row by row.
#
#   bash scripts/source-chaos.sh                                 # 200 batches each, random seed
#   bash scripts/source-chaos.sh --seed 7 --runtime local        # replay a seed in-process only
#   bash scripts/source-chaos.sh --source kafka --backend postgresql --seed 35   # Kafka
#   bash scripts/source-chaos.sh --profile replay --runtime spark --backend postgresql \
#       --mode transactional --seed 32                           # one combination (~30 min)
#
# The Kafka schedule (issues 35 and 36, --source kafka): KafkaSpout and OpaqueKafkaSpout over
# a broker the schedule starts, kills and restarts itself (never the shared one), with records
# produced during batches, partitions added, aborted transactions, delete_records retention,
# malformed records and Kafka sink commits dying at each point; states key by key and the sink's
# read_committed records per txid checked after every commit (tests/harness/kafka_chaos.py).
#
# Prints one summary line per schedule (keys different must be 0); exit code 0 when all are
# exact. Holds /tmp/heavy.lock (Spark).
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec flock /tmp/heavy.lock .venv/bin/python -m tests.harness.source_chaos --batches 200 "$@"
