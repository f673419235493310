"""Partitioned spouts' partition metadata in ZooKeeper: one value per txid, not per partition.

Under ``/<root>/<topology>/spout_state/<spout>/``:

* ``txids/<txid>`` — partition -> metadata of every partition of that txid (Trident's
  ``RotatingTransactionalState``, one znode per txid): read once per batch step, written once;
* ``committed`` — partition -> committed metadata (opaque spouts), written by the coordinator's
  commit in the same transaction as the committed txid (:meth:`ZkPartitionState.committed_write`);
* ``base`` — ``{"txid": t, "latest": {partition: [txid, metadata]}}``: each partition's newest
  metadata among the txids rotated away (up to ``t``), so a partition absent for longer than
  the kept txids still resumes where it stood;
* ``layout`` — ``{"version": 2, "legacy_top": n}``, written once the old layout (one node per
  partition and txid under ``user/<spout>``, :mod:`~airflow_trident.coordination.
  legacy_spout_state`) was copied here; the old nodes are deleted once rotation passes ``n``.

Values handed out are shared with the scope's cache (copying thousands of small values cost more
than the round trips saved): callers read them, never change them in place. Every value may be
compressed and chunked (:mod:`~airflow_trident.coordination.packed`); every
write is a compare-and-set on the version read (a lost race re-reads and merges again). Inside
:meth:`ZkPartitionState.cached` a value is read once: a batch's begin, emit or commit costs a
few round trips whatever the partition count.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from airflow_trident.coordination.legacy_spout_state import read_legacy
from airflow_trident.coordination.packed import (
    Packed,
    StoredNode,
    chunk_path,
    new_version,
    pack,
    read_node,
    stage_write,
)
from airflow_trident.coordination.paths import CoordinatorPaths, parse_txid_node, txid_node
from airflow_trident.coordination.znodes import check_results
from airflow_trident.errors import MetadataError

__all__ = ["ZkPartitionState"]

_TRIES = 20


_RACES = (BadVersionError, NodeExistsError, NoNodeError)


class SpoutStore(Protocol):
    """What the partition state needs of :class:`~airflow_trident.coordination.store.
    CoordinatorStore` (which builds it): the session and the topology's paths."""

    client: KazooClient
    paths: CoordinatorPaths


class ZkPartitionState:
    """:class:`~airflow_trident.spout.tx_state.PartitionState` kept in ZooKeeper (see the
    module docstring)."""

    def __init__(self, store: SpoutStore, spout: str) -> None:
        self._client = store.client
        self.spout = spout
        self.root = store.paths.spout_state(spout)
        self._legacy_root = store.paths.user(spout)
        self._legacy_top: int | None = None
        self._layout_checked = False
        self._scope = 0
        self._nodes: dict[str, StoredNode | None] = {}
        self._txid_list: list[int] | None = None
        self._parents: set[str] = set()

    # -- paths -----------------------------------------------------------------------------------

    def txid_path(self, txid: int) -> str:
        """The value of every partition's metadata for ``txid``."""
        return f"{self.root}/txids/{txid_node(txid)}"

    @property
    def committed_node(self) -> str:
        """The value of every partition's committed metadata."""
        return f"{self.root}/committed"

    @property
    def base_node(self) -> str:
        """Each partition's newest metadata among the rotated txids."""
        return f"{self.root}/base"

    # -- reading, once per scope -----------------------------------------------------------------

    @contextlib.contextmanager
    def cached(self) -> Iterator[None]:
        """Within the scope each value is read once (writes update what was read)."""
        self._scope += 1
        try:
            yield
        finally:
            self._scope -= 1
            if not self._scope:
                self._nodes.clear()
                self._txid_list = None

    def read(self, path: str) -> StoredNode | None:
        """The value at ``path`` (once per scope)."""
        if self._scope and path in self._nodes:
            return self._nodes[path]
        node: StoredNode | None = self._client.retry(read_node, self._client, path)
        if self._scope:
            self._nodes[path] = node
        return node

    def _txids(self) -> list[int]:
        """The txids with a value, oldest first."""
        if self._scope and self._txid_list is not None:
            return self._txid_list
        try:
            names = self._client.retry(self._client.get_children, f"{self.root}/txids")
        except NoNodeError:
            names = []
        found = sorted(t for t in map(parse_txid_node, names) if t is not None)
        if self._scope:
            self._txid_list = found
        return found

    def _base(self) -> dict[str, Any]:
        node = self.read(self.base_node)
        return {"txid": 0, "latest": {}} if node is None else dict(node.value)

    # -- per txid --------------------------------------------------------------------------------

    def get(self, partition: str, txid: int) -> Any:
        return self.get_many(txid, [partition])[partition]

    def get_many(self, txid: int, partitions: Iterable[str]) -> dict[str, Any]:
        self._check_layout()
        node = self.read(self.txid_path(txid))
        if node is not None:
            values = node.value
        else:
            retained = self._txids()
            values = {}
            if not retained or txid < retained[0]:  # rotated away: its newest partitions stay
                latest = self._base()["latest"]
                values = {p: e[1] for p, e in latest.items() if e[0] == txid}
        return {p: values.get(p) for p in partitions}

    def put(self, partition: str, txid: int, meta: Any) -> None:
        self.put_many(txid, {partition: meta})

    def put_many(self, txid: int, metas: Mapping[str, Any]) -> None:
        self._check_layout()
        added = dict(metas)
        self._update(
            self.txid_path(txid), lambda old: {**old, **added}, f"partition metadata of txid {txid}"
        )
        if self._txid_list is not None and txid not in self._txid_list:
            self._txid_list = sorted([*self._txid_list, txid])

    def latest_before(self, partition: str, txid: int) -> tuple[int, Any] | None:
        return self.latest_before_many([partition], txid)[partition]

    def latest_before_many(
        self, partitions: Iterable[str], txid: int
    ) -> dict[str, tuple[int, Any] | None]:
        self._check_layout()
        wanted = list(dict.fromkeys(partitions))
        found: dict[str, tuple[int, Any] | None] = dict.fromkeys(wanted)
        missing = set(wanted)
        for earlier in reversed([t for t in self._txids() if t < txid]):
            node = self.read(self.txid_path(earlier))
            if node is None:
                continue
            for partition in [p for p in missing if p in node.value]:
                found[partition] = (earlier, node.value[partition])
                missing.discard(partition)
            if not missing:
                break
        if missing:
            latest = self._base()["latest"]
            for partition in missing:
                entry = latest.get(partition)
                if entry is not None and entry[0] < txid:
                    found[partition] = (int(entry[0]), entry[1])
        return found

    def newest_by_partition(self) -> dict[str, tuple[int, Any]]:
        """Every partition -> ``(txid, metadata)`` of its newest txid: ``base``, then every
        kept txid's value (one read each)."""
        self._check_layout()
        with self.cached():
            newest = {p: (int(e[0]), e[1]) for p, e in self._base()["latest"].items()}
            for txid in self._txids():
                node = self.read(self.txid_path(txid))
                for partition, meta in ({} if node is None else node.value).items():
                    newest[partition] = (txid, meta)
        return newest

    # -- committed (opaque spouts) ---------------------------------------------------------------

    def get_committed(self, partition: str) -> Any:
        return self.committed_many([partition])[partition]

    def committed_many(self, partitions: Iterable[str]) -> dict[str, Any]:
        self._check_layout()
        node = self.read(self.committed_node)
        values = {} if node is None else node.value
        return {p: values.get(p) for p in partitions}

    def committed_all(self) -> dict[str, Any]:
        """Every partition's committed metadata."""
        self._check_layout()
        node = self.read(self.committed_node)
        return {} if node is None else dict(node.value)

    def put_committed(self, partition: str, meta: Any) -> None:
        self.put_committed_many({partition: meta})

    def put_committed_many(self, metas: Mapping[str, Any]) -> None:
        self._check_layout()
        added = dict(metas)
        self._update(self.committed_node, lambda old: {**old, **added}, "committed metadata")

    def committed_write(self, metas: Mapping[str, Any]) -> CommittedWrite:
        """The committed metadata ``metas`` as writes of the coordinator's commit transaction;
        read and packed now (too large: refused now, before any state is written)."""
        self._check_layout()
        self._ensure_parent(self.committed_node)
        return CommittedWrite(self, dict(metas))

    # -- rotation --------------------------------------------------------------------------------

    def cleanup_before(self, txid: int) -> int:
        """Fold the values of txids below ``txid`` into ``base`` and delete them (one
        transaction); the count deleted. Each partition's newest metadata stays in ``base``."""
        self._check_layout()
        removed = 0
        for _ in range(_TRIES):
            below = [t for t in self._fresh_txids() if t < txid]
            if not below:
                break
            failure = self._client.retry(self._fold, below)
            if failure is None:
                removed = len(below)
                break
            if not isinstance(failure, _RACES):
                raise failure
        if self._legacy_top is not None and self._legacy_top < txid:
            self._drop_legacy()
        return removed

    def _fresh_txids(self) -> list[int]:
        self._txid_list = None
        return self._txids()

    def _fold(self, below: list[int]) -> Exception | None:
        base_old = read_node(self._client, self.base_node)
        base: dict[str, Any] = {"txid": 0, "latest": {}}
        if base_old is not None:
            base = dict(base_old.value)
        latest: dict[str, Any] = dict(base["latest"])
        olds: list[tuple[int, StoredNode]] = []
        for earlier in below:
            node = read_node(self._client, self.txid_path(earlier))
            if node is None:
                continue
            olds.append((earlier, node))
            for partition, meta in node.value.items():
                if partition not in latest or latest[partition][0] <= earlier:
                    latest[partition] = [earlier, meta]
        value = {"txid": max(int(base["txid"]), *below), "latest": latest}
        packed = pack(value, what=f"rotated partition metadata of spout {self.spout!r}",
                      partitions=len(latest))  # fmt: skip
        self._ensure_parent(self.base_node)
        tx = self._client.transaction()
        stage_write(tx, self.base_node, packed, base_old)
        for earlier, node in olds:
            path = self.txid_path(earlier)
            for i in range(node.chunks):
                tx.delete(chunk_path(path, i))
            tx.delete(path, node.version)
        failure = check_results(tx.commit())
        self._nodes.clear()
        return failure

    # -- writing ---------------------------------------------------------------------------------

    def _ensure_parent(self, path: str) -> None:
        parent = path.rsplit("/", 1)[0]
        if parent not in self._parents:
            self._client.retry(self._client.ensure_path, parent)
            self._parents.add(parent)

    def _update(self, path: str, change: Callable[[dict[str, Any]], dict[str, Any]],
                what: str) -> None:  # fmt: skip
        """Compare-and-set ``path`` to ``change(old value)``; a lost race reads and changes
        again."""
        self._ensure_parent(path)
        for _ in range(_TRIES):
            old = self.read(path)
            value = change({} if old is None else dict(old.value))
            packed = pack(value, what=f"{what} of spout {self.spout!r}", partitions=len(value))
            results = self._client.retry(self._commit_one, path, packed, old)
            failure = check_results(results)
            if failure is None:
                self.remember(path, value, results, old, packed)
                return
            if not isinstance(failure, _RACES):
                raise failure
            self._nodes.pop(path, None)
        msg = f"{what} of spout {self.spout!r} at {path} kept changing under this writer"
        raise MetadataError(msg)

    def _commit_one(self, path: str, packed: Packed, old: StoredNode | None) -> list[Any]:
        tx = self._client.transaction()
        stage_write(tx, path, packed, old)
        results: list[Any] = tx.commit()
        return results

    def remember(
        self,
        path: str,
        value: dict[str, Any],
        results: list[Any],
        old: StoredNode | None,
        packed: Packed,
    ) -> None:
        """Keep what a committed write left at ``path``, for the rest of the scope."""
        if self._scope:
            version = new_version(results, old)
            self._nodes[path] = StoredNode(value, version, len(packed.chunks), packed.stored_bytes)

    # -- the layout before (upgrade) -------------------------------------------------------------

    def _check_layout(self) -> None:
        """Once per instance: copy the old layout here, if there is one and it was not yet."""
        if self._layout_checked:
            return
        layout = self._client.retry(read_node, self._client, f"{self.root}/layout")
        if layout is None:
            legacy = read_legacy(self._client, self._legacy_root)
            top = None if legacy is None else legacy.top
            if legacy is not None:
                for txid, metas in sorted(legacy.by_txid.items()):
                    self._create_if_absent(self.txid_path(txid), metas, f"txid {txid}")
                if legacy.committed:
                    self._create_if_absent(self.committed_node, legacy.committed, "committed")
            self._create_if_absent(
                f"{self.root}/layout", {"version": 2, "legacy_top": top}, "layout"
            )
            layout = self._client.retry(read_node, self._client, f"{self.root}/layout")
        top = None if layout is None else layout.value.get("legacy_top")
        self._legacy_top = None if top is None else int(top)
        self._layout_checked = True

    def _create_if_absent(self, path: str, value: Any, what: str) -> None:
        self._ensure_parent(path)
        packed = pack(value, what=f"{what} of spout {self.spout!r} (upgrade)",
                      partitions=len(value))  # fmt: skip
        results = self._client.retry(self._commit_one, path, packed, None)
        failure = check_results(results)
        if failure is not None and not isinstance(failure, NodeExistsError):
            raise failure

    def _drop_legacy(self) -> None:
        """Delete the old layout (once rotation passed its newest txid) and say so."""
        with contextlib.suppress(NoNodeError):
            self._client.retry(self._client.delete, self._legacy_root, recursive=True)
        self._update(f"{self.root}/layout", lambda old: {**old, "legacy_top": None}, "layout")
        self._legacy_top = None


class CommittedWrite:
    """Committed metadata of some partitions merged into the ``committed`` value, as writes of
    one commit transaction (:class:`~airflow_trident.spout.tx_state.TransactionWrite`)."""

    def __init__(self, state: ZkPartitionState, metas: dict[str, Any]) -> None:
        self._state = state
        self._metas = dict(metas)
        self._prepared: tuple[StoredNode | None, Packed] | None = self._prepare(
            state.read(state.committed_node)
        )

    def _prepare(self, old: StoredNode | None) -> tuple[StoredNode | None, Packed]:
        value = {**({} if old is None else old.value), **self._metas}
        what = f"committed metadata of spout {self._state.spout!r}"
        return old, pack(value, what=what, partitions=len(value))

    def add_to(self, client: Any, tx: Any) -> None:
        """Stage the write in ``tx``, checked against the version read (a retry reads again)."""
        prepared = self._prepared
        if prepared is None:
            prepared = self._prepare(read_node(client, self._state.committed_node))
        self._prepared = None
        old, packed = prepared
        stage_write(tx, self._state.committed_node, packed, old)
