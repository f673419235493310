"""Deprecated alias: :class:`LocalRunner` and :class:`BatchReport` moved to
:mod:`airflow_trident.batch.runner`; this path warns and goes away in 0.2.0.

The lookup is by name at run time, so no import arrow runs from ``runtime`` up to ``batch``
(docs/architecture.md, "Layers").
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

_MOVED = {"LocalRunner", "BatchReport"}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        warnings.warn(
            f"airflow_trident.runtime.runner.{name} moved to airflow_trident.batch.runner.{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module("airflow_trident.batch.runner"), name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
