"""State in SQL tables through SQLAlchemy Core: SQLite (embedded default) and PostgreSQL.

One table per state, with the key columns, ``txid``, ``val`` and ``prev``; batched reads and
upserts; one database transaction per commit per partition; built-in combiners (count, sum, min,
max) applied by the database in one statement under Trident's exactly-once rules.

Modules: :mod:`.table` (layout), :mod:`.schema` (creation), :mod:`.codec` (rows <-> values),
:mod:`.combine` (the rules in SQL), :mod:`.rows` (portable paths), :mod:`.bulk` (PostgreSQL COPY),
:mod:`.engine` (shared engines, errors), :mod:`.store` (:class:`SqlBackingMap`) and
:mod:`.factory` (:func:`sql_state`).

Examples
--------
>>> from airflow_trident.state.sql import sql_state
>>> from airflow_trident.state.combine import CombineOp
>>> state = sql_state("sqlite://", "doc_pkg_counts", "opaque", value_type="bigint").make_state()
>>> state.begin_commit(1)
>>> state.multi_combine([("a",)], [3], CombineOp.SUM)
>>> state.commit(1)
>>> state.multi_get([("a",)])
[3]
"""

from __future__ import annotations

from airflow_trident.state.sql.codec import StateValueNotSerializableError
from airflow_trident.state.sql.factory import SqlMapStateFactory, sql_state
from airflow_trident.state.sql.store import SqlBackingMap

__all__ = ["SqlBackingMap", "SqlMapStateFactory", "StateValueNotSerializableError", "sql_state"]
