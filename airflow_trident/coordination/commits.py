"""The committed txid: advanced from txid-1 to txid by compare-and-set, with a token that lets
a committer recognise its own commit after a connection loss, and the opaque spouts' committed
partition metadata written in the same ZooKeeper transaction."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.znodes import Znodes, check_results, decode_json, encode_json
from airflow_trident.errors import CommitConflictError, CommitOrderError
from airflow_trident.spout.tx_state import TransactionWrite

__all__ = ["CommittedTxid"]

log = logging.getLogger("airflow_trident.coordination.store")


class CommittedTxid:
    """The committed txid of one topology."""

    def __init__(self, nodes: Znodes, paths: CoordinatorPaths) -> None:
        self.nodes = nodes
        self.client = nodes.client
        self.paths = paths

    def committed_txid(self) -> int:
        """The last committed txid (0 before the first commit)."""
        try:
            data, _ = self.client.retry(self.client.get, self.paths.committed_txid)
        except NoNodeError:
            return 0
        return int(decode_json(data)["txid"])

    def commit(
        self,
        txid: int,
        *,
        token: str | None = None,
        writes: Mapping[str, Any] | None = None,
        prepared: Sequence[TransactionWrite] = (),
    ) -> None:
        """Advance the committed txid from ``txid - 1`` to ``txid`` by compare-and-set.

        ``writes`` (path -> JSON value) and ``prepared`` (writes that add themselves, e.g. the
        committed metadata of every partition of an opaque spout in one value,
        :meth:`~airflow_trident.coordination.spout_state.ZkPartitionState.committed_write`) are
        stored in the same ZooKeeper transaction: opaque spouts keep the partition metadata of
        a batch this way, only once it commits. ``token``
        names this committer, so a retry after a connection loss recognises its own commit.

        Raises
        ------
        CommitConflictError
            If ``txid`` is already committed (by another committer, or earlier).
        CommitOrderError
            If ``txid - 1`` is not committed yet.
        """
        token = token or uuid.uuid4().hex
        encoded = {p: encode_json(v, what=f"commit write {p}") for p, v in (writes or {}).items()}
        self.client.retry(self._inner_commit, txid, token, encoded, tuple(prepared))
        log.info("topology %s: committed txid %d", self.paths.topology, txid)

    def _inner_commit(
        self,
        txid: int,
        token: str,
        writes: Mapping[str, bytes],
        prepared: tuple[TransactionWrite, ...] = (),
    ) -> None:
        path = self.paths.committed_txid
        while True:
            self.nodes.ensure(path, {"txid": 0, "token": None})
            data, stat = self.client.get(path)
            current = decode_json(data)
            if current["txid"] == txid and current.get("token") == token:
                return  # our own commit, landed before a connection loss
            if current["txid"] >= txid:
                msg = (
                    f"txid {txid} of topology {self.paths.topology!r} is already committed "
                    f"(committed txid is {current['txid']}); another committer won the "
                    f"compare-and-set. Nothing more was written by this one"
                )
                raise CommitConflictError(msg)
            if current["txid"] != txid - 1:
                msg = (
                    f"cannot commit txid {txid} of topology {self.paths.topology!r}: committed "
                    f"txid is {current['txid']}, so txid {current['txid'] + 1} must commit first"
                )
                raise CommitOrderError(msg)
            tx = self.client.transaction()
            new = encode_json({"txid": txid, "token": token}, what="committed txid")
            tx.set_data(path, new, stat.version)
            for write_path, value in writes.items():
                if self.client.exists(write_path) is None:
                    self.nodes.ensure_parent(write_path)
                    tx.create(write_path, value)
                else:
                    tx.set_data(write_path, value)
            for write in prepared:
                write.add_to(self.client, tx)
            failure = check_results(tx.commit())
            if failure is None:
                return
            if not isinstance(failure, BadVersionError | NodeExistsError):
                raise failure
            # Lost a race: re-read; the next loop reports a conflict or retries.
