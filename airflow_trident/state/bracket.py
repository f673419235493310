"""The commit bracket of a state: ``begin_commit(txid)``, the writes, ``commit(txid)``.

>>> from airflow_trident.state.memory import memory_state
>>> counts = memory_state("bracket_doc", "transactional").make_state()
>>> apply_in_commit(1, counts, lambda: counts.multi_put([("a",)], [1]))
>>> counts.multi_get([("a",)])
[1]
>>> apply_in_commit(2, counts, lambda: 1 / 0)
Traceback (most recent call last):
...
ZeroDivisionError: division by zero
>>> counts.multi_get([("a",)])  # the failed commit left nothing behind
[1]
"""

from __future__ import annotations

from collections.abc import Callable

from airflow_trident.state.base import State

__all__ = ["StateUpdate", "apply_in_commit"]

StateUpdate = tuple[State, Callable[[], object]]
"""A state and the writes of one batch to it, run by :func:`apply_in_commit`."""


def apply_in_commit(txid: int, state: State, apply: Callable[[], object]) -> None:
    """Run ``apply()`` between ``state.begin_commit(txid)`` and ``state.commit(txid)``; roll the
    state back (when it can) if it raises, and re-raise."""
    state.begin_commit(txid)
    try:
        apply()
        state.commit(txid)
    except BaseException:
        rollback = getattr(state, "rollback", None)
        if callable(rollback):
            rollback()
        raise
