"""The small ZooKeeper recipes every part of the coordinator's bookkeeping uses: JSON values,
counters, idempotent creates, children by txid, recursive deletes, and the check of a kazoo
transaction's results (kazoo returns failures instead of raising)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency

from airflow_trident.coordination.paths import parse_txid_node
from airflow_trident.errors import MetadataNotSerializableError

__all__ = ["Znodes", "check_results", "decode_json", "encode_json"]


def encode_json(value: Any, *, what: str) -> bytes:
    """Encode ``value`` as JSON, or raise :class:`MetadataNotSerializableError` naming ``what``."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        msg = (
            f"{what} is not JSON-serialisable ({exc}); nothing was written. Hint: batch metadata "
            f"must be plain dicts, lists, str, int, float, bool or None"
        )
        raise MetadataNotSerializableError(msg) from exc


def decode_json(data: bytes) -> Any:
    """The JSON value of a node's ``data`` (``None`` for an empty node)."""
    return json.loads(data.decode()) if data else None


def check_results(results: list[Any]) -> Exception | None:
    """The failure of a kazoo transaction, or ``None`` if every operation succeeded.

    The operation that failed carries the real error; the others are only rolled back.
    """
    failures = [r for r in results if isinstance(r, Exception)]
    for failure in failures:
        if not isinstance(failure, RolledBackError | RuntimeInconsistency):
            return failure
    return failures[0] if failures else None


class Znodes:
    """The recipes on one kazoo ``client`` (reads retried by ``client.retry``)."""

    def __init__(self, client: KazooClient) -> None:
        self.client = client

    def read_json(self, path: str) -> Any:
        """The JSON value at ``path``, ``None`` when absent."""
        try:
            data, _ = self.client.retry(self.client.get, path)
        except NoNodeError:
            return None
        return decode_json(data)

    def write_json(self, path: str, value: Any) -> None:
        """Create or replace the JSON value at ``path``."""
        data = encode_json(value, what=f"value at {path}")

        def inner() -> None:
            try:
                self.client.create(path, data, makepath=True)
            except NodeExistsError:
                self.client.set(path, data)

        self.client.retry(inner)

    def read_int(self, path: str) -> int:
        """The integer at ``path`` (0 when absent)."""
        try:
            data, _ = self.client.retry(self.client.get, path)
        except NoNodeError:
            return 0
        return int(decode_json(data))

    def ensure(self, path: str, initial: Any) -> None:
        """Create ``path`` holding ``initial`` unless it exists."""
        if self.client.exists(path) is None:
            with contextlib.suppress(NodeExistsError):
                self.client.create(path, encode_json(initial, what=path), makepath=True)

    def ensure_parent(self, path: str) -> None:
        """Create the parents of ``path``."""
        self.client.ensure_path(path.rsplit("/", 1)[0])

    def create_or_keep(self, path: str, value: Any) -> None:
        """Create ``path`` holding ``value``; an existing node is kept as it is."""
        with contextlib.suppress(NodeExistsError):
            self.client.create(path, encode_json(value, what=path), makepath=True)

    def children(self, path: str) -> list[str]:
        """The children of ``path`` (none when absent)."""
        try:
            children: list[str] = self.client.retry(self.client.get_children, path)
        except NoNodeError:
            return []
        return children

    def txid_children(self, path: str) -> list[int]:
        """The txids the children of ``path`` are named by."""
        txids = (parse_txid_node(name) for name in self.children(path))
        return [t for t in txids if t is not None]

    def delete(self, path: str) -> int:
        """Delete ``path`` and below; 1 if it was there, else 0."""
        try:
            self.client.retry(self.client.delete, path, recursive=True)
        except NoNodeError:
            return 0
        return 1
