"""Each spout's batch metadata per txid: fixed for transactional spouts (storing a different
value is an error), overwritten for opaque ones; the newest before a txid.

A spout's batch metadata grows with its partitions (a Kafka spout's lists each partition's end):
a large value is compressed, and chunked if it must be (:mod:`~airflow_trident.coordination.
packed`); one too large even so is refused before anything of it is written."""

from __future__ import annotations

from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from airflow_trident.coordination.packed import Packed, pack, read_node, stage_write
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.znodes import Znodes, check_results, encode_json
from airflow_trident.errors import MetadataError

__all__ = ["BatchMetas"]


class BatchMetas:
    """The batch metadata of one topology's spouts."""

    def __init__(self, nodes: Znodes, paths: CoordinatorPaths) -> None:
        self.nodes = nodes
        self.client = nodes.client
        self.paths = paths

    def put_meta(self, spout: str, txid: int, meta: Any, *, overwrite: bool = False) -> None:
        """Store ``spout``'s metadata for ``txid`` as JSON.

        Without ``overwrite`` (transactional spouts) the metadata of a txid is fixed: storing the
        same value again is a no-op, a different one is an error.

        Raises
        ------
        MetadataNotSerializableError
            If ``meta`` is not JSON-serialisable (nothing is written).
        MetadataError
            If the txid already has different metadata and ``overwrite`` is false.
        """
        what = f"metadata of spout {spout!r} for txid {txid}"
        packed = pack(meta, what=what, partitions=_partition_count(meta))
        canonical = encode_json(meta, what=what)
        path = self.paths.meta(spout, txid)
        self.client.retry(self._inner_put_meta, path, packed, canonical, overwrite)

    def _inner_put_meta(self, path: str, packed: Packed, canonical: bytes, overwrite: bool) -> None:
        stored = None  # a new txid's first: one create, no read
        while True:
            tx = self.client.transaction()
            stage_write(tx, path, packed, stored)
            failure = check_results(tx.commit())
            if failure is None:
                return
            if isinstance(failure, NoNodeError) and stored is None:
                self.nodes.ensure_parent(path)
                continue
            if not isinstance(failure, BadVersionError | NodeExistsError | NoNodeError):
                raise failure
            stored = read_node(self.client, path)
            if stored is None:
                continue
            if encode_json(stored.value, what=path) == canonical:
                return
            if not overwrite:
                msg = (
                    f"metadata at {path} is fixed for its txid (transactional spout) and "
                    f"differs from the new value; stored="
                    f"{encode_json(stored.value, what=path).decode()[:200]} "
                    f"new={canonical.decode()[:200]}"
                )
                raise MetadataError(msg)

    def get_meta(self, spout: str, txid: int) -> Any:
        """``spout``'s metadata for ``txid``; ``None`` when there is none."""
        node = self.client.retry(read_node, self.client, self.paths.meta(spout, txid))
        return None if node is None else node.value

    def has_meta(self, spout: str, txid: int) -> bool:
        """Whether ``spout`` stored metadata for ``txid``."""
        return self.client.retry(self.client.exists, self.paths.meta(spout, txid)) is not None

    def latest_meta_before(self, spout: str, txid: int) -> tuple[int, Any] | None:
        """The newest ``(txid, metadata)`` of ``spout`` strictly before ``txid``, if any."""
        for earlier in sorted(self.nodes.txid_children(self.paths.meta_root(spout)), reverse=True):
            if earlier < txid:
                return earlier, self.get_meta(spout, earlier)
        return None


def _partition_count(meta: Any) -> int | None:
    """How many partitions batch metadata lists (for the message of one too large)."""
    partitions = meta.get("partitions") if isinstance(meta, dict) else meta
    return len(partitions) if isinstance(partitions, list | dict) else None
