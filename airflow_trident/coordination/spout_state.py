"""Partitioned spouts' per-partition metadata in ZooKeeper, under ``/<root>/<topology>/user/``.

``user/<spout>/<partition>/<txid>`` holds a partition's metadata for a txid;
``user/<spout>/<partition>/committed`` the metadata of its last committed batch (opaque spouts),
written by the coordinator's commit in the same transaction as the committed txid.
"""

from __future__ import annotations

from typing import Any, Protocol

from kazoo.client import KazooClient

from airflow_trident.coordination.paths import CoordinatorPaths, parse_txid_node, txid_node
from airflow_trident.coordination.protocol import JsonNodesProtocol
from airflow_trident.names import encode_segment

__all__ = ["ZkPartitionState"]


class JsonNodes(Protocol):
    """What the partition state needs of :class:`~airflow_trident.coordination.store.
    CoordinatorStore` (which builds it): the session, the topology's paths and JSON nodes."""

    client: KazooClient
    paths: CoordinatorPaths

    @property
    def nodes(self) -> JsonNodesProtocol:
        """JSON values at paths (``read_json``, ``write_json``)."""
        ...


class ZkPartitionState:
    """:class:`~airflow_trident.spout.tx_state.PartitionState` kept in ZooKeeper."""

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
