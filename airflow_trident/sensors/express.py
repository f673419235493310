"""Deprecated alias: :class:`ExpressBatchOperator` moved to
:mod:`airflow_trident.operators.express` (it is an operator: it runs the whole batch); this
path warns and goes away in 0.2.0.

The lookup is by name at run time, so no sensor module imports an operator module.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    if name == "ExpressBatchOperator":
        warnings.warn(
            "airflow_trident.sensors.express.ExpressBatchOperator moved to "
            "airflow_trident.operators.express.ExpressBatchOperator",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module("airflow_trident.operators.express").ExpressBatchOperator
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
