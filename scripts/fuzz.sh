#!/usr/bin/env bash
# The long differential fuzzing of user code (issue 33; tests/runtime/test_user_code_fuzz.py):
# generated Functions and Filters, within and just outside the inlinable grammar, over awkward
# data, through every path (in process, Spark's row path, column path and inlined path), which
# must give the same tuples in the same order or the same error naming the same record.
# TRIDENT_FUZZ_EXAMPLES (default 10000) examples without Spark, TRIDENT_FUZZ_SPARK_EXAMPLES
# (default 40) on Spark local[2]. Extra arguments go to pytest. ~10 min on 2 cores.
set -uo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
export TRIDENT_FUZZ_EXAMPLES="${TRIDENT_FUZZ_EXAMPLES:-10000}"
export TRIDENT_FUZZ_SPARK_EXAMPLES="${TRIDENT_FUZZ_SPARK_EXAMPLES:-40}"
timed_pytest fuzz -q -W ignore::SyntaxWarning -p no:cacheprovider \
    --timeout=0 --hypothesis-show-statistics tests/runtime/test_user_code_fuzz.py "$@"
