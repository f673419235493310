#!/usr/bin/env bash
# The main job: word count example against local ZooKeeper + PostgreSQL. Arguments go to it.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec .venv/bin/python -m tests.harness.run_dag "$@"
