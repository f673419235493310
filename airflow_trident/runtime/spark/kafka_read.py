"""Deprecated path: Spark's Kafka reader moved to :mod:`airflow_trident.runtime.spark.readers.kafka`
(issue 54: one reader per kind of read, behind one protocol); this path warns and goes away in
0.2.0."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

_NEW = "airflow_trident.runtime.spark.readers.kafka"
_RENAMED = {  # the kinds' Spark and Arrow types: one table for every reader
    "ARROW": ("airflow_trident.runtime.spark.readers.base", "ARROW_TYPES"),
    "SQL": ("airflow_trident.runtime.spark.readers.base", "SQL_TYPES"),
}


def __getattr__(name: str) -> Any:
    where, new = _RENAMED.get(name, (_NEW, name))
    found = None if name.startswith("__") else getattr(importlib.import_module(where), new, None)
    if found is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    warnings.warn(f"{__name__}.{name} moved to {where}.{new}", DeprecationWarning, stacklevel=2)
    return found
