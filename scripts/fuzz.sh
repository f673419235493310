#!/usr/bin/env bash
# The long differential fuzzing of user code (issue 33; tests/runtime/test_user_code_fuzz.py and
# tests/runtime/test_aggregator_fuzz.py): generated Functions, Filters, aggregators and windows,
# over awkward data, through every path (in process, Spark's row path, column path, inlined
# path, Spark SQL's built-in aggregations, whole batches on Spark local[2]), which must give the
# same tuples, staged state values and errors.
#
# Each property runs TRIDENT_FUZZ_EXAMPLES examples (default 10000; for the Spark SQL property,
# datasets: 50 per Spark job) in chunks of TRIDENT_FUZZ_CHUNK (default 2500, a few minutes each):
# every chunk is its own pytest run with its own hypothesis seed, under the lock file
# TRIDENT_FUZZ_LOCK when set (e.g. /tmp/heavy.lock: a shared machine gets turns between chunks).
# The whole batches on Spark run TRIDENT_FUZZ_SPARK_EXAMPLES examples (default 40) per property.
# Printed last: per property, the examples run, the differences found (failing examples) and the
# seconds. TRIDENT_FUZZ_ONLY (an extended regular expression) runs only the properties whose
# name (as printed) it matches, e.g. TRIDENT_FUZZ_ONLY='^(aggregators|windows|built-in)';
# TRIDENT_FUZZ_FIRST_SEED (default 1) is the first chunk's seed (to go on where a run stopped).
# Extra arguments go to pytest. ~1 h on 2 cores with nothing else running.
set -uo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
total="${TRIDENT_FUZZ_EXAMPLES:-10000}"
chunk="${TRIDENT_FUZZ_CHUNK:-2500}"
spark_total="${TRIDENT_FUZZ_SPARK_EXAMPLES:-40}"
lock="${TRIDENT_FUZZ_LOCK:-}"
only="${TRIDENT_FUZZ_ONLY:-}"
first_seed="${TRIDENT_FUZZ_FIRST_SEED:-1}"
u=tests/runtime/test_user_code_fuzz.py
a=tests/runtime/test_aggregator_fuzz.py
summary=()
failed=0
started=$SECONDS

# fuzz NAME TEST VARIABLE TOTAL CHUNK PER_CASE [pytest args]: TEST with VARIABLE=n examples per
# chunk; PER_CASE examples in each test case hypothesis counts (the Spark SQL jobs' datasets)
fuzz() {
    local name=$1 test=$2 var=$3 want=$4 size=$5 per=$6 ran=0 seed=$((first_seed - 1)) examples=0 diffs=0
    local begun=$SECONDS n out rc passing failing
    shift 6
    if [ -n "$only" ] && ! [[ $name =~ $only ]]; then return 0; fi
    while [ "$ran" -lt "$want" ]; do
        n=$((want - ran < size ? want - ran : size))
        seed=$((seed + 1))
        out=$(mktemp)
        echo "[fuzz] $name: chunk $seed, $n examples ($(date -u +%FT%TZ))" >&2
        # shellcheck disable=SC2086 # the lock command is one word or none
        ${lock:+flock $lock} env "$var=$n" TRIDENT_FUZZ_SEED="$seed" .venv/bin/pytest -q \
            -p no:cacheprovider -W ignore::SyntaxWarning --timeout=0 --hypothesis-show-statistics \
            --hypothesis-seed="$seed" "$test" "$@" 2>&1 | tee "$out"
        rc=${PIPESTATUS[0]}
        passing=$(grep -oE '[0-9]+ passing' "$out" | awk '{s += $1} END {print s + 0}')
        failing=$(grep -oE '[0-9]+ failing' "$out" | awk '{s += $1} END {print s + 0}')
        if [ "$rc" -ne 0 ] && [ "$failing" -eq 0 ]; then failing=1; fi  # failed otherwise
        examples=$((examples + passing * per))
        diffs=$((diffs + failing))
        rm -f "$out"
        ran=$((ran + n))
    done
    [ "$diffs" -eq 0 ] || failed=1
    summary+=("$(printf '%-62s %8d examples %3d differences %6d s' "$name" "$examples" "$diffs" \
        $((SECONDS - begun)))")
}

fuzz "functions/filters: in process = column, inlined, row path" \
    "$u::test_every_path_gives_the_in_process_tuples_errors_and_calls" \
    TRIDENT_FUZZ_EXAMPLES "$total" "$chunk" 1 "$@"
fuzz "aggregators: in process = Spark's row path" \
    "$a::test_the_row_path_gives_the_in_process_tuples_state_errors_and_calls" \
    TRIDENT_FUZZ_EXAMPLES "$total" "$chunk" 1 "$@"
fuzz "windows: in process = Spark's row path" \
    "$a::test_windows_on_the_row_path_give_the_in_process_results_and_errors" \
    TRIDENT_FUZZ_EXAMPLES "$total" "$chunk" 1 "$@"
fuzz "built-in aggregations: in process = Spark SQL (50 per job)" \
    "$a::test_spark_sql_aggregates_as_in_process" \
    TRIDENT_FUZZ_EXAMPLES "$total" "$chunk" 50 "$@"
fuzz "functions/filters: in process = Spark local[2]" \
    "$u::test_spark_gives_the_in_process_tuples_and_errors" \
    TRIDENT_FUZZ_SPARK_EXAMPLES "$spark_total" "$spark_total" 1 "$@"
fuzz "aggregators: in process = Spark local[2]" \
    "$a::test_spark_aggregates_as_in_process" \
    TRIDENT_FUZZ_SPARK_EXAMPLES "$spark_total" "$spark_total" 1 "$@"
fuzz "windows: in process = Spark local[2] (store in PostgreSQL)" \
    "$a::test_windows_on_spark_give_the_in_process_results_and_errors" \
    TRIDENT_FUZZ_SPARK_EXAMPLES "$spark_total" "$spark_total" 1 "$@"

echo "[fuzz] $(date -u +%FT%TZ), $((SECONDS - started)) s in all:"
printf '%s\n' "${summary[@]}"
exit "$failed"
