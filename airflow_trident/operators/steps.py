"""Deprecated path: the batch tasks' mixin moved to :mod:`airflow_trident.tasks.base`
(issue 34: the task-side lifecycle lives in ``airflow_trident.tasks``); this path warns and
goes away in 0.2.0."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

_NEW = "airflow_trident.tasks.base"


def __getattr__(name: str) -> Any:
    module = importlib.import_module(_NEW)
    if name.startswith("__") or not hasattr(module, name):
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    warnings.warn(f"{__name__}.{name} moved to {_NEW}.{name}", DeprecationWarning, stacklevel=2)
    return getattr(module, name)
