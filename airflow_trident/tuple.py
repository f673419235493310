"""The tuple a user operation sees (Trident's ``TridentTuple``) and the collector it emits to.

>>> t = TridentTuple(("the cow", 3), ("sentence", "n"))
>>> t[0], t.get("n"), t.values, len(t)
('the cow', 3, ('the cow', 3), 2)
>>> c = TridentCollector(); c.emit(("the",)); c.emit(("cow",)); c.rows
[('the',), ('cow',)]
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

__all__ = ["Fields", "TridentCollector", "TridentTuple", "as_fields", "tuple_type"]

Fields = tuple[str, ...]


def as_fields(fields: str | Sequence[str]) -> Fields:
    """Normalise a field list (a single name is one field).

    >>> as_fields("word"), as_fields(["word", "n"])
    (('word',), ('word', 'n'))
    """
    return (fields,) if isinstance(fields, str) else tuple(fields)


class _TupleType(type):
    """The type of :class:`TridentTuple`: ``TridentTuple(values, fields)`` makes a tuple of the
    type of ``fields``."""

    def __call__(cls, values: Iterable[Any], fields: Sequence[str]) -> Any:
        return tuple_type(fields)(values)


class _FieldsType(_TupleType):
    """The type of the tuples of one field list: called with the values alone, at C speed
    (``tuple``'s own constructor; 3.5x faster than a Python ``__new__``)."""

    __call__ = type.__call__


class TridentTuple(tuple[Any, ...], metaclass=_TupleType):
    """Read-only values with field names; index by position or with :meth:`get` by name.

    It is a ``tuple`` of the values (so it compares, hashes and unpacks as one); the field
    names belong to its type, shared by every tuple of the same fields. Hot loops build
    tuples with :func:`tuple_type` (a C-level constructor, no per-tuple Python call).

    >>> t = TridentTuple(("ann", 3), ("user", "n"))
    >>> t == ("ann", 3), tuple_type(("user", "n"))(("ann", 3)) == t, t.fields
    (True, True, ('user', 'n'))
    >>> import pickle; pickle.loads(pickle.dumps(t))
    TridentTuple({'user': 'ann', 'n': 3})
    """

    __slots__ = ()
    _fields: Fields = ()

    if TYPE_CHECKING:  # made by _TupleType.__call__: tuple's own constructor at run time

        def __new__(cls, values: Iterable[Any], fields: Sequence[str]) -> TridentTuple: ...

    @property
    def values(self) -> tuple[Any, ...]:
        """The values, in field order."""
        return tuple(self)

    @property
    def fields(self) -> Fields:
        """The field names."""
        return self._fields

    def get(self, field: str) -> Any:
        """The value of ``field``.

        Raises
        ------
        KeyError
            Naming the field and the available ones.
        """
        try:
            return self[self._fields.index(field)]
        except ValueError:
            msg = f"field {field!r} is not in this tuple; available: {list(self._fields)}"
            raise KeyError(msg) from None

    def __repr__(self) -> str:
        return f"TridentTuple({dict(zip(self._fields, self, strict=True))!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (TridentTuple, (tuple(self), self._fields))


def tuple_type(fields: Sequence[str]) -> Callable[[Iterable[Any]], TridentTuple]:
    """The constructor of :class:`TridentTuple` s of ``fields``: ``tuple_type(f)(values)``
    equals ``TridentTuple(values, f)``, without a Python call per tuple."""
    return cast(Callable[[Iterable[Any]], TridentTuple], _tuple_class(tuple(fields)))


@functools.lru_cache(maxsize=4096)
def _tuple_class(fields: Fields) -> type[TridentTuple]:
    """The type of the tuples of ``fields`` (one per field list)."""
    namespace = {"__slots__": (), "_fields": fields, "__qualname__": "TridentTuple",
                 "__module__": __name__}  # fmt: skip
    return cast(type[TridentTuple], _FieldsType("TridentTuple", (TridentTuple,), namespace))


class TridentCollector:
    """Collects the tuples an operation emits."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def emit(self, values: Sequence[Any]) -> None:
        """Emit one tuple of values (in the order of the operation's output fields)."""
        self.rows.append(tuple(values))
