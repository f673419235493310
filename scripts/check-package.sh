#!/usr/bin/env bash
# Install the working tree into a fresh virtualenv, as a user would (`pip install
# 'airflow-trident[spark,postgres]'`), and check what the install left: one pyspark (its Python
# files are the pyspark distribution's, with no reinstall), the provider seen by
# `airflow providers list`, the docs URL in its metadata. ~90 s with a warm pip cache.
# Usage: bash scripts/check-package.sh [VENV_DIR]   (default /tmp/trident-pkgcheck)
set -euo pipefail
# scripts/env.sh puts the source tree on PYTHONPATH (for tests/harness): it would shadow the
# installed package under test.
unset PYTHONPATH
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-/tmp/trident-pkgcheck}"
SRC="$(mktemp -d)"
trap 'rm -rf "$SRC"' EXIT
say() { echo "[check-package] $*" >&2; }

# A copy of the tree: pip builds a local directory in place, which would leave build/ behind.
tar -C "$ROOT" --exclude=./.venv --exclude=./.work --exclude=./.git --exclude='*.egg-info' \
    --exclude=./build --exclude=__pycache__ -cf - . | tar -xf - -C "$SRC"
rm -rf "$VENV"
python3 -m venv "$VENV"
say "pip install '.[spark,postgres]' into $VENV"
"$VENV/bin/pip" install -q "$SRC[spark,postgres]" 2>&1 | grep -v '^WARNING: Location' || true
"$VENV/bin/pip" check

version() { "$VENV/bin/python" -c 'import pyspark; print(pyspark.__version__)'; }
dist="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("pyspark"))')"
say "pyspark distribution $dist; the pyspark package's files say $(version)"
say "distributions listing pyspark/ files: $("$VENV/bin/pip" show -f pyspark pyspark-client \
    | awk '/^Name:/{n=$2} /^  pyspark\/__init__.py/{print n}' | paste -sd' ')"
[ "$(version)" = "$dist" ] || { say "FAIL: pyspark's files are $(version), not $dist"; exit 1; }

home="$(mktemp -d)"
listed="$(cd /tmp && AIRFLOW_HOME="$home" AIRFLOW__CORE__LOAD_EXAMPLES=False \
    "$VENV/bin/airflow" providers list -o json 2>/dev/null)"
rm -rf "$home"
echo "$listed" | "$VENV/bin/python" -c '
import json, sys
found = [p for p in json.load(sys.stdin) if p["package_name"] == "airflow-trident"]
assert found, "airflow-trident is not in `airflow providers list`"
print("[check-package] airflow providers list:", found[0]["package_name"], found[0]["version"],
      file=sys.stderr)'
(cd /tmp && "$VENV/bin/python" -c '
import importlib.metadata as m
urls = dict(u.split(", ", 1) for u in m.metadata("airflow-trident").get_all("Project-URL"))
print("[check-package] documentation:", urls["Documentation"])')
say "OK"
