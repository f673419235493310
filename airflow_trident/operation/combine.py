"""Built-in combine operations that a store can run itself (sum, min, max).

The built-in combiners (``Count``, ``Sum``, ``Min``, ``Max``) name one of these as their
``combine_op``; a user-defined aggregator has none and its state falls back to
read-modify-write. It lives in the API layer because both the operations and the state stores
(which re-export it as ``airflow_trident.state.combine.CombineOp``) use it.

>>> CombineOp.SUM.combine(None, 3), CombineOp.MIN.combine(5, 3), CombineOp.MAX.combine(5, 3)
(3, 3, 5)
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = ["CombineOp"]


class CombineOp(enum.Enum):
    """An associative, commutative fold over numbers whose identity is 'absent'.

    ``MIN``/``MAX`` order NaN above every number, as Spark SQL and PostgreSQL do (Python's
    ``min``/``max`` keep whichever comes first), so the result does not depend on the order.

    >>> nan = float("nan")
    >>> MAX, MIN = CombineOp.MAX, CombineOp.MIN
    >>> MAX.combine(1.0, nan), MAX.combine(nan, 1.0), MIN.combine(nan, 1.0), MIN.combine(1.0, nan)
    (nan, nan, 1.0, 1.0)
    """

    SUM = "sum"
    MIN = "min"
    MAX = "max"

    def combine(self, old: Any, delta: Any) -> Any:
        """Fold ``delta`` into ``old`` (``None`` means no value yet)."""
        if old is None:
            return delta
        if delta is None:
            return old
        if self is CombineOp.SUM:
            return old + delta
        if _is_nan(old) or _is_nan(delta):  # NaN is above every number
            high, low = (old, delta) if _is_nan(old) else (delta, old)
            return low if self is CombineOp.MIN else high
        if self is CombineOp.MIN:
            return min(old, delta)
        return max(old, delta)


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and value != value
