"""The coordinator's state in ZooKeeper (Trident's ``MasterBatchCoordinator`` bookkeeping).

Every write is a compare-and-set on a node version; multi-node writes are kazoo transactions whose
every result is checked (kazoo returns failures instead of raising). Public methods run their
``_inner_*`` twin under ``client.retry``, and each ``_inner_*`` is safe to run twice: a write that
may have landed before a connection loss is recognised on the re-run.

:class:`CoordinatorStore` is what callers see
(:class:`~airflow_trident.coordination.protocol.CoordinatorStoreProtocol`); it hands out one
part per recipe, as kazoo hands out its recipes (``kazoo.recipe``): ``store.runs``, txid
allocation and run bindings (:mod:`~airflow_trident.coordination.runs`); ``store.attempts``,
attempts and commit markers (:mod:`~airflow_trident.coordination.attempts`); ``store.metas``,
batch metadata (:mod:`~airflow_trident.coordination.metas`); ``store.commits``, the committed txid
with its token and the opaque spouts' committed metadata in one transaction
(:mod:`~airflow_trident.coordination.commits`); ``store.nodes``, the small node recipes of
:mod:`~airflow_trident.coordination.znodes` they share. Rotation
(:meth:`CoordinatorStore.cleanup_before`) and spouts' own state
(:meth:`CoordinatorStore.partition_state`) span them and live here. The flat names of before
(``store.commit(...)``) still work, with a :class:`DeprecationWarning`, until 0.2.0.

Examples
--------
>>> import os
>>> from airflow_trident.coordination.client import ZkConfig, connect
>>> client = connect(ZkConfig(hosts=os.environ.get("TRIDENT_ZK_HOSTS", "127.0.0.1:2181")))
>>> store = CoordinatorStore(client, CoordinatorPaths("/trident_doctest", "wc"))
>>> store.delete_all()
>>> txid = store.runs.bind_run("manual__1")                # allocate txid 1 for this run
>>> txid, store.runs.bind_run("manual__1")                 # the same run re-binds, no new txid
(1, 1)
>>> store.attempts.next_attempt(txid), store.attempts.next_attempt(txid)  # a new id per emit
(TransactionAttempt(txid=1, attempt_id=0), TransactionAttempt(txid=1, attempt_id=1))
>>> store.metas.put_meta("sentences", txid, {"count": 3, "offset": 0})
>>> store.metas.get_meta("sentences", txid)
{'count': 3, 'offset': 0}
>>> store.commits.commit(txid, token="committer-a")
>>> store.commits.committed_txid()
1
>>> store.delete_all(); client.stop()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient

from airflow_trident.coordination.attempts import Attempts
from airflow_trident.coordination.commits import CommittedTxid
from airflow_trident.coordination.metas import BatchMetas
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.protocol import moved_to_part
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

    if not TYPE_CHECKING:  # the checker holds callers to the parts

        def __getattr__(self, name: str) -> Any:
            """The flat names of before (``store.commit``), deprecated: see
            :data:`~airflow_trident.coordination.protocol.FLAT_NAMES`."""
            return moved_to_part(self, name)

    # -- what spans the recipes ------------------------------------------------------------------

    def partition_state(self, spout: str) -> PartitionState:
        """Partitioned spout ``spout``'s per-partition metadata, in ZooKeeper beside this."""
        return ZkPartitionState(self, spout)

    def cleanup_before(self, txid: int, *, runs_before: int | None = None) -> int:
        """Delete attempts and metadata of txids below ``txid``, and run bindings of txids below
        ``runs_before`` (default ``txid``); return the count.

        Bindings are found through the txid -> runs index (:meth:`RunBindings.runs_of_txid
        <airflow_trident.coordination.runs.RunBindings.runs_of_txid>`): the cost is
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
