"""A class-data-sharing archive of Spark's classes for the tests' JVMs (HotSpot's AppCDS).

Every JVM ``spark-submit`` starts for a test (the shared local session, a DAG run's Spark job,
a Connect server) loads and verifies some ten thousand of Spark's classes from its jars before
it runs anything. A dynamic CDS archive (``-XX:ArchiveClassesAtExit``, JDK 13+) keeps them
parsed and verified in one file that each later JVM maps: on the 2-core machine of 2026-12-03 a
``spark-submit`` of a small query took 11.2-11.4 s of user CPU with it against 17.9 s without
(docs/testing.md). It changes how classes are loaded, not what runs.

:func:`ensure_class_archive` makes the archive once per checkout, under ``.work/jvm/``
(:func:`archive_path`), by one training ``spark-submit`` of
:mod:`tests.harness.class_archive_training` (~66 s of CPU, ~180 MB); its name carries a digest
of the JVM and of Spark's jars, so a new PySpark or JDK makes a new one. ``tests/conftest.py``
starts it in the background (:func:`start_training`) and puts :func:`archive_options` in
``SPARK_SUBMIT_OPTS``: a JVM that starts before the archive is whole runs without it. A JVM
whose class path differs from the training run's (``--driver-class-path``, another
``SPARK_HOME``) cannot map the archive and runs as without it; ``-Xlog:cds=off`` keeps the
JVM's notice of that (printed on stdout) out of the tests' output.

>>> archive_options(Path("/w/spark.jsa")).split()[0]
'-XX:SharedArchiveFile=/w/spark.jsa'
>>> archive_options(None)
''
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.harness import PROJECT_ROOT, with_project_path

__all__ = ["archive_options", "archive_path", "ensure_class_archive", "start_training"]

_SILENT = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def archive_options(archive: Path | None) -> str:
    """The JVM options that map ``archive`` (none for ``None``)."""
    return f"-XX:SharedArchiveFile={archive} {_SILENT}" if archive else ""


def _spark_jars() -> Path | None:
    try:
        import pyspark
    except ImportError:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    return jars if jars.is_dir() else None


def _java_version(java: str) -> str | None:
    try:
        done = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stderr if done.returncode == 0 else None


def _digest(java_version: str, jars: Path) -> str:
    h = hashlib.sha256(java_version.encode())
    for jar in sorted(jars.iterdir()):
        stat = jar.stat()
        h.update(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def archive_path(work: Path | None = None) -> Path | None:
    """Where this checkout's archive of its Spark and JVM is (made or not); ``None`` without
    Java or PySpark."""
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    jars = _spark_jars()
    version = _java_version(java) if java else None
    if jars is None or version is None:
        return None
    return (work or PROJECT_ROOT / ".work" / "jvm") / f"spark-classes-{_digest(version, jars)}.jsa"


def ensure_class_archive(archive: Path, *, jvm_options: str = "") -> bool:
    """Make ``archive`` by the training run unless it exists (other processes wait for one
    training run); whether it exists after. A failed training is not tried again (its
    ``.failed`` file stays beside the archive).

    Parameters
    ----------
    archive:
        The archive's path (:func:`archive_path`).
    jvm_options:
        More JVM options of the training run (the tests' JIT options).
    """
    archive.parent.mkdir(parents=True, exist_ok=True)
    failed = archive.with_suffix(".failed")
    with open(archive.parent / "archive.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if archive.exists() or failed.exists():
            return archive.exists()
        partial = archive.with_suffix(".partial")
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        submit = Path(sys.executable).parent / "spark-submit"
        env = with_project_path({
            **os.environ,
            "SPARK_SUBMIT_OPTS": f"{jvm_options} -XX:ArchiveClassesAtExit={partial} {_SILENT}",
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
        })  # fmt: skip
        script = Path(__file__).with_name("class_archive_training.py")
        argv = [str(submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false"]
        try:
            done = subprocess.run([*argv, str(script)], env=env, capture_output=True,
                                  timeout=600, check=False)  # fmt: skip
            ok = done.returncode == 0 and partial.exists()
            output = done.stderr[-4000:].decode(errors="replace")
        except (OSError, subprocess.TimeoutExpired) as error:
            ok, output = False, str(error)
        if not ok:
            failed.write_text(output)
            return False
        partial.rename(archive)  # whole or not at all: JVMs that start meanwhile run without
        return True


def start_training(archive: Path, *, jvm_options: str = "") -> subprocess.Popen[bytes] | None:
    """:func:`ensure_class_archive` in a process of its own, unless the archive exists: the
    tests start meanwhile, their first JVMs without it (wait for the process before exiting)."""
    if archive.exists() or archive.with_suffix(".failed").exists():
        return None
    argv = [sys.executable, "-m", __name__, str(archive), jvm_options]
    return subprocess.Popen(  # the interpreter running this module
        argv, env=with_project_path(os.environ), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(0 if ensure_class_archive(Path(sys.argv[1]), jvm_options=sys.argv[2]) else 1)
