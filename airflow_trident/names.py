"""Validation of names that become znode path segments and SQL identifiers.

Topology, spout and state names are stable ids: they name znodes in ZooKeeper and tables in the
state database, so they are checked once, when given, with one rule that is safe for both.

Examples
--------
>>> from airflow_trident.names import validate_name
>>> validate_name("word_counts", kind="state")
'word_counts'
>>> validate_name("bad name", kind="state")
Traceback (most recent call last):
...
airflow_trident.errors.InvalidNameError: state name 'bad name' is invalid: ...
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

from airflow_trident.errors import InvalidNameError

__all__ = ["decode_segment", "encode_segment", "validate_name"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def validate_name(name: object, *, kind: str) -> str:
    """Return ``name`` if it is a valid id, else raise :class:`InvalidNameError`.

    A valid id starts with a letter or ``_``, then letters, digits or ``_``, 63 characters at most
    (PostgreSQL's identifier limit). Such a name is also a valid znode path segment.

    Parameters
    ----------
    name:
        The candidate name.
    kind:
        What the name names (``"topology"``, ``"state"``, ...), used in the message.

    Raises
    ------
    InvalidNameError
        If ``name`` is not a string matching the rule above.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        msg = (
            f"{kind} name {name!r} is invalid: use 1-63 letters, digits or '_', starting with a "
            f"letter or '_' (it becomes a ZooKeeper path segment and a SQL identifier)"
        )
        raise InvalidNameError(msg)
    return name


def encode_segment(value: str) -> str:
    """Encode any string (an Airflow run id, say) as one safe znode path segment.

    >>> encode_segment("scheduled__2026-01-01T00:00:00+00:00")
    'scheduled__2026-01-01T00%3A00%3A00%2B00%3A00'
    >>> decode_segment(encode_segment("a/b"))
    'a/b'
    """
    if not value:
        msg = "an empty string cannot be a znode path segment"
        raise InvalidNameError(msg)
    return quote(value, safe="-_.~").replace(".", "%2E")


def decode_segment(segment: str) -> str:
    """Invert :func:`encode_segment`."""
    return unquote(segment)
