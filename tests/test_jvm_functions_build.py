"""The package's JVM functions jar is the same bytes in every wheel of a commit: it is committed
(``airflow_trident/jars/airflow-trident-functions.jar``), and these tests build it again with
Maven from ``jvm/functions/`` -- against Spark's own ``spark-sql-api`` artifact, no hand copy of
its interface -- and fail when the committed jar is not what the sources build (then run
``bash scripts/build-functions.sh`` and commit the jar). Maven resolves from Maven Central once
(~10 s), then from its local repository (~6 s a build)."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.harness import PROJECT_ROOT

JAR = PROJECT_ROOT / "airflow_trident" / "jars" / "airflow-trident-functions.jar"

pytestmark = pytest.mark.integration


def _built(tmp: Path) -> bytes:
    """The jar Maven builds from a copy of ``jvm/`` (the checkout's own target/ untouched)."""
    work = tmp / "jvm"
    work.mkdir(parents=True)
    shutil.copytree(PROJECT_ROOT / "jvm" / "functions", work / "functions",
                    ignore=shutil.ignore_patterns("target"))  # fmt: skip
    shutil.copy(PROJECT_ROOT / "jvm" / "pom.xml", work / "pom.xml")
    mvn = shutil.which("mvn")
    assert mvn is not None, "Maven is missing: scripts/bootstrap.sh installs it"
    done = subprocess.run(
        [mvn, "-q", "-B", "-f", str(work / "functions" / "pom.xml"), "package"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return (work / "functions" / "target" / "airflow-trident-functions.jar").read_bytes()


def test_the_committed_jar_is_what_maven_builds_from_the_sources(tmp_path: Path) -> None:
    # Given the committed jar and the sources
    assert JAR.is_file()
    # When Maven builds them twice
    first = _built(tmp_path / "a")
    second = _built(tmp_path / "b")
    # Then the builds are the same bytes, and those of the committed jar
    assert first == second
    assert first == JAR.read_bytes(), (
        "airflow_trident/jars/airflow-trident-functions.jar is not what jvm/functions builds: "
        "run `bash scripts/build-functions.sh` and commit the jar"
    )


def test_the_jar_holds_the_function_and_not_spark_s_interface() -> None:
    names = zipfile.ZipFile(JAR).namelist()
    assert "io/github/airflowtrident/spark/StrSplit.class" in names
    assert [n for n in names if n.startswith("org/")] == []
    assert [n for n in names if n.endswith(".java")] == []
