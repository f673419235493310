"""The layout of a state table: key columns, ``txid``, the value column(s) and their ``prev``.

One table holds one state. Its primary key is the key columns and ``trident_null_keys``;
``txid`` is the batch that last wrote the row (``NULL`` for non-transactional state), ``val`` the
value and ``prev`` the value before that batch (opaque state only).

A key field may be ``None`` (a group key is what the data holds): a primary key column cannot be
``NULL``, so bit ``i`` of ``trident_null_keys`` is set when key field ``i`` is ``None``, and the
column then holds its type's placeholder (``''``, ``0``, ``0.0``); ``(None,)`` and ``('',)`` are
two rows. A table made before this column existed is used as it is (:meth:`TableLayout.legacy`):
its keys cannot be ``None`` until it is migrated (``SqlMapStateFactory.migrate_null_keys()``).

A *table-shaped* state (``value_fields=("count",)``) stores its value in typed columns named
after the aggregate's output fields instead of ``val``, so an analyst reads it with plain SQL
(``SELECT word, count FROM word_counts``); only the columns its rule needs come beside them:
``txid`` always, and ``prev_<field>`` for each value field of opaque state. A value of several
fields is a tuple in ``value_fields`` order (one column each).

An opaque table may also have an index on ``txid`` (opt-in): its commit looks up the keys a
failed attempt of the same txid wrote (see
:meth:`~airflow_trident.state.map.opaque.OpaqueMap.revert_txid`). Building a layout validates
every name and type and does no I/O, so it is safe at DAG-parse time.

Examples
--------
>>> layout = TableLayout.build("word_counts", state_type="opaque", value_type="bigint")
>>> [c.name for c in layout.table.columns]
['key', 'txid', 'val', 'prev', 'trident_null_keys']
>>> layout.stored_key_fields
('key', 'trident_null_keys')
>>> layout.numeric
True
>>> [index.name for index in layout.table.indexes]  # an index on txid is opt-in
[]
>>> indexed = TableLayout.build("word_counts", state_type="opaque", txid_index=True)
>>> [index.name for index in indexed.table.indexes]
['word_counts_txid_ix']
>>> shaped = TableLayout.build(
...     "word_counts", state_type="opaque", key_fields=("word",), value_fields=("count",),
...     value_type="bigint",
... )
>>> [c.name for c in shaped.table.columns], shaped.stored_columns
(['word', 'count', 'txid', 'prev_count', 'trident_null_keys'], ('txid', 'count', 'prev_count'))
>>> TableLayout.build("counts", state_type="opaque", key_fields=("txid",))
Traceback (most recent call last):
...
airflow_trident.errors.ConfigurationError: state table 'counts': key field 'txid' clashes ...
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from airflow_trident.errors import ConfigurationError, InvalidNameError
from airflow_trident.names import validate_name
from airflow_trident.state.base import StateType

__all__ = [
    "KEY_TYPES",
    "NULL_KEYS",
    "PLACEHOLDERS",
    "VALUE_TYPES",
    "TableLayout",
    "split_table_name",
    "txid_index_name",
]

VALUE_TYPES: Mapping[str, type[sa.types.TypeEngine[Any]]] = {
    "json": sa.Text,
    "bigint": sa.BigInteger,
    "double": sa.Double,
    "string": sa.Text,
}
"""``value_type`` name -> column type of ``val`` and ``prev`` (``"string"``: a plain string, for
table-shaped states; ``"json"`` is JSON text)."""

KEY_TYPES: Mapping[type, type[sa.types.TypeEngine[Any]]] = {
    str: sa.String,
    int: sa.BigInteger,
    float: sa.Double,
}
"""Python type of a key field -> its column type."""

VALUE_COLUMNS = ("txid", "val", "prev")
NULL_KEYS = "trident_null_keys"
"""The column of a state table's primary key saying which key fields are ``None`` (bit ``i``:
key field ``i``)."""
PLACEHOLDERS: Mapping[type, Any] = {str: "", int: 0, float: 0.0}
"""What a key column holds where its key field is ``None`` (by key type)."""
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
    value_columns: tuple[str, ...] = ("val",)
    """The columns holding the value (``("val",)``, or a table-shaped state's value fields)."""
    value_types: tuple[str, ...] = ("json",)
    """The ``value_type`` of each value column."""
    prev_columns: tuple[str, ...] = ("prev",)
    """The columns of the value before the row's txid (opaque rule; ``()`` when not needed)."""
    schema: str | None = None
    """The PostgreSQL schema of the table (``"analytics"`` of ``"analytics.word_counts"``);
    ``None``: the connection's default (its ``search_path``)."""
    null_keys: bool = True
    """Whether the table has :data:`NULL_KEYS` (``False``: a table made before it, whose key
    fields cannot be ``None``)."""
    options: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The arguments of :meth:`build` (to make the :meth:`legacy` layout)."""

    @property
    def qualified(self) -> str:
        """The table's name as given: ``schema.table``, or ``table``."""
        return self.name if self.schema is None else f"{self.schema}.{self.name}"

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
        value_fields: Sequence[str] | None = None,
        value_types: Mapping[str, str] | None = None,
        null_keys: bool = True,
    ) -> TableLayout:
        """Validate the options and return the layout. ``txid_index``: an opaque table gets an
        index on ``txid`` (it makes the revert of a replayed commit cheap, and costs every write).
        ``value_fields``: a table-shaped state, one typed column per field (``value_type``
        each, unless ``value_types`` names another for a field). ``null_keys=False``: the
        layout of a table made before :data:`NULL_KEYS` (see :meth:`legacy`).

        Raises
        ------
        InvalidNameError
            If ``table`` or a key field is not a valid identifier.
        UnknownStateTypeError
            If ``state_type`` names no state type.
        ConfigurationError
            For an empty, duplicated or reserved key or value field, a key type other than
            ``str``, ``int`` or ``float``, or an unknown ``value_type``.
        """
        options: dict[str, Any] = {
            "state_type": state_type,
            "key_fields": key_fields,
            "key_types": key_types,
            "value_type": value_type,
            "txid_index": txid_index,
            "value_fields": value_fields,
            "value_types": value_types,
        }
        schema, name = split_table_name(table)
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
        values, vtypes, prevs = _value_columns(name, kind, fields, value_fields, value_type,
                                               value_types or {})  # fmt: skip
        columns: list[sa.Column[Any]] = [
            sa.Column(f, KEY_TYPES[t](), primary_key=True, autoincrement=False)
            for f, t in zip(fields, types, strict=True)
        ]
        value_cols = [
            sa.Column(c, VALUE_TYPES[t](), nullable=True)
            for c, t in zip(values, vtypes, strict=True)
        ]
        prev_cols = [  # one per value column, or none
            sa.Column(c, VALUE_TYPES[t](), nullable=True)
            for c, t in zip(prevs, vtypes, strict=False)
        ]
        txid_col = sa.Column("txid", sa.BigInteger(), nullable=True)
        if value_fields is None:  # the JSON-value form: key..., txid, val, prev
            columns += [txid_col, *value_cols, *prev_cols]
        else:  # table-shaped: key..., fields..., txid, prev_fields...
            columns += [*value_cols, txid_col, *prev_cols]
        if null_keys:  # last: an analyst's columns keep their places
            columns.append(
                sa.Column(
                    NULL_KEYS, sa.BigInteger(), primary_key=True, autoincrement=False,
                    nullable=False, server_default=sa.text("0"),
                )
            )  # fmt: skip
        table_obj = sa.Table(name, sa.MetaData(), *columns, schema=schema)
        if kind is StateType.OPAQUE and txid_index:
            sa.Index(txid_index_name(name), table_obj.c.txid)
        return cls(
            name, kind, fields, types, vtypes[0], table_obj, values, vtypes, prevs, schema,
            null_keys, options,
        )  # fmt: skip

    def legacy(self) -> TableLayout:
        """This layout without :data:`NULL_KEYS`: a table made before it (read and written as
        it was; its key fields cannot be ``None``)."""
        if not self.null_keys:
            return self
        options = dict(self.options)
        return TableLayout.build(self.qualified, null_keys=False, **options)

    @property
    def stored_key_fields(self) -> tuple[str, ...]:
        """The primary key's columns: the key fields, then :data:`NULL_KEYS` (if the table has
        it). Rows carry keys in this form (see ``RowCodec.check_key``)."""
        return (*self.key_fields, NULL_KEYS) if self.null_keys else self.key_fields

    @property
    def numeric(self) -> bool:
        """Whether the value is one number column (the database can then combine values)."""
        return len(self.value_columns) == 1 and self.value_type in ("bigint", "double")

    @property
    def combine_columns(self) -> tuple[str, str]:
        """The value column and its prev column (``""`` if none) that combiners update."""
        return self.value_columns[0], (self.prev_columns[0] if self.prev_columns else "")

    @property
    def stored_columns(self) -> tuple[str, ...]:
        """The non-key columns in the order rows carry them: ``txid``, values, prevs."""
        return ("txid", *self.value_columns, *self.prev_columns)

    @property
    def key_columns(self) -> list[sa.Column[Any]]:
        """The primary key's columns of :attr:`table` (:attr:`stored_key_fields`)."""
        return [self.table.c[f] for f in self.stored_key_fields]

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


def split_table_name(table: object) -> tuple[str | None, str]:
    """``(schema, table)`` of a state table name, ``"table"`` or ``"schema.table"`` (each part
    a valid name: no quoting, no third part).

    >>> split_table_name("analytics.word_counts"), split_table_name("word_counts")
    (('analytics', 'word_counts'), (None, 'word_counts'))
    >>> split_table_name("a.b.c")
    Traceback (most recent call last):
    ...
    airflow_trident.errors.InvalidNameError: table name 'a.b.c' is invalid: ...
    """
    parts = table.split(".") if isinstance(table, str) else [table]
    if len(parts) == 2:
        return validate_name(parts[0], kind="schema"), validate_name(parts[1], kind="table")
    if len(parts) > 2:
        msg = (
            f"table name {table!r} is invalid: give 'table' or 'schema.table' (PostgreSQL), "
            f"each part 1-63 letters, digits or '_'"
        )
        raise InvalidNameError(msg)
    return None, validate_name(table, kind="table")


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


def _value_columns(
    table: str,
    kind: StateType,
    keys: tuple[str, ...],
    value_fields: Sequence[str] | None,
    value_type: str,
    given: Mapping[str, str],
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The value columns, their value types and the prev columns of a layout."""
    if value_fields is None:
        if given:
            msg = (
                f"state table {table!r}: value_types needs value_fields; hint: "
                f"value_fields=('count',)"
            )
            raise ConfigurationError(msg)
        _check_value_type(table, "val", value_type)
        if value_type == "string":
            msg = f"state table {table!r}: value_type 'string' needs value_fields; hint: use 'json'"
            raise ConfigurationError(msg)
        return ("val",), (value_type,), ("prev",)
    if isinstance(value_fields, str) or not value_fields:
        msg = (
            f"state table {table!r}: value_fields must be a non-empty sequence of names, got "
            f"{value_fields!r}; hint: value_fields=('count',)"
        )
        raise ConfigurationError(msg)
    values = tuple(validate_name(f, kind="value field") for f in value_fields)
    unknown = sorted(set(given) - set(values))
    if unknown:
        msg = (
            f"state table {table!r}: value_types names {unknown} which are not value fields "
            f"{list(values)}; hint: use the same names in value_fields and value_types"
        )
        raise ConfigurationError(msg)
    types = tuple(given.get(f, value_type) for f in values)
    for f, t in zip(values, types, strict=True):
        _check_value_type(table, f, t)
    prevs = tuple(f"prev_{f}" for f in values) if kind is StateType.OPAQUE else ()
    for p in prevs:
        validate_name(p, kind="prev column")
    _check_fields(table, (*keys, *values, *prevs), reserved=("txid",))
    return values, types, prevs


def _check_value_type(table: str, field: str, value_type: str) -> None:
    if value_type not in VALUE_TYPES:
        msg = (
            f"state table {table!r}: unknown value_type {value_type!r} for {field!r}; use one of "
            f"{', '.join(map(repr, VALUE_TYPES))} (bigint and double let the database "
            f"combine sums, minima and maxima itself)"
        )
        raise ConfigurationError(msg)


def _check_fields(
    table: str, fields: tuple[str, ...], reserved: tuple[str, ...] = VALUE_COLUMNS
) -> None:
    seen: set[str] = set()
    for f in fields:
        if f.lower() in (*reserved, NULL_KEYS):
            msg = (
                f"state table {table!r}: key field {f!r} clashes with a value column "
                f"({', '.join(reserved)}); hint: rename the key field"
            )
            raise ConfigurationError(msg)
        if f.lower() in seen:
            msg = (
                f"state table {table!r}: field or column {f!r} is given twice; hint: name each "
                f"once (opaque state adds prev_<field> columns)"
            )
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
