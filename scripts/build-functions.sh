#!/usr/bin/env bash
# Rebuild the package's JVM functions jar from jvm/functions/ with Maven (against Spark's own
# spark-sql-api, reproducible entry times) and put it where the package carries it, committed:
# airflow_trident/jars/airflow-trident-functions.jar (docs/jvm.md, "The functions jar"). Run it
# after changing jvm/functions/src; tests/test_jvm_functions_build.py fails until you do.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mvn -q -f jvm/functions/pom.xml package
cp jvm/functions/target/airflow-trident-functions.jar airflow_trident/jars/
echo "[functions] airflow_trident/jars/airflow-trident-functions.jar: $(sha256sum \
    airflow_trident/jars/airflow-trident-functions.jar | cut -c1-16)" >&2
