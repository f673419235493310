"""The partition state of the release before 0.2 (``ZkPartitionState`` as of commit 58166b6),
kept here to write the old layout in upgrade tests: one znode per partition and txid,
``user/<spout>/<partition>/<txid>``, and ``user/<spout>/<partition>/committed`` written in the
coordinator's commit transaction.

The class body is the old one; the batch methods today's executors call are loops over its
per-partition methods, and :meth:`LegacyPartitionState.committed_write` adds one write per
partition to the commit transaction as the old coordinator did with ``committed_path``. So the
nodes written, and their values, are what the old release wrote.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from kazoo.client import KazooClient

from airflow_trident.coordination.paths import CoordinatorPaths, parse_txid_node, txid_node
from airflow_trident.coordination.protocol import JsonNodesProtocol
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.coordination.znodes import encode_json
from airflow_trident.names import encode_segment
from airflow_trident.spout.tx_state import PartitionState

__all__ = ["LegacyPartitionState", "LegacyStore"]


class JsonNodes(Protocol):
    client: KazooClient
    paths: CoordinatorPaths

    @property
    def nodes(self) -> JsonNodesProtocol: ...


class LegacyPartitionState:
    """``ZkPartitionState`` of commit 58166b6 (verbatim from ``__init__`` to
    ``cleanup_before``), plus loops for the batch methods."""

    def __init__(self, store: JsonNodes, spout: str) -> None:
        self._store = store
        self._nodes = store.nodes
        self._root = store.paths.user(spout)

    def _partition(self, partition: str) -> str:
        return f"{self._root}/{encode_segment(partition)}"

    def get(self, partition: str, txid: int) -> Any:
        return self._nodes.read_json(f"{self._partition(partition)}/{txid_node(txid)}")

    def put(self, partition: str, txid: int, meta: Any) -> None:
        self._nodes.write_json(f"{self._partition(partition)}/{txid_node(txid)}", meta)

    def latest_before(self, partition: str, txid: int) -> tuple[int, Any] | None:
        client = self._store.client
        path = self._partition(partition)
        if client.retry(client.exists, path) is None:
            return None
        names = client.retry(client.get_children, path)
        earlier = [t for t in map(parse_txid_node, names) if t is not None and t < txid]
        if not earlier:
            return None
        newest = max(earlier)
        return newest, self.get(partition, newest)

    def get_committed(self, partition: str) -> Any:
        return self._nodes.read_json(self.committed_path(partition))

    def committed_path(self, partition: str) -> str:
        return f"{self._partition(partition)}/committed"

    def put_committed(self, partition: str, meta: Any) -> None:
        self._nodes.write_json(self.committed_path(partition), meta)

    def cleanup_before(self, txid: int) -> int:
        """Delete per-txid metadata below ``txid`` (the newest of each partition stays)."""
        client = self._store.client
        if client.retry(client.exists, self._root) is None:
            return 0
        removed = 0
        for partition in client.retry(client.get_children, self._root):
            path = f"{self._root}/{partition}"
            names = client.retry(client.get_children, path)
            below = sorted(t for t in map(parse_txid_node, names) if t is not None and t < txid)
            for old in below[:-1]:
                client.retry(client.delete, f"{path}/{txid_node(old)}")
                removed += 1
        return removed

    # -- the batch methods of today, as the old per-partition calls ----------------------------

    def get_many(self, txid: int, partitions: Iterable[str]) -> dict[str, Any]:
        return {p: self.get(p, txid) for p in partitions}

    def put_many(self, txid: int, metas: Mapping[str, Any]) -> None:
        for partition, meta in metas.items():
            self.put(partition, txid, meta)

    def latest_before_many(
        self, partitions: Iterable[str], txid: int
    ) -> dict[str, tuple[int, Any] | None]:
        return {p: self.latest_before(p, txid) for p in partitions}

    def committed_many(self, partitions: Iterable[str]) -> dict[str, Any]:
        return {p: self.get_committed(p) for p in partitions}

    def put_committed_many(self, metas: Mapping[str, Any]) -> None:
        for partition, meta in metas.items():
            self.put_committed(partition, meta)

    def committed_write(self, metas: Mapping[str, Any]) -> _PathWrites:
        return _PathWrites({self.committed_path(p): v for p, v in metas.items()})

    @contextlib.contextmanager
    def cached(self) -> Iterator[None]:
        yield

    def newest_by_partition(self) -> dict[str, tuple[int, Any]]:
        raise NotImplementedError  # the old release's status read the nodes itself

    def committed_all(self) -> dict[str, Any]:
        raise NotImplementedError


class _PathWrites:
    """What the old coordinator's commit did with ``committed_path``: one create or set per
    partition in the commit transaction (``CommittedTxid._inner_commit`` of 58166b6)."""

    def __init__(self, writes: dict[str, Any]) -> None:
        self._writes = {p: encode_json(v, what=p) for p, v in writes.items()}

    def add_to(self, client: Any, tx: Any) -> None:
        for path, value in self._writes.items():
            if client.exists(path) is None:
                client.ensure_path(path.rsplit("/", 1)[0])
                tx.create(path, value)
            else:
                tx.set_data(path, value)


class LegacyStore(CoordinatorStore):
    """A ZooKeeper coordinator store whose partitioned spouts keep the old layout."""

    def partition_state(self, spout: str) -> PartitionState:
        state: PartitionState = LegacyPartitionState(self, spout)
        return state
