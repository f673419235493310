"""The JVM dependencies in one place (docs/jvm.md): ``jvm/pom.xml`` pins the Spark that the
pinned pyspark is, ``scripts/jars.sh`` resolves each profile into a directory of its own, and
the connector jars Spark gets never repeat a jar pyspark ships."""

from __future__ import annotations

import re
import subprocess
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.harness.jars import GROUPS, group_dir, jars

ROOT = Path(__file__).resolve().parents[1]
POM = ROOT / "jvm" / "pom.xml"
NS = {"m": "http://maven.apache.org/POM/4.0.0"}
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _properties() -> dict[str, str]:
    props = ET.parse(POM).getroot().find("m:properties", NS)
    assert props is not None
    return {child.tag.split("}")[1]: (child.text or "") for child in props}


def _profiles() -> dict[str, list[str]]:
    """Each profile's dependencies as ``group:artifact:version`` (properties substituted)."""
    props = _properties()
    expand = lambda text: re.sub(r"\$\{([^}]+)\}", lambda m: props[m.group(1)], text or "")  # noqa: E731
    found: dict[str, list[str]] = {}
    for profile in ET.parse(POM).getroot().iterfind("m:profiles/m:profile", NS):
        name = profile.findtext("m:id", namespaces=NS) or ""
        keys = ("groupId", "artifactId", "version")
        found[name] = [
            ":".join(expand(dep.findtext(f"m:{k}", namespaces=NS)) for k in keys)
            for dep in profile.iterfind("m:dependencies/m:dependency", NS)
        ]
    return found


def _pyspark_jars() -> set[str]:
    import pyspark

    return {p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}


def _artifact(jar_name: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``."""
    return re.sub(r"-\d[\w.\-]*\.jar$", "", jar_name)


def test_the_pinned_spark_is_the_pinned_pyspark_everywhere() -> None:
    import pyspark

    spark = _properties()["spark.version"]
    dev = {Requirement(r).name: Requirement(r) for r in PROJECT["optional-dependencies"]["dev"]}
    extra = {Requirement(r).name: Requirement(r) for r in PROJECT["optional-dependencies"]["spark"]}
    bootstrap = (ROOT / "scripts" / "bootstrap.sh").read_text()
    # the dev venv pins exactly the pom's Spark, bootstrap.sh repairs to it, the wheel's extra
    # allows it, and it is what is installed here
    assert str(dev["pyspark"].specifier) == f"=={spark}"
    assert f"\nPYSPARK_VERSION={spark}\n" in bootstrap
    assert spark in extra["pyspark"].specifier
    assert pyspark.__version__ == spark
    assert f"spark-sql-kafka-0-10_2.13:{spark}" in " ".join(_profiles()["spark"])


def test_each_profile_is_a_group_of_the_script_and_the_harness() -> None:
    script = (ROOT / "scripts" / "jars.sh").read_text()
    assert sorted(_profiles()) == sorted(GROUPS)
    assert "spark|kafka|delta|iceberg) resolve" in script
    # bootstrap resolves Spark's connectors (every command) and, beside uv, the broker's jars
    # when services.sh will start the broker (the test command, the tiers; not the main job);
    # services.sh resolves them itself wherever it starts the broker without them
    bootstrap = (ROOT / "scripts" / "bootstrap.sh").read_text()
    assert "groups=(spark)" in bootstrap
    assert "groups+=(kafka)" in bootstrap
    assert 'bash scripts/jars.sh "${groups[@]}" &' in bootstrap
    services = (ROOT / "scripts" / "services.sh").read_text()
    assert 'bash "$ROOT/scripts/jars.sh" kafka' in services.partition("kafka_start() {")[2]


def test_the_spark_group_adds_only_what_pyspark_does_not_ship() -> None:
    found = [Path(j).name for j in jars("spark")]
    if not found:
        pytest.skip("the spark jars are not resolved: bash scripts/jars.sh spark")
    spark = _properties()["spark.version"]
    clients = _properties()["spark.kafka-clients.version"]
    assert {f"spark-sql-kafka-0-10_2.13-{spark}.jar", f"kafka-clients-{clients}.jar"} <= set(found)
    # one jar per listed artifact (copy-dependencies -DexcludeTransitive), none also in pyspark
    assert len(found) == len(_profiles()["spark"])
    shipped = {_artifact(name) for name in _pyspark_jars()}
    assert [name for name in found if _artifact(name) in shipped] == []


def test_the_broker_jars_stay_out_of_sparks_directory() -> None:
    if not jars("kafka"):
        pytest.skip("the kafka jars are not resolved: bash scripts/jars.sh kafka")
    broker = {Path(j).name for j in jars("kafka")}
    assert f"kafka_2.13-{_properties()['kafka.version']}.jar" in broker
    assert not {Path(j).name for j in jars("spark")} & broker
    assert group_dir("kafka") != group_dir("spark")


def test_a_second_run_is_a_no_op_without_maven(tmp_path: Path) -> None:
    if not jars("spark"):
        pytest.skip("the spark jars are not resolved: bash scripts/jars.sh spark")
    # Given resolved jars, When the script runs again with no mvn on PATH
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "jars.sh"), "spark"],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": "/usr/bin:/bin", "TRIDENT_JARS_DIR": str(group_dir("spark").parent)},
    )  # fmt: skip
    listed = subprocess.run(
        ["bash", str(ROOT / "scripts" / "jars.sh"), "list", "spark"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()  # fmt: skip
    # Then it says so (the stamp of the pom's hash), and lists the same jars for --jars
    assert done.returncode == 0, done.stderr
    assert "spark: up to date" in done.stderr
    assert listed.split(",") == jars("spark")


@pytest.mark.timeout(900)  # the archive's training run, when this test makes it: ~60 s of CPU
def test_the_tests_spark_jvms_map_spark_classes_from_the_class_archive(tmp_path: Path) -> None:
    """The options the tests' JVMs get (``SPARK_SUBMIT_OPTS``, tests/conftest.py) map Spark's
    classes from the checkout's CDS archive: a ``spark-submit`` loads a class of Spark's SQL
    from the archive's top layer, not from its jar."""
    import os
    import sys

    from tests.harness.class_archive import archive_options, archive_path, ensure_class_archive
    from tests.harness.jvm import QUICK_JIT

    archive = archive_path()
    if archive is None:
        pytest.skip("no Java or no PySpark")
    assert ensure_class_archive(archive, jvm_options=QUICK_JIT), archive.with_suffix(".failed")
    assert archive_options(archive) in os.environ["SPARK_SUBMIT_OPTS"]
    app = tmp_path / "app.py"
    app.write_text(
        "from pyspark.sql import SparkSession\n"
        "s = SparkSession.builder.getOrCreate()\n"
        "assert s.range(3).count() == 3\n"
        "s.stop()\n"
    )
    opts = f"{os.environ['SPARK_SUBMIT_OPTS']} -Xlog:class+load=info:file={tmp_path / 'load.log'}"
    done = subprocess.run(
        [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[1]", str(app)],
        env={**os.environ, "SPARK_SUBMIT_OPTS": opts, "PYSPARK_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loads = (tmp_path / "load.log").read_text()
    line = next(x for x in loads.splitlines() if "org.apache.spark.sql.SparkSession " in x)
    assert "shared objects file (top)" in line, line
