"""Finding a topology by reference (``package.module:attribute``), as the Spark job and the
Airflow tasks do: the topology is shipped by module reference, never pickled.

>>> load_topology("airflow_trident.examples.topologies:word_count").name
'word_count'
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

from airflow_trident.errors import ConfigurationError
from airflow_trident.topology import TridentTopology

__all__ = ["cached_topology", "load_topology", "user_code_digest"]


def load_topology(reference: str) -> TridentTopology:
    """Import ``module:attribute``; the attribute is a topology or a function returning one.

    Raises
    ------
    ConfigurationError
        If the reference is malformed, cannot be imported, or is not a topology.
    """
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        msg = f"topology reference {reference!r} must look like 'package.module:attribute'"
        raise ConfigurationError(msg)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        msg = f"cannot import module {module_name!r} of topology {reference!r}: {exc}"
        raise ConfigurationError(msg) from exc
    found: Any = getattr(module, attribute, None)
    if found is None:
        msg = f"module {module_name!r} has no attribute {attribute!r} (topology {reference!r})"
        raise ConfigurationError(msg)
    if callable(found) and not isinstance(found, TridentTopology):
        found = found()
    if not isinstance(found, TridentTopology):
        msg = f"{reference!r} is {type(found).__name__}, not a TridentTopology"
        raise ConfigurationError(msg)
    return found


@functools.lru_cache(maxsize=8)
def cached_topology(reference: str) -> TridentTopology:
    """:func:`load_topology`, once per process (Spark's Python workers are reused across
    tasks: the topology and its state factories' engines are built once)."""
    return load_topology(reference)


def _installation_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    kinds = ("stdlib", "purelib", "platlib", "platstdlib")
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, *(paths[k] for k in kinds)}
    return tuple({f"{p.rstrip('/')}/" for d in dirs if d for p in (d, str(Path(d).resolve()))})


def user_code_digest() -> str:
    """A digest of the source of every module this process imported from outside the Python
    installation (the DAG files, topologies, the user's packages; not the standard library or
    ``site-packages``): what Spark's reused Python workers would run stale if it changed.

    >>> len(user_code_digest())
    16
    """
    installation = _installation_dirs()
    digest = hashlib.sha256()
    for name, module in sorted(list(sys.modules.items()), key=lambda item: item[0]):
        file = getattr(module, "__file__", None)
        if not file or not file.endswith(".py"):
            continue
        if file.startswith(installation) or str(Path(file).resolve()).startswith(installation):
            continue
        digest.update(name.encode() + b"\0" + _source_digest(file) + b"\0")
    return digest.hexdigest()[:16]


_SOURCES: dict[str, tuple[tuple[int, int], bytes]] = {}
"""A source file's digest by its (mtime_ns, size): read again only once it changed. A file
changed in the last 2 s is always read (two writes within one clock tick share an mtime)."""


def _source_digest(file: str) -> bytes:
    try:
        stat = os.stat(file)
        stamp = (stat.st_mtime_ns, stat.st_size)
        known = _SOURCES.get(file)
        if known is not None and known[0] == stamp:
            return known[1]
        value = hashlib.sha256(Path(file).read_bytes()).digest()
    except OSError:
        return b"missing"
    if time.time_ns() - stat.st_mtime_ns > 2_000_000_000:
        _SOURCES[file] = (stamp, value)
    return value
