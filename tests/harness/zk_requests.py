"""Count a kazoo client's ZooKeeper requests and the bytes they write (a multi-op transaction is
one request): the measure of the coordinator's cost that does not depend on the machine.

>>> from unittest import mock
>>> client = mock.Mock()
>>> counter = RequestCounter(client)
>>> _ = client.get("/a"), client.create("/b", b"xyz")
>>> counter.requests, counter.written
(2, 3)
"""

from __future__ import annotations

from collections import Counter
from typing import Any

__all__ = ["RequestCounter"]

CALLS = ("get", "set", "create", "exists", "get_children", "delete", "ensure_path", "sync")


class RequestCounter:
    """Wraps ``client``'s request methods in place; :attr:`requests` counts them (by name in
    :attr:`by_call`), :attr:`written` sums the bytes of creates and sets."""

    def __init__(self, client: Any) -> None:
        self.requests = 0
        self.written = 0
        self.by_call: Counter[str] = Counter()
        for name in CALLS:
            self._wrap(client, name)
        transaction = client.transaction

        def counted_transaction(*args: Any, **kwargs: Any) -> Any:
            tx = transaction(*args, **kwargs)
            commit = tx.commit
            for op in ("create", "set_data"):
                self._wrap_bytes(tx, op)

            def counted_commit() -> Any:
                self._count("transaction")
                return commit()

            tx.commit = counted_commit
            return tx

        client.transaction = counted_transaction

    def _count(self, name: str) -> None:
        self.requests += 1
        self.by_call[name] += 1

    def _wrap(self, client: Any, name: str) -> None:
        inner = getattr(client, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._count(name)
            if name in ("create", "set") and len(args) > 1 and isinstance(args[1], bytes):
                self.written += len(args[1])
            return inner(*args, **kwargs)

        setattr(client, name, counted)

    def _wrap_bytes(self, tx: Any, name: str) -> None:
        inner = getattr(tx, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            if len(args) > 1 and isinstance(args[1], bytes):
                self.written += len(args[1])
            return inner(*args, **kwargs)

        setattr(tx, name, counted)

    def reset(self) -> tuple[int, int]:
        """``(requests, bytes written)`` since the last reset; both start again at 0."""
        found = (self.requests, self.written)
        self.requests = self.written = 0
        self.by_call.clear()
        return found
