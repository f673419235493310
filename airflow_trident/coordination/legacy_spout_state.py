"""Partitioned spouts' metadata as releases before 0.2 kept it, read once on upgrade.

Before, ``user/<spout>/<partition>/<txid>`` held a partition's metadata for a txid and
``user/<spout>/<partition>/committed`` its committed metadata (opaque spouts): one znode per
partition and txid. :func:`read_legacy` reads all of it (one round trip per node, once) as the
maps the new layout keeps per txid (:mod:`airflow_trident.coordination.spout_state`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from airflow_trident.coordination.paths import parse_txid_node
from airflow_trident.coordination.znodes import decode_json
from airflow_trident.names import decode_segment

__all__ = ["LegacyState", "read_legacy"]


@dataclass
class LegacyState:
    """Everything the old layout held for one spout."""

    by_txid: dict[int, dict[str, Any]] = field(default_factory=dict)
    committed: dict[str, Any] = field(default_factory=dict)

    @property
    def top(self) -> int | None:
        """The newest txid the old layout has metadata of."""
        return max(self.by_txid, default=None)


def _get(client: KazooClient, path: str) -> tuple[bool, Any]:
    try:
        data, _ = client.retry(client.get, path)
    except NoNodeError:
        return False, None
    return True, decode_json(data)


def read_legacy(client: KazooClient, root: str) -> LegacyState | None:
    """The old layout under ``root`` (``user/<spout>``), ``None`` when there is none."""
    try:
        partitions = client.retry(client.get_children, root)
    except NoNodeError:
        return None
    found = LegacyState()
    for encoded in partitions:
        partition = decode_segment(encoded)
        path = f"{root}/{encoded}"
        try:
            names = client.retry(client.get_children, path)
        except NoNodeError:
            continue
        for name in names:
            present, value = _get(client, f"{path}/{name}")
            if not present:
                continue
            if name == "committed":
                found.committed[partition] = value
                continue
            txid = parse_txid_node(name)
            if txid is not None:
                found.by_txid.setdefault(txid, {})[partition] = value
    return found
