"""The build step pyproject.toml cannot declare: the JVM functions' jar (jvm/functions/build.py),
built before the package's files are copied so that the wheel carries it as package data
(``airflow_trident/jars/``; an editable install finds it in the source tree). Everything else
about the package is in pyproject.toml."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

_BUILDER = Path(__file__).resolve().parent / "jvm" / "functions" / "build.py"


class BuildPyWithFunctions(build_py):
    """``build_py`` that first builds ``airflow_trident/jars/airflow-trident-functions.jar``
    (nothing when ``javac`` is missing: Spark then splits by regex)."""

    def run(self) -> None:
        spec = importlib.util.spec_from_file_location("trident_jvm_functions", _BUILDER)
        if spec is not None and spec.loader is not None and _BUILDER.exists():
            builder = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(builder)
            builder.build()
        super().run()


setup(cmdclass={"build_py": BuildPyWithFunctions})
