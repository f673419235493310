"""The coordinator's state in ZooKeeper (Trident's ``MasterBatchCoordinator`` bookkeeping).

Every write is a compare-and-set on a node version; multi-node writes are kazoo transactions whose
every result is checked (kazoo returns failures instead of raising). Public methods run their
``_inner_*`` twin under ``client.retry``, and each ``_inner_*`` is safe to run twice: a write that
may have landed before a connection loss is recognised on the re-run.

:class:`CoordinatorStore` is what callers see
(:class:`~airflow_trident.coordination.protocol.CoordinatorStoreProtocol`); it composes one
module per recipe, as kazoo's ``recipe/`` does: txid allocation and run bindings
(:mod:`~airflow_trident.coordination.runs`), attempts and commit markers
(:mod:`~airflow_trident.coordination.attempts`), batch metadata
(:mod:`~airflow_trident.coordination.metas`), the committed txid with its token and the opaque
spouts' committed metadata in one transaction (:mod:`~airflow_trident.coordination.commits`),
over the small node recipes of :mod:`~airflow_trident.coordination.znodes`; rotation
(:meth:`CoordinatorStore.cleanup_before`) spans them and lives here.

Examples
--------
>>> import os
>>> from airflow_trident.coordination.client import ZkConfig, connect
>>> client = connect(ZkConfig(hosts=os.environ.get("TRIDENT_ZK_HOSTS", "127.0.0.1:2181")))
>>> store = CoordinatorStore(client, CoordinatorPaths("/trident_doctest", "wc"))
>>> store.delete_all()
>>> txid = store.bind_run("manual__1")                     # allocate txid 1 for this run
>>> txid, store.bind_run("manual__1")                      # the same run re-binds, no new txid
(1, 1)
>>> store.next_attempt(txid), store.next_attempt(txid)    # every re-emit gets a new attempt id
(TransactionAttempt(txid=1, attempt_id=0), TransactionAttempt(txid=1, attempt_id=1))
>>> store.put_meta("sentences", txid, {"count": 3, "offset": 0})
>>> store.get_meta("sentences", txid)
{'count': 3, 'offset': 0}
>>> store.commit(txid, token="committer-a")
>>> store.committed_txid()
1
>>> store.delete_all(); client.stop()
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kazoo.client import KazooClient

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.coordination.attempts import Attempts
from airflow_trident.coordination.commits import CommittedTxid
from airflow_trident.coordination.metas import BatchMetas
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.runs import RunBindings, require_allocated
from airflow_trident.coordination.spout_state import ZkPartitionState
from airflow_trident.coordination.znodes import Znodes, encode_json
from airflow_trident.spout.tx_state import PartitionState

__all__ = ["CoordinatorStore", "encode_json", "require_allocated"]


class CoordinatorStore:
    """Txids, attempts, batch metadata, run bindings and the committed txid of one topology
    (each a recipe of its own: ``runs``, ``attempts``, ``metas``, ``commits``)."""

    def __init__(self, client: KazooClient, paths: CoordinatorPaths) -> None:
        self.client = client
        self.paths = paths
        self.nodes = Znodes(client)
        self.runs = RunBindings(self.nodes, paths)
        self.attempts = Attempts(self.nodes, paths)
        self.metas = BatchMetas(self.nodes, paths)
        self.commits = CommittedTxid(self.nodes, paths)

    # -- txids and runs (RunBindings) ------------------------------------------------------------

    def current_txid(self) -> int:
        """The last txid allocated (0 before the first batch)."""
        return self.runs.current_txid()

    def allocate_txid(self) -> int:
        """Allocate the next txid (no run bound to it)."""
        return self.runs.allocate_txid()

    def txid_for_run(self, run_id: str) -> int | None:
        """The txid bound to ``run_id``, ``None`` if the run has none yet."""
        return self.runs.txid_for_run(run_id)

    def runs_of_txid(self, txid: int) -> list[str]:
        """The run ids bound to ``txid``, oldest binding first."""
        return self.runs.runs_of_txid(txid)

    def bind_run(self, run_id: str, txid: int | None = None) -> int:
        """Return the txid of ``run_id``, binding it first (see :meth:`RunBindings.bind_run
        <airflow_trident.coordination.runs.RunBindings.bind_run>`)."""
        return self.runs.bind_run(run_id, txid)

    def bind_new_run(self, run_id: str, txid: int) -> int:
        """Allocate exactly ``txid`` and bind ``run_id`` to it (``airflow-trident backfill``)."""
        return self.runs.bind_new_run(run_id, txid)

    # -- attempts (Attempts) ---------------------------------------------------------------------

    def attempt(self, txid: int) -> TransactionAttempt | None:
        """The latest attempt of ``txid``, ``None`` if it was never emitted."""
        return self.attempts.attempt(txid)

    def attempt_started_at(self, txid: int) -> datetime | None:
        """When the latest attempt of ``txid`` started, ``None`` if it was never emitted."""
        return self.attempts.attempt_started_at(txid)

    def next_attempt(self, txid: int) -> TransactionAttempt:
        """Record a new emit of ``txid`` and return its attempt (ids rise)."""
        return self.attempts.next_attempt(txid)

    def mark_commit_started(self, txid: int, shape: Mapping[str, Any] | None = None) -> bool:
        """Record that a commit of ``txid`` starts applying state, the first one with the
        txid's ``shape``; whether one had already."""
        return self.attempts.mark_commit_started(txid, shape)

    def commit_shape(self, txid: int) -> dict[str, Any] | None:
        """The shape the first commit of ``txid`` started with (``None``: none recorded)."""
        return self.attempts.commit_shape(txid)

    # -- batch metadata (BatchMetas) -------------------------------------------------------------

    def put_meta(self, spout: str, txid: int, meta: Any, *, overwrite: bool = False) -> None:
        """Store ``spout``'s metadata for ``txid`` (fixed unless ``overwrite``)."""
        self.metas.put_meta(spout, txid, meta, overwrite=overwrite)

    def get_meta(self, spout: str, txid: int) -> Any:
        """``spout``'s metadata for ``txid``; ``None`` when there is none."""
        return self.metas.get_meta(spout, txid)

    def has_meta(self, spout: str, txid: int) -> bool:
        """Whether ``spout`` stored metadata for ``txid``."""
        return self.metas.has_meta(spout, txid)

    def latest_meta_before(self, spout: str, txid: int) -> tuple[int, Any] | None:
        """The newest ``(txid, metadata)`` of ``spout`` strictly before ``txid``, if any."""
        return self.metas.latest_meta_before(spout, txid)

    # -- commit (CommittedTxid) ------------------------------------------------------------------

    def committed_txid(self) -> int:
        """The last committed txid (0 before the first commit)."""
        return self.commits.committed_txid()

    def commit(
        self, txid: int, *, token: str | None = None, writes: Mapping[str, Any] | None = None
    ) -> None:
        """Advance the committed txid ``txid - 1 -> txid`` by compare-and-set, ``writes`` in the
        same transaction (see :meth:`CommittedTxid.commit
        <airflow_trident.coordination.commits.CommittedTxid.commit>`)."""
        self.commits.commit(txid, token=token, writes=writes)

    # -- spouts' own state, rotation -------------------------------------------------------------

    def read_json(self, path: str) -> Any:
        """The JSON value at ``path`` (for spouts' own state), ``None`` when absent."""
        return self.nodes.read_json(path)

    def write_json(self, path: str, value: Any) -> None:
        """Create or replace the JSON value at ``path``."""
        self.nodes.write_json(path, value)

    def partition_state(self, spout: str) -> PartitionState:
        """Partitioned spout ``spout``'s per-partition metadata, in ZooKeeper beside this."""
        return ZkPartitionState(self, spout)

    def cleanup_before(self, txid: int, *, runs_before: int | None = None) -> int:
        """Delete attempts and metadata of txids below ``txid``, and run bindings of txids below
        ``runs_before`` (default ``txid``); return the count.

        Bindings are found through the txid -> runs index (:meth:`runs_of_txid`): the cost is
        one ``get_children`` of the index plus a read and a delete per pruned binding, however
        many bindings are kept.

        The newest metadata of each spout below ``txid`` is kept, because the next batch of an
        opaque spout derives from it.
        """
        removed = 0
        for earlier in self.nodes.txid_children(self.paths.attempts):
            if earlier < txid:
                removed += self.nodes.delete(self.paths.attempt(earlier))
        for spout in self.nodes.children(f"{self.paths.coordinator}/meta"):
            metas = self.nodes.txid_children(self.paths.meta_root(spout))
            below = sorted(t for t in metas if t < txid)
            for earlier in below[:-1]:
                removed += self.nodes.delete(self.paths.meta(spout, earlier))
        runs_below = txid if runs_before is None else runs_before
        for earlier in self.nodes.txid_children(self.paths.txid_runs_root):
            if earlier < runs_below:
                removed += self.runs.prune_runs_of(earlier)
        for earlier in self.nodes.txid_children(self.paths.commits_started):
            if earlier < txid:
                removed += self.nodes.delete(self.paths.commit_started(earlier))
        return removed

    def delete_all(self) -> None:
        """Delete every node of this topology (tests, and dropping a topology)."""
        self.nodes.delete(self.paths.base)
