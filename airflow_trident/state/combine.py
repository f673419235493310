"""Built-in combine operations that a store can run itself (sum, min, max).

:class:`CombineOp` is defined in the API layer (:mod:`airflow_trident.operation.combine`), which
the operations and the stores both use; the stores import it from here.

>>> from airflow_trident.operation.combine import CombineOp as Defined
>>> CombineOp is Defined, CombineOp.SUM.combine(None, 3)
(True, 3)
"""

from __future__ import annotations

from airflow_trident.operation.combine import CombineOp

__all__ = ["CombineOp"]
