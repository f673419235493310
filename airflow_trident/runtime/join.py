"""Joining streams within a batch, partition by partition (inputs are partitioned by key).

>>> from airflow_trident.graph import JoinNode
>>> node = JoinNode("j", ("a", "b"), ("k", "x", "y"), join_fields=(("k",), ("k",)),
...                 join_types=("outer", "inner"), other_fields=(("x",), ("y",)))
>>> join_partitions(node, [[[(1, "a")]], [[(1, "b"), (2, "c")]]], [("k", "x"), ("k", "y")])
[[(1, 'a', 'b'), (2, None, 'c')]]
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from airflow_trident.graph import JoinNode
from airflow_trident.runtime.result import Partitions
from airflow_trident.tuple import Fields

__all__ = ["join_partitions"]


def join_partitions(
    node: JoinNode, inputs: Sequence[Partitions], fields: Sequence[Fields]
) -> Partitions:
    """Join partition ``i`` of every input; keys first, then each side's other fields."""
    n = max(len(p) for p in inputs)
    out: Partitions = []
    for index in range(n):
        sides = []
        for side, parts in enumerate(inputs):
            rows = parts[index] if index < len(parts) else []
            key_index = [fields[side].index(f) for f in node.join_fields[side]]
            other_index = [fields[side].index(f) for f in node.other_fields[side]]
            by_key: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
            for r in rows:
                by_key.setdefault(tuple(r[i] for i in key_index), []).append(
                    tuple(r[i] for i in other_index)
                )
            sides.append(by_key)
        keys = list(dict.fromkeys(k for side in sides for k in side))
        rows_out = []
        for key in keys:
            options = []
            for side, by_key in enumerate(sides):
                matches = by_key.get(key)
                if matches:
                    options.append(matches)
                elif node.join_types[side] == "outer":
                    options.append([(None,) * len(node.other_fields[side])])
                else:
                    options = []
                    break
            for combo in itertools.product(*options) if options else []:
                rows_out.append(key + tuple(v for part in combo for v in part))
        out.append(rows_out)
    return out
