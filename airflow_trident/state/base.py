"""State contracts: :class:`State`, :class:`StateFactory` and the three state types.

Examples
--------
>>> StateType.parse("opaque")
<StateType.OPAQUE: 'opaque'>
>>> StateType.parse("eventual")
Traceback (most recent call last):
...
airflow_trident.errors.UnknownStateTypeError: unknown state type 'eventual': ...
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from airflow_trident.errors import UnknownStateTypeError

__all__ = ["Key", "State", "StateFactory", "StateType"]

Key = tuple[Any, ...]
"""A state key: the values of the group-by fields, in order (``()`` for a global value)."""


class StateType(enum.Enum):
    """Which exactly-once rule a state applies; it must match the spout's guarantee."""

    TRANSACTIONAL = "transactional"
    OPAQUE = "opaque"
    NON_TRANSACTIONAL = "non_transactional"

    @classmethod
    def parse(cls, value: StateType | str) -> StateType:
        """Return the state type named ``value``.

        Raises
        ------
        UnknownStateTypeError
            If ``value`` names no state type.
        """
        if isinstance(value, StateType):
            return value
        for member in cls:
            if value == member.value:
                return member
        names = ", ".join(repr(m.value) for m in cls)
        msg = f"unknown state type {value!r}: use one of {names}"
        raise UnknownStateTypeError(msg)


@runtime_checkable
class State(Protocol):
    """Something updated in the commit phase of a batch, strictly in txid order."""

    def begin_commit(self, txid: int) -> None:
        """Start applying batch ``txid``."""

    def commit(self, txid: int) -> None:
        """Make batch ``txid``'s updates durable."""


class StateFactory(Protocol):
    """Makes the state object that one partition of a topology updates."""

    def make_state(self, partition_index: int = 0, num_partitions: int = 1) -> State:
        """Return the state for partition ``partition_index`` of ``num_partitions``."""


@runtime_checkable
class AppendsOnSpark(Protocol):
    """A state factory whose table a Spark connector's own writer can append to
    (``commit_mode="spark"``): Delta's. Optional: the Spark commit applies every
    other state with its Python writer, in Spark tasks."""

    def spark_append(self, updater: Any) -> str | None:
        """The table format (``"delta"``, ``"iceberg"``) whose Spark writer can append the
        rows ``updater`` stages for this factory, exactly as the Python writer would; ``None``
        when only the Python writer can (a merge, an evolving schema, another updater...)."""


def check_same_length(keys: Sequence[Any], values: Sequence[Any], what: str) -> None:
    """Raise ``ValueError`` when ``keys`` and ``values`` differ in length (a programming error)."""
    if len(keys) != len(values):
        msg = f"{what}: {len(keys)} keys but {len(values)} values"
        raise ValueError(msg)
