"""Attempts of a txid (every emit is a new one; ids rise and are kept across restarts) and the
marker that a commit of a txid started applying state (with the txid's shape, the first
commit's: :mod:`~airflow_trident.runtime.shape`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.znodes import Znodes, decode_json, encode_json

__all__ = ["Attempts"]


class Attempts:
    """The attempts of one topology's txids."""

    def __init__(self, nodes: Znodes, paths: CoordinatorPaths) -> None:
        self.nodes = nodes
        self.client = nodes.client
        self.paths = paths

    def attempt(self, txid: int) -> TransactionAttempt | None:
        """The latest attempt of ``txid``, ``None`` if it was never emitted."""
        try:
            data, _ = self.client.retry(self.client.get, self.paths.attempt(txid))
        except NoNodeError:
            return None
        return TransactionAttempt(txid, int(decode_json(data)))

    def attempt_started_at(self, txid: int) -> datetime | None:
        """When the latest attempt of ``txid`` started (its attempt node's last change; the
        begin's creation when none started), ``None`` if it was never emitted. The commit
        keeps it in the ledger: a later replay's attempt changes the node."""
        try:
            _, stat = self.client.retry(self.client.get, self.paths.attempt(txid))
        except NoNodeError:
            return None
        return datetime.fromtimestamp(stat.last_modified, UTC)

    def next_attempt(self, txid: int) -> TransactionAttempt:
        """Record a new emit of ``txid`` and return its attempt (ids rise; kept in ZooKeeper).

        A retry after a connection loss may skip an id; ids only need to rise.
        """
        result: TransactionAttempt = self.client.retry(self._inner_next_attempt, txid)
        return result

    def _inner_next_attempt(self, txid: int) -> TransactionAttempt:
        path = self.paths.attempt(txid)
        while True:
            try:
                data, stat = self.client.get(path)
            except NoNodeError:
                try:
                    self.client.create(path, encode_json(0, what="attempt"), makepath=True)
                except NodeExistsError:
                    continue
                return TransactionAttempt(txid, 0)
            attempt_id = int(decode_json(data)) + 1
            try:
                self.client.set(path, encode_json(attempt_id, what="attempt"), stat.version)
            except BadVersionError:
                continue
            return TransactionAttempt(txid, attempt_id)

    def mark_commit_started(self, txid: int, shape: Mapping[str, Any] | None = None) -> bool:
        """Record that a commit of ``txid`` starts applying state, with the txid's ``shape``
        (:func:`~airflow_trident.runtime.shape.batch_shape`) as the node's data; return whether
        one had already started (then state may hold an earlier attempt's writes of ``txid``,
        and the node keeps the first one's shape).

        A create retried after a connection loss may find its own node and answer ``True``:
        that only costs the caller a needless check, never a missed one.
        """
        path = self.paths.commit_started(txid)
        data = b"" if shape is None else encode_json(dict(shape), what=f"shape of txid {txid}")
        try:
            self.client.retry(self.client.create, path, data, makepath=True)
        except NodeExistsError:
            return True
        return False

    def commit_shape(self, txid: int) -> dict[str, Any] | None:
        """The shape the first commit of ``txid`` started with (``None``: no commit started,
        or one started before shapes were recorded)."""
        try:
            data, _ = self.client.retry(self.client.get, self.paths.commit_started(txid))
        except NoNodeError:
            return None
        shape = decode_json(data)
        return shape if isinstance(shape, dict) else None
