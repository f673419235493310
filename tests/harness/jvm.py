"""The JIT of the tests' own Spark JVMs: C1 only (``-XX:TieredStopAtLevel=1``).

A test's Spark JVM lives for seconds to minutes over tiny data, and most of its CPU goes to
warming up: HotSpot's C2 compiler recompiles the hot code of Spark's planner, Janino and Netty
while the test waits. With C1 only, a ``local[2]`` session plus 45 small queries took 33-40 s
instead of 62-72 s on the 2-core machine of 2026-12-01 (docs/testing.md). The benchmarks
(``bench/``) keep HotSpot's default, as a production job would.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["QUICK_JIT", "quick_jit_conf"]

QUICK_JIT = "-XX:TieredStopAtLevel=1"


def quick_jit_conf(conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """``conf`` with :data:`QUICK_JIT` added to the driver's Java options (the JVM of a
    ``local[N]`` session or of a local Connect server is the driver).

    >>> quick_jit_conf({"spark.driver.extraJavaOptions": "-Dx=1", "spark.jars": "a.jar"})
    {'spark.driver.extraJavaOptions': '-Dx=1 -XX:TieredStopAtLevel=1', 'spark.jars': 'a.jar'}
    """
    merged = dict(conf or {})
    options = merged.get("spark.driver.extraJavaOptions", "")
    if QUICK_JIT not in options.split():
        merged["spark.driver.extraJavaOptions"] = f"{options} {QUICK_JIT}".strip()
    return merged
