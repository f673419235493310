"""Packaging: dependency ranges that let users upgrade, psycopg only in the `postgres` extra, a
deliberate pandas range, the LICENSE, the CHANGELOG, the documentation URL, one `pyspark`, and
a wheel that holds the product only (not the test harness of ``tests/harness``).

The fresh-virtualenv install itself (pip resolving these ranges, `airflow providers list`) is
`bash scripts/check-package.sh` (about 90 s with a warm pip cache; not part of the suite), and
`tests/test_packaging_extras.py` (what each Spark extra resolves to; the wheel into an existing
Airflow with `TRIDENT_PACKAGING=1`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from airflow_trident import __version__
from airflow_trident.errors import ConfigurationError
from airflow_trident.get_provider_info import DOCUMENTATION_URL, get_provider_info

ROOT = Path(__file__).resolve().parents[1]
HARNESS = [
    "airflow",
    "ui",
    "scheduler",
    "scheduler_faults",
    "servers",
    "connect",
    "spark_cluster",
    "status",
    "sinks",
    "commit_faults",
    "file_log",
    "topologies",
    "source_chaos",
]
"""Modules of the test harness that moved from ``airflow_trident/testing`` to ``tests/harness``."""
# target: a Maven build of jvm/functions (the wheel carries the committed jar, not its own)
_NOT_SOURCES = (
    ".git", ".venv", ".work", "build", "*.egg-info", "__pycache__", ".*_cache", "target"
)  # fmt: skip
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
REQUIREMENTS = {Requirement(r).name.lower(): Requirement(r) for r in PROJECT["dependencies"]}
SPARK_EXTRA = {
    Requirement(r).name.lower(): Requirement(r) for r in PROJECT["optional-dependencies"]["spark"]
}


@pytest.mark.parametrize(
    ("name", "allowed", "refused"),
    [
        ("apache-airflow", ["3.3.2", "3.4.0", "3.9.1"], ["3.2.0", "4.0.0"]),
        ("apache-airflow-providers-apache-spark", ["5.6.0", "6.3.4", "6.9.0"], ["5.4.0", "7.0.0"]),
        # PySpark 4.3 needs pandas >= 2.2 and warns it does not fully support pandas 3
        ("pandas", ["2.2.0", "2.3.3"], ["2.1.4", "3.0.0"]),
    ],
)
def test_dependency_ranges_allow_upgrades_within_the_major(
    name: str, allowed: list[str], refused: list[str]
) -> None:
    specifier = REQUIREMENTS[name].specifier
    assert [v for v in allowed if v not in specifier] == []
    assert [v for v in refused if v in specifier] == []


def test_the_spark_extra_is_pyspark_with_the_providers_5x_line() -> None:
    # the provider's 6.x line requires pyspark-client, a second owner of pyspark/
    # (docs/installation.md, "Which pyspark"); the spark extra keeps pyspark's own
    assert "pyspark" not in REQUIREMENTS
    # 4.1: the newest Spark with every connector jar on Maven Central, Iceberg's runtime
    # included (docs/jvm.md, "The PySpark pin")
    assert "4.1.1" in SPARK_EXTRA["pyspark"].specifier
    assert "4.2.0" not in SPARK_EXTRA["pyspark"].specifier
    provider = SPARK_EXTRA["apache-airflow-providers-apache-spark"].specifier
    assert ("5.6.0" in provider, "6.0.0" in provider) == (True, False)


def test_psycopg_is_only_in_the_postgres_extra() -> None:
    assert "psycopg" not in REQUIREMENTS
    extra = [Requirement(r) for r in PROJECT["optional-dependencies"]["postgres"]]
    assert [r.name for r in extra] == ["psycopg"]
    assert "binary" in extra[0].extras


def test_sqlite_state_runs_without_psycopg() -> None:
    # Given an interpreter where psycopg cannot be imported
    script = (
        "import sys, tempfile, os; sys.modules['psycopg'] = None\n"
        "os.environ['TRIDENT_HOME'] = tempfile.mkdtemp()\n"
        "os.environ.pop('TRIDENT_STATE_URL', None)  # the default: SQLite under TRIDENT_HOME\n"
        "from airflow_trident.examples.topologies import word_count\n"
        "from airflow_trident.batch.runner import LocalRunner\n"
        "print(LocalRunner(word_count).run_batch().committed)\n"
    )
    # When a word-count batch commits into the default SQLite state
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    # Then it works
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "True"


def test_license_is_the_apache_2_text() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert PROJECT["license"] == "Apache-2.0"
    assert "Apache License\n                        Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_changelog_has_this_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## {__version__}" in changelog


def test_documentation_url_is_the_same_in_both_places() -> None:
    # Airflow 3.3 takes it from the distribution's Project-URL "Documentation"
    assert PROJECT["urls"]["Documentation"] == DOCUMENTATION_URL
    assert get_provider_info()["documentation-url"] == DOCUMENTATION_URL


def test_the_pyspark_package_is_the_pyspark_distribution() -> None:
    # The environment under test has pyspark's own files (scripts/bootstrap.sh reinstalls them)
    from airflow_trident.runtime.spark.session import check_pyspark_files

    check_pyspark_files()


def test_overwritten_pyspark_files_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyspark

    from airflow_trident.runtime.spark.session import check_pyspark_files

    monkeypatch.setattr(pyspark, "__version__", "4.1.0")
    with pytest.raises(ConfigurationError, match="--force-reinstall --no-deps pyspark=="):
        check_pyspark_files()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The wheel ``pip wheel`` builds from a copy of the tree (as ``scripts/check-package.sh``
    installs it; pip would leave ``build/`` behind in the tree itself). A few seconds."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*_NOT_SOURCES))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work / "out"),
         str(source)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = (work / "out").glob("airflow_trident-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_holds_the_product_not_the_test_harness(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    # the public testing API and the DAGs' example topologies ship
    for kept in ("testing/faults.py", "testing/fault_points.py", "testing/schedule.py",
                 "testing/fault_topology.py", "testing/forked.py", "examples/topologies.py",
                 "examples/file_log.py", "py.typed"):  # fmt: skip
        assert f"airflow_trident/{kept}" in names
    # the harness does not, nor the main job's runner, nor the dead word count
    moved = [f"airflow_trident/testing/{m}.py" for m in HARNESS] + [
        f"airflow_trident/examples/{m}.py" for m in ("run_dag", "ui", "word_count")
    ]
    assert sorted(names & set(moved)) == []
    assert [n for n in names if n.startswith(("tests/", "bench/", "dags/"))] == []


def test_the_wheel_carries_the_committed_functions_jar_byte_for_byte(
    wheel: zipfile.ZipFile,
) -> None:
    # Given the wheel of a copy of the tree: it carries the committed jar as it is (no build
    # step of the machine's: tests/test_jvm_functions_build.py checks the jar against its sources)
    import io

    carried = wheel.read("airflow_trident/jars/airflow-trident-functions.jar")
    committed = ROOT / "airflow_trident" / "jars" / "airflow-trident-functions.jar"
    assert carried == committed.read_bytes()
    jar = zipfile.ZipFile(io.BytesIO(carried))
    # Then it holds the function's class, not Spark's interface it was compiled against, and
    # no Java source ships
    assert "io/github/airflowtrident/spark/StrSplit.class" in jar.namelist()
    assert [n for n in jar.namelist() if n.startswith("org/")] == []
    assert [n for n in wheel.namelist() if n.endswith(".java") or n.startswith("jvm/")] == []


def test_the_shipped_testing_and_examples_import_neither_each_other_nor_the_harness(
    wheel: zipfile.ZipFile,
) -> None:
    shipped = [
        n
        for n in wheel.namelist()
        if n.startswith(("airflow_trident/testing/", "airflow_trident/examples/"))
    ]
    for name in shipped:
        text = wheel.read(name).decode()
        other = "examples" if "/testing/" in name else "testing"
        imports = [
            line for line in text.splitlines() if line.lstrip().startswith(("from ", "import "))
        ]
        assert [i for i in imports if f"airflow_trident.{other}" in i or "tests." in i] == [], name
