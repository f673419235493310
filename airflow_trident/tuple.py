"""The tuple a user operation sees (Trident's ``TridentTuple``) and the collector it emits to.

>>> t = TridentTuple(("the cow", 3), ("sentence", "n"))
>>> t[0], t.get("n"), t.values, len(t)
('the cow', 3, ('the cow', 3), 2)
>>> c = TridentCollector(); c.emit(("the",)); c.emit(("cow",)); c.rows
[('the',), ('cow',)]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["Fields", "TridentCollector", "TridentTuple", "as_fields"]

Fields = tuple[str, ...]


def as_fields(fields: str | Sequence[str]) -> Fields:
    """Normalise a field list (a single name is one field).

    >>> as_fields("word"), as_fields(["word", "n"])
    (('word',), ('word', 'n'))
    """
    return (fields,) if isinstance(fields, str) else tuple(fields)


class TridentTuple(Sequence[Any]):
    """Read-only values with field names; index by position or with :meth:`get` by name."""

    __slots__ = ("_fields", "_values")

    def __init__(self, values: Sequence[Any], fields: Sequence[str]) -> None:
        self._values = tuple(values)
        self._fields = tuple(fields)

    @property
    def values(self) -> tuple[Any, ...]:
        """The values, in field order."""
        return self._values

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
            return self._values[self._fields.index(field)]
        except ValueError:
            msg = f"field {field!r} is not in this tuple; available: {list(self._fields)}"
            raise KeyError(msg) from None

    def __getitem__(self, index: Any) -> Any:
        return self._values[index]

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __repr__(self) -> str:
        return f"TridentTuple({dict(zip(self._fields, self._values, strict=True))!r})"


class TridentCollector:
    """Collects the tuples an operation emits."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def emit(self, values: Sequence[Any]) -> None:
        """Emit one tuple of values (in the order of the operation's output fields)."""
        self.rows.append(tuple(values))
