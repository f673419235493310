#!/usr/bin/env bash
# Create/refresh the project virtualenv (.venv) and Spark's JVM jars of jvm/pom.xml (.work/jars,
# scripts/jars.sh: Spark's Kafka connector and PostgreSQL's JDBC driver; the Kafka broker's are
# resolved by services.sh when it starts the broker).
# Idempotent; a no-change run takes ~1 s.
# Usage: scripts/bootstrap.sh [browser] [redis] [kerberos]
#   the words install the Debian packages only some commands need: `browser` (Chromium and its
#   driver, the browser tests), `redis` (the Celery cluster test's broker), `kerberos` (MIT
#   Kerberos' KDC and tools, the GSSAPI cluster test's private KDC). The main job needs none.
#   (`jdbc` is still accepted and does nothing: the JDBC driver is one of the jars.)
# TRIDENT_NEEDS (space-separated words) adds to them: scripts/env.sh passes it on.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { echo "[bootstrap] $*" >&2; }
PY=.venv/bin/python
PYSPARK_VERSION=4.1.1
UV_VERSION=0.13.9

apt_install() {
    log "installing $* (apt-get)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 "$@" >/dev/null
}

if [ ! -x "$PY" ]; then
    if ! python3 -c 'import ensurepip' 2>/dev/null; then
        apt_install python3-venv
    fi
    log "creating .venv"
    python3 -m venv .venv
fi

# The Debian packages of the needs, in the background while uv installs (one apt-get at a time:
# the dpkg lock; waited for before this script ends, so services.sh's own apt-get comes after).
debs=()
for need in "$@" ${TRIDENT_NEEDS:-}; do
    case "$need" in
        browser) # the browser tests (tests/browser) drive Debian's Chromium through its chromedriver
            if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
                debs+=(chromium chromium-driver)
            fi ;;
        jdbc) ;; # was Debian's libpostgresql-jdbc-java: now org.postgresql:postgresql (jvm/pom.xml)
        redis) # the Celery cluster test (tests/cluster/test_celery.py) uses Redis as its broker
            command -v redis-server >/dev/null || debs+=(redis-server) ;;
        kerberos) # the GSSAPI cluster test's private MIT KDC (tests/harness/kerberos.py)
            [ -x /usr/sbin/krb5kdc ] && [ -x /usr/sbin/kadmin.local ] \
                || debs+=(krb5-kdc krb5-admin-server krb5-user) ;;
        *) log "unknown need '$need' (browser, redis, kerberos)"; exit 2 ;;
    esac
done
apt_pid=
if [ ${#debs[@]} -gt 0 ]; then
    apt_install "${debs[@]}" &
    apt_pid=$!
fi

# Parallel runs (test.sh, main.sh, helpers) share .venv: one installs, the others wait for it.
exec 9>.venv/.bootstrap.lock
flock 9

# The JVM jars (docs/jvm.md), beside the Python install: resolved from Maven Central once, a
# no-op after (a stamp of the pom's hash). Spark's (its Kafka connector, PostgreSQL's JDBC
# driver) here; the Kafka broker's when `services.sh start kafka` starts it. Maven from Debian
# if missing; Java 17 is Spark's and the broker's.
[ -z "$apt_pid" ] || command -v mvn >/dev/null || { wait "$apt_pid"; apt_pid=; }
command -v mvn >/dev/null || apt_install maven
# javac: Maven compiles the package's JVM functions (jvm/functions/pom.xml; the committed jar is
# checked against a rebuild by tests/test_jvm_functions_build.py)
[ -z "$apt_pid" ] || command -v javac >/dev/null || { wait "$apt_pid"; apt_pid=; }
command -v javac >/dev/null || apt_install openjdk-17-jdk-headless
# the broker's jars too when services.sh will start Kafka (every service unless TRIDENT_SERVICES
# names some): resolved here beside uv instead of at the broker's start (18 s from a fresh clone)
groups=(spark)
if [ -z "${TRIDENT_SERVICES:-}" ] || [[ " $TRIDENT_SERVICES " == *" kafka "* ]]; then
    groups+=(kafka)
fi
bash scripts/jars.sh "${groups[@]}" &
jars_pid=$!

# uv installs the same pins as pip, ~4x faster on a cold cache (docs/testing.md, "Set-up")
if [ "$(.venv/bin/uv --version 2>/dev/null | cut -d' ' -f2)" != "$UV_VERSION" ]; then
    log "installing uv $UV_VERSION"
    "$PY" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION"
fi
# --compile-bytecode: pip writes every module's .pyc at install, uv does not by default; where
# PYTHONDONTWRITEBYTECODE=1 (as on these machines) nothing writes them later either, and every
# Airflow task, CLI call and Spark worker would compile Airflow and PySpark from source again
# (the tests took twice as long).
uv_pip() { .venv/bin/uv pip "$@" --python "$PY" --quiet --compile-bytecode; }

if [ -f pyproject.toml ]; then
    # any change to pyproject.toml (a new dev tool such as import-linter) reinstalls. What:
    # TRIDENT_EXTRAS, default the project's whole set (dev,postgres); the main job and the UI
    # command ask only for what their DAGs use (scripts/main.sh: no test tools; 68 s instead of
    # 75 s from a fresh clone on 2026-12-01), and a later test command adds the rest (24 s). The
    # whole set's stamp (.installed-<hash>) satisfies every request.
    hash="$(sha256sum pyproject.toml | cut -c1-64)"
    want="${TRIDENT_EXTRAS:-dev,postgres}"
    stamp=".venv/.installed-$hash"
    [ "$want" = "dev,postgres" ] || stamp="$stamp-$want"
    if [ -f ".venv/.installed-$hash" ] || [ -f "$stamp" ]; then
        log "dependencies up to date ($(basename "$stamp" | cut -c1-22)...)"
    else
        log "installing .[$want] (pyproject.toml changed or first run)"
        for old in .venv/.installed-*; do  # the stamps of another pyproject.toml
            [[ -e $old && $old != ".venv/.installed-$hash"* ]] && rm -f "$old"
        done
        if [ "$want" = "dev,postgres" ]; then
            uv_pip install -e '.[dev,postgres]'
        else  # with the full pyspark (a local Spark Connect server) and the same
            # pyspark-client (the provider 6.x's), as dev has them
            uv_pip install -e ".[$want]" "pyspark==$PYSPARK_VERSION" \
                "pyspark-client==$PYSPARK_VERSION"
        fi
        touch "$stamp"
    fi
    # The editable build leaves airflow_trident.egg-info at the root. With the root on
    # PYTHONPATH (scripts/env.sh) importlib.metadata would find the package twice, and Airflow
    # would load each of its plugins twice ("Plugin 'trident_drpc' already registered"): the
    # installed metadata lives in the venv, the build's copy is not needed.
    rm -rf airflow_trident.egg-info
    # the project's own modules too (a changed file is compiled again; where bytecode is not
    # written on import, this saves each process compiling them)
    "$PY" -m compileall -q -j 0 airflow_trident tests dags >/dev/null || true
else
    log "no pyproject.toml yet: skipping the install"
fi

# pyspark-client (pulled in by the Spark provider) overwrites pyspark's Python files: pyspark
# must win, its Python files matching its jars (docs/installation.md, "Which pyspark").
have="$("$PY" -c 'import pyspark; print(pyspark.__version__)' 2>/dev/null || true)"
if [ "$have" != "$PYSPARK_VERSION" ]; then
    log "pyspark reports '${have:-none}': reinstalling pyspark==$PYSPARK_VERSION (no deps)"
    uv_pip install --reinstall --no-deps "pyspark==$PYSPARK_VERSION"
    have="$("$PY" -c 'import pyspark; print(pyspark.__version__)')"
    [ "$have" = "$PYSPARK_VERSION" ] || { log "ERROR: pyspark is still $have"; exit 1; }
fi
wait "$jars_pid" || { log "ERROR: scripts/jars.sh ${groups[*]} failed (its lines above)"; exit 1; }
if [ -n "$apt_pid" ]; then
    wait "$apt_pid" || { log "ERROR: apt-get install ${debs[*]} failed"; exit 1; }
fi
log "ok (pyspark $have)"
