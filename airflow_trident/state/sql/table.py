"""The layout of a state table: key columns, ``txid``, ``val`` and ``prev``.

One table holds one state. Its primary key is the key columns; ``txid`` is the batch that last
wrote the row (``NULL`` for non-transactional state), ``val`` the value and ``prev`` the value
before that batch (opaque state only). An opaque table also has an index on ``txid``: its commit
looks up the keys a failed attempt of the same txid wrote (see
:meth:`~airflow_trident.state.map.opaque.OpaqueMap.revert_txid`). Building a layout validates
every name and type and does no I/O, so it is safe at DAG-parse time.

Examples
--------
>>> layout = TableLayout.build("word_counts", state_type="opaque", value_type="bigint")
>>> [c.name for c in layout.table.columns]
['key', 'txid', 'val', 'prev']
>>> layout.numeric
True
>>> [index.name for index in layout.table.indexes]  # an index on txid is opt-in
[]
>>> indexed = TableLayout.build("word_counts", state_type="opaque", txid_index=True)
>>> [index.name for index in indexed.table.indexes]
['word_counts_txid_ix']
>>> TableLayout.build("counts", state_type="opaque", key_fields=("txid",))
Traceback (most recent call last):
...
airflow_trident.errors.ConfigurationError: state table 'counts': key field 'txid' clashes ...
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from airflow_trident.errors import ConfigurationError
from airflow_trident.names import validate_name
from airflow_trident.state.base import StateType

__all__ = ["KEY_TYPES", "VALUE_TYPES", "TableLayout", "txid_index_name"]

VALUE_TYPES: Mapping[str, type[sa.types.TypeEngine[Any]]] = {
    "json": sa.Text,
    "bigint": sa.BigInteger,
    "double": sa.Double,
}
"""``value_type`` name -> column type of ``val`` and ``prev``."""

KEY_TYPES: Mapping[type, type[sa.types.TypeEngine[Any]]] = {
    str: sa.String,
    int: sa.BigInteger,
    float: sa.Double,
}
"""Python type of a key field -> its column type."""

VALUE_COLUMNS = ("txid", "val", "prev")
BULK_TABLE = "_trident_bulk"
"""Name of the session-private temporary table used by the PostgreSQL COPY paths."""


@dataclass(frozen=True, eq=False)
class TableLayout:
    """A validated state table: its names, types and SQLAlchemy :class:`~sqlalchemy.Table`.

    Use :meth:`build`; the constructor does not validate.

    Examples
    --------
    >>> layout = TableLayout.build(
    ...     "sales", state_type="transactional", key_fields=("shop", "day"), key_types={"day": int}
    ... )
    >>> [(c.name, str(c.type), c.primary_key) for c in layout.table.columns][:3]
    [('shop', 'VARCHAR', True), ('day', 'BIGINT', True), ('txid', 'BIGINT', False)]
    """

    name: str
    state_type: StateType
    key_fields: tuple[str, ...]
    key_types: tuple[type, ...]
    value_type: str
    table: sa.Table

    @classmethod
    def build(
        cls,
        table: str,
        *,
        state_type: StateType | str,
        key_fields: Sequence[str] = ("key",),
        key_types: Mapping[str, type] | None = None,
        value_type: str = "json",
        txid_index: bool = False,
    ) -> TableLayout:
        """Validate the options and return the layout. ``txid_index``: an opaque table gets an
        index on ``txid`` (it makes the revert of a replayed commit cheap, and costs every write).

        Raises
        ------
        InvalidNameError
            If ``table`` or a key field is not a valid identifier.
        UnknownStateTypeError
            If ``state_type`` names no state type.
        ConfigurationError
            For an empty, duplicated or reserved key field, a key type other than ``str``,
            ``int`` or ``float``, or an unknown ``value_type``.
        """
        name = validate_name(table, kind="table")
        kind = StateType.parse(state_type)
        if isinstance(key_fields, str) or not key_fields:
            msg = (
                f"state table {name!r}: key_fields must be a non-empty sequence of names, got "
                f"{key_fields!r}; hint: key_fields=('word',)"
            )
            raise ConfigurationError(msg)
        fields = tuple(validate_name(f, kind="key field") for f in key_fields)
        _check_fields(name, fields)
        types = _key_types(name, fields, key_types or {})
        if value_type not in VALUE_TYPES:
            msg = (
                f"state table {name!r}: unknown value_type {value_type!r}; use one of "
                f"{', '.join(map(repr, VALUE_TYPES))} (bigint and double let the database "
                f"combine sums, minima and maxima itself)"
            )
            raise ConfigurationError(msg)
        value_col = VALUE_TYPES[value_type]
        columns: list[sa.Column[Any]] = [
            sa.Column(f, KEY_TYPES[t](), primary_key=True, autoincrement=False)
            for f, t in zip(fields, types, strict=True)
        ]
        columns += [
            sa.Column("txid", sa.BigInteger(), nullable=True),
            sa.Column("val", value_col(), nullable=True),
            sa.Column("prev", value_col(), nullable=True),
        ]
        table_obj = sa.Table(name, sa.MetaData(), *columns)
        if kind is StateType.OPAQUE and txid_index:
            sa.Index(txid_index_name(name), table_obj.c.txid)
        return cls(name, kind, fields, types, value_type, table_obj)

    @property
    def numeric(self) -> bool:
        """Whether ``val`` is a number column (the database can then combine values itself)."""
        return self.value_type != "json"

    @property
    def key_columns(self) -> list[sa.Column[Any]]:
        """The key columns of :attr:`table`, in key order."""
        return [self.table.c[f] for f in self.key_fields]

    def bulk_table(self, columns: Sequence[str]) -> sa.Table:
        """A temporary table (dropped at commit) with the key columns and ``columns``.

        Each column has the type of the same column in :attr:`table`; there is no primary key,
        so loading it with COPY is as cheap as possible.
        """
        cols = [sa.Column(c.name, c.type) for c in self.key_columns]
        cols += [sa.Column(c, self.table.c[c].type) for c in columns]
        return sa.Table(
            BULK_TABLE,
            sa.MetaData(),
            *cols,
            prefixes=["TEMPORARY"],
            postgresql_on_commit="DROP",
        )


def txid_index_name(table: str) -> str:
    """The name of ``table``'s index on ``txid`` (at most 63 characters, PostgreSQL's limit).

    >>> txid_index_name("counts")
    'counts_txid_ix'
    >>> len(txid_index_name("t" * 63))
    63
    """
    name = f"{table}_txid_ix"
    if len(name) <= 63:
        return name
    digest = hashlib.sha1(table.encode(), usedforsecurity=False).hexdigest()[:8]
    return f"{table[: 63 - len('_txid_ix') - 9]}_{digest}_txid_ix"


def _check_fields(table: str, fields: tuple[str, ...]) -> None:
    seen: set[str] = set()
    for f in fields:
        if f.lower() in VALUE_COLUMNS:
            msg = (
                f"state table {table!r}: key field {f!r} clashes with a value column "
                f"({', '.join(VALUE_COLUMNS)}); hint: rename the key field"
            )
            raise ConfigurationError(msg)
        if f.lower() in seen:
            msg = f"state table {table!r}: key field {f!r} is given twice; hint: name each once"
            raise ConfigurationError(msg)
        seen.add(f.lower())


def _key_types(table: str, fields: tuple[str, ...], given: Mapping[str, type]) -> tuple[type, ...]:
    unknown = sorted(set(given) - set(fields))
    if unknown:
        msg = (
            f"state table {table!r}: key_types names {unknown} which are not key fields "
            f"{list(fields)}; hint: use the same names in key_fields and key_types"
        )
        raise ConfigurationError(msg)
    types = tuple(given.get(f, str) for f in fields)
    for f, t in zip(fields, types, strict=True):
        if t not in KEY_TYPES:
            msg = f"state table {table!r}: key field {f!r} has type {t!r}; use str, int or float"
            raise ConfigurationError(msg)
    return types
