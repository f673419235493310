#!/usr/bin/env bash
# The Kafka demo: the Kafka word count DAG (dags/trident_kafka_word_count.py) for a few batches
# as real DAG runs, a replay of txid 1, and the counts checked against what was produced
# (docs/kafka-demo.md). SQLite state, local ZooKeeper, a local Kafka broker (TRIDENT_KAFKA_PORT,
# default 39092) and one local Spark Connect server. Arguments go to tests/harness/run_kafka_dag.py
# (--batches, --records, --connect-port, --topic...). A broker of your own: set
# TRIDENT_KAFKA_BOOTSTRAP (then no local broker is started).
set -euo pipefail
given_bootstrap="${TRIDENT_KAFKA_BOOTSTRAP:-}"
if [ -n "$given_bootstrap" ]; then
    export TRIDENT_SERVICES="${TRIDENT_SERVICES:-zookeeper}"
else
    export TRIDENT_SERVICES="${TRIDENT_SERVICES:-zookeeper kafka}"
fi
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# env.sh exports the local broker's address (TRIDENT_KAFKA_PORT): a given one wins
[ -z "$given_bootstrap" ] || export TRIDENT_KAFKA_BOOTSTRAP="$given_bootstrap"
exec .venv/bin/python -m tests.harness.run_kafka_dag "$@"
