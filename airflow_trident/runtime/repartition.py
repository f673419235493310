"""Moving tuples between partitions in-process (shuffle, by key, global, broadcast, custom).

The key hash is stable across processes (Python's ``hash`` of a string is not).

>>> parts = [[("a", 1), ("b", 2)], [("a", 3)]]
>>> by_key = repartition(parts, "partition_by", (0,), 2)
>>> sorted(len(p) for p in by_key), [r for p in by_key for r in p if r[0] == "a"]
([1, 2], [('a', 1), ('a', 3)])
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from airflow_trident.errors import ConfigurationError
from airflow_trident.runtime.aggregate import group_value
from airflow_trident.runtime.result import Partitions

__all__ = ["repartition", "stable_hash"]


def stable_hash(key: Sequence[Any]) -> int:
    """A hash of ``key`` that every process computes the same (values that group together,
    ``-0.0`` and ``0.0``, hash the same: :func:`~airflow_trident.runtime.aggregate.group_value`).

    >>> stable_hash([-0.0, "a"]) == stable_hash([0.0, "a"])
    True
    """
    values = [group_value(v) for v in key]
    return zlib.crc32(json.dumps(values, default=repr, sort_keys=True).encode())


def repartition(
    partitions: Partitions,
    method: str,
    key_index: Sequence[int],
    n: int,
    partitioner: Callable[[tuple[Any, ...], int], Sequence[int]] | None = None,
) -> Partitions:
    """Spread the rows of ``partitions`` over ``n`` new partitions by ``method``."""
    out: Partitions = [[] for _ in range(n)]
    rows = (row for part in partitions for row in part)
    if method in ("global", "batch_global"):
        out[0].extend(rows)
    elif method == "shuffle":
        for i, row in enumerate(rows):
            out[i % n].append(row)
    elif method == "partition_by":
        for row in rows:
            out[stable_hash([row[i] for i in key_index]) % n].append(row)
    elif method == "broadcast":
        everything = list(rows)
        for part in out:
            part.extend(everything)
    elif method == "custom" and partitioner is not None:
        for row in rows:
            for target in partitioner(row, n):
                out[target].append(row)
    else:
        msg = f"unknown repartition method {method!r}"
        raise ConfigurationError(msg)
    return out
