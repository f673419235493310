"""Each spout's batch metadata per txid: fixed for transactional spouts (storing a different
value is an error), overwritten for opaque ones; the newest before a txid."""

from __future__ import annotations

from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.znodes import Znodes, decode_json, encode_json
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
        data = encode_json(meta, what=f"metadata of spout {spout!r} for txid {txid}")
        self.client.retry(self._inner_put_meta, self.paths.meta(spout, txid), data, overwrite)

    def _inner_put_meta(self, path: str, data: bytes, overwrite: bool) -> None:
        try:
            self.client.create(path, data, makepath=True)
            return
        except NodeExistsError:
            pass
        stored, stat = self.client.get(path)
        if stored == data:
            return
        if not overwrite:
            msg = (
                f"metadata at {path} is fixed for its txid (transactional spout) and differs "
                f"from the new value; stored={stored.decode()[:200]} new={data.decode()[:200]}"
            )
            raise MetadataError(msg)
        self.client.set(path, data, stat.version)

    def get_meta(self, spout: str, txid: int) -> Any:
        """``spout``'s metadata for ``txid``; ``None`` when there is none."""
        try:
            data, _ = self.client.retry(self.client.get, self.paths.meta(spout, txid))
        except NoNodeError:
            return None
        return decode_json(data)

    def has_meta(self, spout: str, txid: int) -> bool:
        """Whether ``spout`` stored metadata for ``txid``."""
        return self.client.retry(self.client.exists, self.paths.meta(spout, txid)) is not None

    def latest_meta_before(self, spout: str, txid: int) -> tuple[int, Any] | None:
        """The newest ``(txid, metadata)`` of ``spout`` strictly before ``txid``, if any."""
        for earlier in sorted(self.nodes.txid_children(self.paths.meta_root(spout)), reverse=True):
            if earlier < txid:
                return earlier, self.get_meta(spout, earlier)
        return None
