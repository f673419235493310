#!/usr/bin/env bash
# The project's JVM jars from Maven Central, as jvm/pom.xml pins them (docs/jvm.md).
# Usage: scripts/jars.sh [spark] [kafka] [delta] [iceberg]    resolve those groups (default: spark kafka)
#        scripts/jars.sh list GROUP                   the group's jars, comma-separated (--jars)
# Each group goes to its own directory, .work/jars/<group>/, once: a stamp holding the hash of
# jvm/pom.xml makes every later run a no-op without Maven (~0.1 s, offline). When the pom
# changes, Maven tries offline first (~/.m2 is its cache), then Maven Central.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
POM="$ROOT/jvm/pom.xml"
JARS="${TRIDENT_JARS_DIR:-$ROOT/.work/jars}"
log() { echo "[jars] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# The groups whose transitive dependencies Spark ships itself: only the listed artifacts are
# copied (jvm/pom.xml says why); the broker gets its whole runtime closure.
only_listed() { case "$1" in spark|delta|iceberg) return 0 ;; *) return 1 ;; esac; }

resolve() {
    local group=$1 dir="$JARS/$1" stamp digest tmp started=$SECONDS
    digest="$(sha256sum "$POM" | cut -c1-16)"
    stamp="$dir/.resolved-$digest"
    if [ -f "$stamp" ]; then log "$group: up to date ($dir)"; return; fi
    command -v mvn >/dev/null || die "mvn is not installed (Debian: apt-get install maven)"
    command -v java >/dev/null || die "java is not installed (Debian: apt-get install openjdk-17-jdk-headless)"
    tmp="$JARS/.tmp-$group"
    rm -rf "$tmp"
    local args=(-q -B --no-transfer-progress -f "$POM" -P "$group"
                dependency:copy-dependencies -DoutputDirectory="$tmp" -DincludeScope=runtime)
    only_listed "$group" && args+=(-DexcludeTransitive=true)
    # offline first: a pom edit that only drops an artifact, or a fresh clone on a machine
    # whose ~/.m2 has them, needs no network
    local out="$JARS/.mvn-$group.log"
    if ! mvn -o "${args[@]}" >"$out" 2>&1; then
        log "$group: resolving from Maven Central (jvm/pom.xml changed or first run)"
        rm -rf "$tmp"
        if ! mvn "${args[@]}" >"$out" 2>&1; then
            tail -n 40 "$out" >&2
            die "$group: mvn dependency:copy-dependencies failed (log tail above: $out)"
        fi
    fi
    # the same jars as before (a pom edit elsewhere): keep the directory a running broker or
    # Spark reads from, only the stamp changes
    if [ -d "$dir" ] && diff -rq -x '.resolved-*' "$tmp" "$dir" >/dev/null 2>&1; then
        rm -rf "$tmp"
    else
        rm -rf "$dir"
        mv "$tmp" "$dir"
    fi
    rm -f "$dir"/.resolved-*
    touch "$stamp"
    log "$group: $(find "$dir" -name '*.jar' | wc -l) jars, $(du -sh "$dir" | cut -f1) in $dir ($((SECONDS - started)) s)"
}

case "${1:-}" in
    list)
        [ $# -eq 2 ] || die "usage: $0 list GROUP"
        dir="$JARS/$2"
        ls "$dir"/.resolved-* >/dev/null 2>&1 || die "$2: not resolved; run: bash scripts/jars.sh $2"
        find "$dir" -maxdepth 1 -name '*.jar' | sort | paste -sd, -
        ;;
    *)
        [ $# -gt 0 ] || set -- spark kafka
        mkdir -p "$JARS"
        exec 8>"$JARS/.lock"   # parallel bootstraps: one resolves, the others wait for it
        flock 8
        for group in "$@"; do
            case "$group" in
                spark|kafka|delta|iceberg) resolve "$group" ;;
                *) die "unknown group '$group' (spark, kafka, delta, iceberg)" ;;
            esac
        done
        ;;
esac
