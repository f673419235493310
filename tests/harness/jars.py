"""The project's JVM jars (``jvm/pom.xml``, resolved by ``scripts/jars.sh`` into
``.work/jars/<group>/``) for the Spark sessions, Connect servers and Kafka brokers the tests
start (docs/jvm.md).

Spark gets the ``spark`` group through ``spark.jars``: the session-wide local session
(``tests/conftest.py``), every :func:`~tests.harness.connect.running_connect_server`, and the
``spark-submit`` runs of a test that passes :func:`spark_jars_csv` (``--jars``, or the
provider's ``[trident] spark_jars``). A user's deployment names its own jars the same ways
(docs/jvm.md, "Your deployment's jars").

>>> group_dir("spark").parts[-3:]
('.work', 'jars', 'spark')
>>> all(path.endswith(".jar") for path in jars("spark"))
True
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.harness import PROJECT_ROOT

__all__ = [
    "GROUPS",
    "group_dir",
    "jar",
    "jars",
    "require_jars",
    "spark_jars_conf",
    "spark_jars_csv",
]

GROUPS = ("spark", "kafka", "delta", "iceberg")
"""The profiles of ``jvm/pom.xml``: one directory each, never mixed on a class path."""


def group_dir(group: str) -> Path:
    """``.work/jars/<group>`` (``TRIDENT_JARS_DIR`` moves ``.work/jars``)."""
    base = os.environ.get("TRIDENT_JARS_DIR") or PROJECT_ROOT / ".work" / "jars"
    return Path(base) / group


def jars(group: str) -> list[str]:
    """The resolved jars of ``group``, sorted; ``[]`` when ``scripts/jars.sh`` has not
    resolved it (a Spark without them still runs everything but Kafka and JDBC reads)."""
    directory = group_dir(group)
    if not any(directory.glob(".resolved-*")):
        return []
    return sorted(str(path) for path in directory.glob("*.jar"))


def require_jars(group: str) -> list[str]:
    """:func:`jars` of ``group``, resolving it first (``bash scripts/jars.sh <group>``: a
    no-op once done) if needed.

    Raises
    ------
    RuntimeError
        If the script fails (its output's tail says why: no ``mvn``, no network...).
    """
    found = jars(group)
    if found:
        return found
    done = subprocess.run(
        ["bash", str(PROJECT_ROOT / "scripts" / "jars.sh"), group],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    found = jars(group)
    if done.returncode != 0 or not found:
        msg = f"`bash scripts/jars.sh {group}` exited {done.returncode}:\n{done.stderr[-2000:]}"
        raise RuntimeError(msg)
    return found


def jar(group: str, artifact: str) -> str:
    """The one jar of ``group`` whose file name starts with ``<artifact>-`` (e.g.
    ``jar("spark", "postgresql")``).

    Raises
    ------
    LookupError
        If there is none, or more than one.
    """
    matches = [p for p in require_jars(group) if Path(p).name.startswith(f"{artifact}-")]
    if len(matches) != 1:
        msg = f"{len(matches)} jars of {artifact!r} in {group_dir(group)}: {matches}"
        raise LookupError(msg)
    return matches[0]


def spark_jars_csv() -> str:
    """The ``spark`` group as Spark's ``spark.jars`` / ``--jars`` value (comma-separated)."""
    return ",".join(jars("spark"))


def spark_jars_conf(given: str | None = None) -> dict[str, str]:
    """``{"spark.jars": ...}``: the ``spark`` group, then ``given`` (a caller's own list);
    ``{}`` when there is neither."""
    value = ",".join(filter(None, [spark_jars_csv(), given or ""]))
    return {"spark.jars": value} if value else {}
