"""Mapping between stored values and table rows ``(key..., txid, val, prev)``.

A table-shaped state (``value_fields``) has one column per value field for ``val`` and, when
opaque, one ``prev_<field>`` per field for ``prev``: a one-field value is stored as is, a value of
several fields is a tuple (or list) of them, read back as a tuple; ``None`` is ``NULL`` in every
column (so a tuple of ``None`` s reads back as ``None``). A transactional ``prev`` (the value
before the txid, read by DRPC while that txid's commit is in progress) is kept where the table
has a ``prev`` column (the one-value form), not in table-shaped transactional state.

======================  =====================================================
state type              row
======================  =====================================================
transactional           ``TransactionalValue(txid, val, prev)`` <-> ``txid, val, prev``
opaque                  ``OpaqueValue(curr_txid, curr, prev)`` <-> ``txid, val, prev``
non-transactional       ``value`` <-> ``NULL, val, NULL``
======================  =====================================================

With ``value_type="json"`` a value is stored as JSON text (``None`` as SQL ``NULL``), so it
round-trips as JSON does: tuples come back as lists, mapping keys as strings. NaN and infinities
are refused (they are not JSON). With ``"bigint"``/``"double"`` values must be numbers.

Examples
--------
>>> from airflow_trident.state.sql.table import TableLayout
>>> from airflow_trident.state.values import OpaqueValue
>>> codec = RowCodec(TableLayout.build("totals", state_type="opaque"))
>>> codec.encode(OpaqueValue(3, {"n": 6}, {"n": 4}))
(3, '{"n":6}', '{"n":4}')
>>> codec.decode(3, '{"n":6}', '{"n":4}')
OpaqueValue(curr_txid=3, curr={'n': 6}, prev={'n': 4})
>>> codec.encode(OpaqueValue(3, {1, 2}))
Traceback (most recent call last):
...
airflow_trident.state.sql.codec.StateValueNotSerializableError: state table 'totals': ...
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

from airflow_trident.errors import ConfigurationError, StateError
from airflow_trident.state.base import Key, StateType
from airflow_trident.state.sql.table import NULL_KEYS, PLACEHOLDERS, TableLayout
from airflow_trident.state.values import OpaqueValue, TransactionalValue

__all__ = ["NullKeyError", "Row", "RowCodec", "StateValueNotSerializableError"]

Row = tuple[Any, ...]
"""A table row: its primary key (:meth:`RowCodec.check_key`: the key values, then the bits of
the ``None`` ones), then the layout's ``stored_columns`` (``txid``, ``val``, ``prev`` for the
JSON-value form)."""

_dumps = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode


class StateValueNotSerializableError(StateError, TypeError):
    """A state value that the state table cannot hold (nothing was written)."""


class NullKeyError(StateError):
    """A ``None`` key field for a state table made before ``None`` keys could be stored
    (nothing of the commit was written)."""


class RowCodec:
    """Encodes values (and keys) of one state table into rows, and decodes rows back.

    Examples
    --------
    >>> from airflow_trident.state.sql.table import TableLayout
    >>> codec = RowCodec(TableLayout.build("c", state_type="transactional", value_type="bigint"))
    >>> codec.encode_rows([("man",)], [TransactionalValue(3, 5)])
    [('man', 0, 3, 5, None)]
    >>> codec.decode(3, 5, None)
    TransactionalValue(txid=3, val=5)
    """

    def __init__(self, layout: TableLayout, dialect: str = "postgresql") -> None:
        self.layout = layout
        self._nan = dialect != "sqlite"  # SQLite stores a NaN as NULL: refused there
        encoders: dict[str, Callable[[Any], Any]] = {
            "json": self._encode_json,
            "bigint": self._encode_bigint,
            "double": self._encode_double,
            "string": self._encode_text,
        }
        self._encoders = [encoders[t] for t in layout.value_types]
        self._decoders = [_decode_json if t == "json" else _identity for t in layout.value_types]
        self.encode_val: Callable[[Any], Any] = self._encoders[0]
        """The encoder of the (first) value column: deltas the database combines."""
        self.decode_val: Callable[[Any], Any] = self._decoders[0]
        self._arity = len(layout.key_fields)
        self._placeholders = tuple(PLACEHOLDERS[t] for t in layout.key_types)
        self._width = len(layout.value_columns)
        self._no_prev: tuple[None, ...] = (None,) * len(layout.prev_columns)

    def _enc(self, value: Any) -> tuple[Any, ...]:
        """The value columns of ``value``."""
        if self._width == 1:
            return (self.encode_val(value),)
        if value is None:
            return (None,) * self._width
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            raise self._not_serializable(
                value, f"hint: a value of fields {list(self.layout.value_columns)} is a tuple"
            )
        if len(value) != self._width:
            raise self._not_serializable(
                value,
                f"it has {len(value)} items for {self._width} fields "
                f"{list(self.layout.value_columns)}",
            )
        return tuple(enc(v) for enc, v in zip(self._encoders, value, strict=True))

    def _dec(self, columns: Sequence[Any]) -> Any:
        """The value of its value columns."""
        if self._width == 1:
            return self.decode_val(columns[0])
        if all(c is None for c in columns):
            return None
        return tuple(dec(c) for dec, c in zip(self._decoders, columns, strict=True))

    # -- values ---------------------------------------------------------------------------
    def encode(self, value: Any) -> tuple[Any, ...]:
        """Return ``(txid, val, prev)`` (the layout's ``stored_columns``) for a stored value
        of this table's state type.

        Raises
        ------
        ConfigurationError
            If ``value`` is not the value type of this state type (a wrong map over the store).
        StateValueNotSerializableError
            If the value cannot be stored in ``val`` (see the module docs).
        """
        kind = self.layout.state_type
        enc = self._enc
        if kind is StateType.TRANSACTIONAL:
            if not isinstance(value, TransactionalValue):
                raise self._wrong_value(value, "TransactionalValue", "TransactionalMap")
            prev = enc(value.prev) if self.layout.prev_columns else self._no_prev
            return value.txid, *enc(value.val), *prev
        if kind is StateType.OPAQUE:
            if not isinstance(value, OpaqueValue):
                raise self._wrong_value(value, "OpaqueValue", "OpaqueMap")
            return value.curr_txid, *enc(value.curr), *enc(value.prev)
        if isinstance(value, TransactionalValue | OpaqueValue):
            raise self._wrong_value(value, "plain value", "NonTransactionalMap")
        return None, *enc(value), *self._no_prev

    def decode(self, txid: Any, *columns: Any) -> Any:
        """Return the stored value of a row (its ``txid``, value and prev columns: the
        layout's ``stored_columns``)."""
        kind = self.layout.state_type
        val = self._dec(columns[: self._width])
        if kind is StateType.NON_TRANSACTIONAL:
            return val
        if txid is None:
            msg = (
                f"state table {self.layout.name!r} holds {kind.value} state but a row has no "
                f"txid; hint: the table was written as non-transactional state, use another table"
            )
            raise StateError(msg)
        if kind is StateType.TRANSACTIONAL:
            if not self.layout.prev_columns:  # a table-shaped state keeps no prev
                return TransactionalValue(txid, val)
            return TransactionalValue(txid, val, self._dec(columns[self._width :]), True)
        return OpaqueValue(txid, val, self._dec(columns[self._width :]))

    def encode_rows(
        self, keys: Sequence[Key], values: Sequence[Any], *, txid: int | None = None
    ) -> list[Row]:
        """Encode every pair before anything is written (so a bad value writes nothing).

        ``txid``: the batch writing the values, named in errors (a transactional or opaque
        value names its own).

        Raises
        ------
        StateValueNotSerializableError
            Naming the table, the key and the txid.
        """
        rows: list[Row] = []
        append = rows.append
        for key, value in zip(keys, values, strict=True):
            try:
                append((*self.check_key(key, _txid_of(value, txid)), *self.encode(value)))
            except NullKeyError:
                raise
            except StateValueNotSerializableError as exc:
                if "key field" in str(exc):  # a key's error names the key and txid already
                    raise
                batch = _txid_of(value, txid)
                where = f"key {tuple(key)!r}" + ("" if batch is None else f", txid {batch}")
                msg = f"{exc} ({where})"
                raise StateValueNotSerializableError(msg) from exc.__cause__
        return rows

    def check_key(self, key: Key, txid: int | None = None) -> Key:
        """Return ``key`` as the table's row holds it (its primary key columns: the key fields,
        a ``None`` as its type's placeholder, then the bits of the ``None`` fields), checking
        its arity (one value per key field). ``txid``: the batch writing it (for errors).

        >>> from airflow_trident.state.sql.table import TableLayout
        >>> codec = RowCodec(TableLayout.build("c", state_type="opaque", key_fields=("a", "b")))
        >>> codec.check_key(("x", None)), codec.check_key(("x", ""))
        (('x', '', 2), ('x', '', 0))
        >>> codec.decode_key(("x", "", 2))
        ('x', None)

        Raises
        ------
        ConfigurationError
            If the key has another number of values than the table has key fields.
        NullKeyError
            If a key field is ``None`` and the table was made before ``None`` keys could be
            stored (no ``trident_null_keys`` column).
        """
        stored = self.stored_key(key, txid)
        if stored is None:
            raise self._null_key(tuple(key), txid)
        return stored

    def stored_key(self, key: Key, txid: int | None = None) -> Key | None:
        """:meth:`check_key`, or ``None`` for a key the table cannot hold (a ``None`` field in
        a table made before ``None`` keys: no row can have it)."""
        key = tuple(key)
        if len(key) != self._arity:
            msg = (
                f"state table {self.layout.name!r}: key {key!r} has {len(key)} values but the "
                f"table has {self._arity} key fields {list(self.layout.key_fields)}; hint: a "
                f"key is the tuple of the group-by fields' values"
            )
            raise ConfigurationError(msg)
        mask = 0
        for i, value in enumerate(key):
            if value is None:
                mask |= 1 << i
            elif isinstance(value, float) and math.isnan(value):
                raise self._nan_key(key, txid)
        if not self.layout.null_keys:
            return None if mask else key
        if not mask:
            return (*key, 0)
        held = self._placeholders
        return (*(held[i] if v is None else v for i, v in enumerate(key)), mask)

    def decode_key(self, stored: Sequence[Any]) -> Key:
        """The key of a row's primary key columns (the inverse of :meth:`check_key`)."""
        if not self.layout.null_keys:
            return tuple(stored)
        *values, mask = stored
        if not mask:
            return tuple(values)
        return tuple(None if mask >> i & 1 else v for i, v in enumerate(values))

    def _nan_key(self, key: Key, txid: int | None) -> StateValueNotSerializableError:
        batch = "" if txid is None else f" of txid {txid}"
        msg = (
            f"state table {self.layout.qualified!r}: key {key!r}{batch} has a NaN key field: NaN "
            f"equals nothing, so its row could never be found again (SQLite cannot even store "
            f"it); nothing of this commit was written; hint: replace NaN key fields before the "
            f"state (None is a key)"
        )
        return StateValueNotSerializableError(msg)

    def _null_key(self, key: Key, txid: int | None) -> NullKeyError:
        fields = [f for f, v in zip(self.layout.key_fields, key, strict=True) if v is None]
        batch = "" if txid is None else f" of txid {txid}"
        msg = (
            f"state table {self.layout.qualified!r}: key {key!r}{batch} has None in key fields "
            f"{fields}, and the table was made before None keys could be stored (it has no "
            f"{NULL_KEYS} column); nothing of this commit was written; hint: migrate the table "
            f"once with the state factory's migrate_null_keys() (its rows are kept; "
            f"docs/sinks/table_state.md), or replace None keys before the state"
        )
        return NullKeyError(msg)

    # -- helpers --------------------------------------------------------------------------
    def _not_serializable(self, value: Any, why: str) -> StateValueNotSerializableError:
        msg = (
            f"state table {self.layout.name!r}: cannot store {type(value).__name__} value "
            f"{_short(value)} in a {self.layout.value_type} column ({why}); nothing was written"
        )
        return StateValueNotSerializableError(msg)

    def _encode_json(self, value: Any) -> str | None:
        if value is None:
            return None
        try:
            return _dumps(value)
        except (TypeError, ValueError) as exc:
            why = f"{exc}; hint: store JSON types (dict, list, str, int, float, bool, None)"
            raise self._not_serializable(value, why) from exc

    def _encode_bigint(self, value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise self._not_serializable(value, "hint: use int values or value_type='double'")
        return int(value)

    def _encode_text(self, value: Any) -> str | None:
        if value is None or isinstance(value, str):
            return value
        raise self._not_serializable(value, "hint: use str values or value_type='json'")

    def _encode_double(self, value: Any) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise self._not_serializable(value, "hint: use int or float values")
        number = float(value)
        if not self._nan and math.isnan(number):
            why = "SQLite would store it as NULL; hint: replace NaN before the state, or use None"
            raise self._not_serializable(value, why)
        return number

    def _wrong_value(self, value: Any, expected: str, map_name: str) -> ConfigurationError:
        msg = (
            f"state table {self.layout.name!r} holds {self.layout.state_type.value} state: "
            f"expected a {expected}, got {type(value).__name__} {_short(value)}; hint: put the "
            f"store under a {map_name}, or use a table of the matching state type"
        )
        return ConfigurationError(msg)


def _txid_of(value: Any, txid: int | None) -> int | None:
    """The txid that wrote ``value``: its own (transactional, opaque), else ``txid``."""
    if isinstance(value, TransactionalValue):
        return value.txid
    if isinstance(value, OpaqueValue):
        return value.curr_txid
    return txid


def _identity(value: Any) -> Any:
    return value


def _decode_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
