"""Build airflow-trident's JVM functions into the jar the package carries (docs/jvm.md,
"The functions jar").

    python jvm/functions/build.py [JAR]

(default ``JAR``: ``airflow_trident/jars/airflow-trident-functions.jar``)

Run by ``setup.py`` (every wheel and editable build) and by ``scripts/bootstrap.sh`` (each run: a
no-op while the jar's manifest names the digest of the sources). Standard library only: the build
runs in pip's isolated build environment, where neither Spark nor Maven is. ``javac`` (JDK 17 or
later) compiles against ``stubs/``, the one Spark interface the functions implement, which is left
out of the jar: Spark's own class is the one loaded at run time. The jar is reproducible (sorted
entries, fixed times). Without ``javac`` no jar is built and Spark splits words with its regular
expression (the same words, slower).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "src"
STUBS = HERE / "stubs"
DEFAULT_JAR = HERE.parent.parent / "airflow_trident" / "jars" / "airflow-trident-functions.jar"
RELEASE = "17"  # Spark 4's floor
_DIGEST = "Source-Digest"
_TIME = (2020, 1, 1, 0, 0, 0)


def source_digest() -> str:
    """sha256 of the sources and stubs (their paths and bytes) and the target release."""
    digest = hashlib.sha256(RELEASE.encode())
    for path in sorted([*SOURCES.rglob("*.java"), *STUBS.rglob("*.java")]):
        digest.update(path.relative_to(HERE).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def built_digest(jar: Path) -> str | None:
    """The digest ``jar``'s manifest names, or ``None`` (no jar, or not one of ours)."""
    try:
        with zipfile.ZipFile(jar) as archive:
            manifest = archive.read("META-INF/MANIFEST.MF").decode()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    for line in manifest.splitlines():
        key, _, value = line.partition(": ")
        if key == _DIGEST:
            return value.strip()
    return None


def build(jar: Path = DEFAULT_JAR) -> bool:
    """Build ``jar`` unless it is up to date; whether a jar of the current sources is there.

    ``False`` (with a line on stderr) when ``javac`` is missing or fails: the package then
    carries no jar.
    """
    digest = source_digest()
    if built_digest(jar) == digest:
        return True
    javac = shutil.which("javac")
    if javac is None:
        print(f"[jvm-functions] no javac: {jar.name} not built (Spark splits by regex)",
              file=sys.stderr)  # fmt: skip
        return False
    sources = sorted(str(p) for p in SOURCES.rglob("*.java"))
    with tempfile.TemporaryDirectory() as tmp:
        classes = Path(tmp)
        command = [javac, "--release", RELEASE, "-nowarn", "-d", str(classes),
                   "-sourcepath", f"{SOURCES}{os.pathsep}{STUBS}", *sources]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"[jvm-functions] javac failed:\n{done.stderr}", file=sys.stderr)
            return False
        stubbed = {p.relative_to(STUBS).with_suffix(".class").as_posix()
                   for p in STUBS.rglob("*.java")}  # fmt: skip
        entries = sorted(
            p for p in classes.rglob("*.class") if p.relative_to(classes).as_posix() not in stubbed
        )
        manifest = (f"Manifest-Version: 1.0\r\nCreated-By: jvm/functions/build.py\r\n"
                    f"{_DIGEST}: {digest}\r\n\r\n")  # fmt: skip
        jar.parent.mkdir(parents=True, exist_ok=True)
        partial = jar.with_suffix(".jar.tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(zipfile.ZipInfo("META-INF/MANIFEST.MF", _TIME), manifest)
            for path in entries:
                info = zipfile.ZipInfo(path.relative_to(classes).as_posix(), _TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, path.read_bytes())
        partial.replace(jar)
    print(f"[jvm-functions] built {jar} ({len(entries)} classes, sources {digest})",
          file=sys.stderr)  # fmt: skip
    return True


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_JAR
    sys.exit(0 if build(target) else 1)
