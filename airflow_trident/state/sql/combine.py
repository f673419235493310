"""SQL for the built-in combiners under the three exactly-once rules.

The rules become the ``DO UPDATE`` part of one ``INSERT ... ON CONFLICT`` statement, so the
database does the read-modify-write. A new key is inserted as ``(key, batch txid, delta, NULL)``;
an existing row ``t`` takes, with ``d`` the batch's delta and ``op(NULL, d) = d``,
``op(v, NULL) = v``:

=================  ===========================================  ==================================
state type         ``t.txid = batch txid`` (a replay)            ``t.txid < batch txid``
=================  ===========================================  ==================================
transactional      unchanged                                     ``prev = val, val = op(val, d)``
opaque             ``val = op(prev, d)``, prev unchanged         ``prev = val, val = op(val, d)``
non-transactional  ``val = op(val, d)`` (no txid kept)           same
=================  ===========================================  ==================================

Every rule also sets ``txid`` (a transactional table without a ``prev`` column, table-shaped,
skips ``prev``). A row whose txid is ahead of the batch (or ``NULL`` in a transactional/opaque
table) is filtered out by ``WHERE t.txid <= EXCLUDED.txid``: the statement then affects fewer
rows than it has keys, which is how the caller detects a state that is ahead, for free.

``op`` is written with ``CASE`` and ``COALESCE`` so that NULL means "no value" on every
database (SQLite's two-argument ``min``/``max`` return NULL for a NULL argument).

Examples
--------
>>> import sqlalchemy as sa
>>> t = sa.table("t", sa.column("val"), sa.column("d"))
>>> print(op_sql(CombineOp.MAX, t.c.val, t.c.d))
CASE WHEN (t.val IS NULL OR t.d > t.val) THEN t.d ELSE t.val END
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql.elements import ColumnElement

from airflow_trident.state.base import StateType
from airflow_trident.state.combine import CombineOp

__all__ = ["aggregate_sql", "combine_set", "op_sql", "put_set"]

Expr = ColumnElement[Any]


def op_sql(op: CombineOp, old: Expr, new: Expr) -> Expr:
    """``op(old, new)`` in SQL, with NULL as the identity."""
    if op is CombineOp.SUM:
        return sa.func.coalesce(old + new, old, new)
    better = new < old if op is CombineOp.MIN else new > old
    return sa.case((sa.or_(old.is_(None), better), new), else_=old)


def aggregate_sql(op: CombineOp, column: Expr) -> Expr:
    """The aggregate folding a column's values with ``op`` (NULLs ignored, as ``op`` does)."""
    if op is CombineOp.SUM:
        return sa.func.sum(column)
    return sa.func.min(column) if op is CombineOp.MIN else sa.func.max(column)


def combine_set(
    state_type: StateType,
    op: CombineOp,
    target: Any,
    excluded: Any,
    columns: tuple[str, str] = ("val", "prev"),
) -> tuple[dict[str, Expr], Expr | None]:
    """The ``SET`` and ``WHERE`` of ``ON CONFLICT DO UPDATE`` applying ``op`` under a rule.

    Parameters
    ----------
    state_type:
        The rule.
    op:
        The combiner.
    target:
        The columns of the state table (the stored row), e.g. ``table.c``.
    excluded:
        The columns of the proposed row, ``insert_stmt.excluded``.
    columns:
        The names of the value and prev columns (a table-shaped state's ``count`` and
        ``prev_count``, say).
    """
    v, p = columns
    d, val = excluded[v], target[v]
    if state_type is StateType.NON_TRANSACTIONAL:
        return {v: op_sql(op, val, d)}, None
    replay = target.txid == excluded.txid
    ahead_filter = target.txid <= excluded.txid
    if state_type is StateType.TRANSACTIONAL:
        set_ = {v: sa.case((replay, val), else_=op_sql(op, val, d)), "txid": excluded.txid}
        if p:  # the value before the batch, for committed-only reads during its commit
            set_[p] = sa.case((replay, target[p]), else_=val)
        return set_, ahead_filter
    prev = target[p]
    return {
        v: sa.case((replay, op_sql(op, prev, d)), else_=op_sql(op, val, d)),
        p: sa.case((replay, prev), else_=val),
        "txid": excluded.txid,
    }, ahead_filter


def put_set(excluded: Any, columns: tuple[str, ...] = ("txid", "val", "prev")) -> dict[str, Expr]:
    """The ``SET`` of ``ON CONFLICT DO UPDATE`` replacing a stored row by the proposed one."""
    return {c: excluded[c] for c in columns}
