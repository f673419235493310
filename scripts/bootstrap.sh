#!/usr/bin/env bash
# Create/refresh the project virtualenv (.venv). Idempotent; a no-change run takes ~1 s.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { echo "[bootstrap] $*" >&2; }
PY=.venv/bin/python
PYSPARK_VERSION=4.3.0

if [ ! -x "$PY" ]; then
    if ! python3 -c 'import ensurepip' 2>/dev/null; then
        log "installing python3-venv"
        apt-get update -qq && apt-get install -y -qq python3-venv
    fi
    log "creating .venv"
    python3 -m venv .venv
fi

# The browser tests (tests/browser) drive Debian's Chromium through its chromedriver.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    log "installing chromium and chromium-driver (browser tests)"
    apt-get update -qq && apt-get install -y -qq chromium chromium-driver
fi

# The database table source reads PostgreSQL on Spark through JDBC: Debian's driver jar.
if [ ! -f /usr/share/java/postgresql.jar ]; then
    log "installing libpostgresql-jdbc-java (PostgreSQL JDBC driver for Spark)"
    apt-get update -qq && apt-get install -y -qq libpostgresql-jdbc-java
fi

# The Celery cluster test (tests/cluster/test_celery.py) uses Redis as the Celery broker.
if ! command -v redis-server >/dev/null; then
    log "installing redis-server (Celery broker of the cluster tests)"
    apt-get update -qq && apt-get install -y -qq redis-server
fi

# Parallel runs (test.sh, main.sh, helpers) share .venv: one installs, the others wait for it.
exec 9>.venv/.bootstrap.lock
flock 9

if [ -f pyproject.toml ]; then
    # any change to pyproject.toml (a new dev tool such as import-linter) reinstalls .[dev]
    stamp=".venv/.installed-$(sha256sum pyproject.toml | cut -c1-64)"
    if [ -f "$stamp" ]; then
        log "dependencies up to date ($(basename "$stamp" | cut -c1-22)...)"
    else
        log "installing .[dev,postgres] (pyproject.toml changed or first run)"
        "$PY" -m pip install -q --upgrade pip
        "$PY" -m pip install -q -e '.[dev,postgres]'
        # pyspark-client (the Spark provider's) writes into pyspark's own directory: pyspark must
        # win, its Python files matching its jars (docs/installation.md, "Which pyspark": the dev extra has both)
        spark_version="$("$PY" -c 'import importlib.metadata as m; print(m.version("pyspark"))')"
        if [ "$("$PY" -c 'import pyspark; print(pyspark.__version__)')" != "$spark_version" ]; then
            log "reinstalling pyspark $spark_version over pyspark-client's files"
            "$PY" -m pip install -q --force-reinstall --no-deps "pyspark==$spark_version"
        fi
        rm -f .venv/.installed-*
        touch "$stamp"
    fi
else
    log "no pyproject.toml yet: skipping pip install"
fi

# pyspark-client (pulled in by the Spark provider) overwrites pyspark's Python files.
have="$("$PY" -c 'import pyspark; print(pyspark.__version__)' 2>/dev/null || true)"
if [ "$have" != "$PYSPARK_VERSION" ]; then
    log "pyspark reports '${have:-none}': reinstalling pyspark==$PYSPARK_VERSION (no deps)"
    "$PY" -m pip install -q --force-reinstall --no-deps "pyspark==$PYSPARK_VERSION"
    have="$("$PY" -c 'import pyspark; print(pyspark.__version__)')"
    [ "$have" = "$PYSPARK_VERSION" ] || { log "ERROR: pyspark is still $have"; exit 1; }
fi
log "ok (pyspark $have)"
