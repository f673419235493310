"""Txid allocation and run bindings: which DAG run is which txid, and which runs a txid had.

A new txid is allocated in the same ZooKeeper transaction as its run's binding (no gaps when
two begins race); a replay binds a run to an allocated txid; an index txid -> runs sits beside
the bindings, written with them and pruned with them.
"""

from __future__ import annotations

import contextlib
import logging

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.znodes import Znodes, check_results, decode_json, encode_json
from airflow_trident.errors import ConfigurationError, MetadataError
from airflow_trident.names import decode_segment

__all__ = ["RunBindings", "require_allocated"]

log = logging.getLogger("airflow_trident.coordination.store")


def require_allocated(txid: int, current: int, *, topology: str) -> None:
    """Refuse to replay ``txid`` unless it is one of the allocated txids ``1..current``.

    A replay of a txid never allocated would store metadata and attempts for a batch no run
    holds, and a later allocation would hand the same txid to another run.

    >>> require_allocated(2, 3, topology="wc")
    >>> require_allocated(5, 3, topology="wc")
    Traceback (most recent call last):
    ...
    airflow_trident.errors.ConfigurationError: cannot replay txid 5 of topology 'wc': it was never \
allocated (the last allocated txid is 3); nothing was written. Hint: replay one of txids 1..3, or \
leave the txid out to begin a new batch
    """
    if not 1 <= txid <= current:
        msg = (
            f"cannot replay txid {txid} of topology {topology!r}: it was never allocated (the "
            f"last allocated txid is {current}); nothing was written. Hint: "
            + (f"replay one of txids 1..{current}, or " if current else "")
            + "leave the txid out to begin a new batch"
        )
        raise ConfigurationError(msg)


class RunBindings:
    """Txids and the runs bound to them, of one topology."""

    def __init__(self, nodes: Znodes, paths: CoordinatorPaths) -> None:
        self.nodes = nodes
        self.client = nodes.client
        self.paths = paths

    def current_txid(self) -> int:
        """The last txid allocated (0 before the first batch)."""
        return int(self.nodes.read_int(self.paths.current_txid))

    def allocate_txid(self) -> int:
        """Allocate the next txid (no run bound to it)."""
        result: int = self.client.retry(self._inner_allocate, None)
        return result

    def txid_for_run(self, run_id: str) -> int | None:
        """The txid bound to ``run_id``, ``None`` if the run has none yet."""
        try:
            data, _ = self.client.retry(self.client.get, self.paths.run(run_id))
        except NoNodeError:
            return None
        return int(decode_json(data)["txid"])

    def runs_of_txid(self, txid: int) -> list[str]:
        """The run ids bound to ``txid`` (the first run and every replay), oldest binding first.

        An index beside the bindings, written with them; bindings made before it existed are
        not listed. Pruned with the bindings (:meth:`cleanup_before`).
        """
        path = self.paths.txid_runs(txid)
        try:
            children: list[str] = self.client.retry(self.client.get_children, path)
        except NoNodeError:
            return []
        stamped = []
        for child in children:
            try:
                _, stat = self.client.retry(self.client.get, f"{path}/{child}")
            except NoNodeError:
                continue
            stamped.append((stat.czxid, decode_segment(child)))
        return [run for _, run in sorted(stamped)]

    def _index_run(self, run_id: str, txid: int) -> None:
        """Make sure the txid -> runs index lists ``run_id`` (idempotent)."""
        path = self.paths.txid_run(txid, run_id)
        with contextlib.suppress(NodeExistsError):
            self.client.create(path, b"", makepath=True)

    def bind_run(self, run_id: str, txid: int | None = None) -> int:
        """Return the txid of ``run_id``, binding it first if the run has none.

        With ``txid=None`` a new txid is allocated *in the same ZooKeeper transaction* as the
        binding, so txids have no gaps even when two begin tasks race. With a ``txid`` (a replay
        asked for by ``dag_run.conf``), that txid must already have been allocated.

        Raises
        ------
        ConfigurationError
            If ``txid`` was never allocated (nothing is written).
        MetadataError
            If ``run_id`` is already bound to another txid.
        """
        result: int = self.client.retry(self._inner_bind_run, run_id, txid)
        return result

    def _inner_bind_run(self, run_id: str, txid: int | None) -> int:
        existing = self.txid_for_run(run_id)
        if existing is not None:
            if txid is not None and txid != existing:
                msg = (
                    f"run {run_id!r} of topology {self.paths.topology!r} is bound to txid "
                    f"{existing}, not {txid}; hint: trigger a new run to replay txid {txid}"
                )
                raise MetadataError(msg)
            self._index_run(run_id, existing)  # a begin that died between the two writes
            return existing
        if txid is not None:
            require_allocated(txid, self.current_txid(), topology=self.paths.topology)
            self.nodes.create_or_keep(self.paths.run(run_id), {"txid": txid})
            return self._inner_bind_run(run_id, txid)
        return self._inner_allocate(run_id)

    def bind_new_run(self, run_id: str, txid: int) -> int:
        """Allocate exactly ``txid`` and bind ``run_id`` to it, in one ZooKeeper transaction.

        For a run created to *be* txid ``txid`` (``airflow-trident backfill`` names its new runs
        by their txids): ``txid`` must be the next txid. Running it again for the same run
        returns ``txid`` (the binding is already there).

        Raises
        ------
        ConfigurationError
            If ``txid`` is not the next txid: it leaves a gap, or it was allocated already
            (perhaps by a begin that ran meanwhile). Nothing is written.
        MetadataError
            If ``run_id`` is already bound to another txid.
        """
        result: int = self.client.retry(self._inner_bind_new_run, run_id, txid)
        return result

    def _inner_bind_new_run(self, run_id: str, txid: int) -> int:
        bound = self.txid_for_run(run_id)
        if bound is not None:
            if bound != txid:
                msg = (
                    f"run {run_id!r} of topology {self.paths.topology!r} is bound to txid "
                    f"{bound}, not {txid}; nothing was written. Hint: use another run id"
                )
                raise MetadataError(msg)
            return bound
        return self._inner_allocate(run_id, expected=txid)

    def _inner_allocate(self, run_id: str | None, expected: int | None = None) -> int:
        while True:
            self.nodes.ensure(self.paths.current_txid, 0)
            data, stat = self.client.get(self.paths.current_txid)
            txid = int(decode_json(data)) + 1
            if expected is not None and txid != expected:
                msg = (
                    f"cannot allocate txid {expected} of topology {self.paths.topology!r}: the "
                    f"next txid is {txid}; nothing was written. Hint: "
                    + (
                        f"txids up to {txid - 1} are allocated already (replay them instead)"
                        if expected < txid
                        else f"txids must be allocated without gaps, start at txid {txid}"
                    )
                )
                raise ConfigurationError(msg)
            tx = self.client.transaction()
            tx.set_data(self.paths.current_txid, encode_json(txid, what="txid"), stat.version)
            if run_id is not None:
                self.nodes.ensure_parent(self.paths.run(run_id))
                self.client.ensure_path(self.paths.txid_runs(txid))
                with contextlib.suppress(NoNodeError):  # a stale index node would fail the create
                    self.client.delete(self.paths.txid_run(txid, run_id))
                tx.create(self.paths.run(run_id), encode_json({"txid": txid}, what="run binding"))
                tx.create(self.paths.txid_run(txid, run_id))
            failure = check_results(tx.commit())
            if failure is None:
                log.info("topology %s: allocated txid %d", self.paths.topology, txid)
                return txid
            if run_id is not None:
                bound = self.txid_for_run(run_id)  # a concurrent begin of the same run won
                if bound is not None:
                    return bound
            if not isinstance(failure, BadVersionError | NodeExistsError):
                raise failure

    def prune_runs_of(self, txid: int) -> int:
        """Delete the bindings the txid -> runs index lists for ``txid``, then the index node.

        Bindings first: a cleanup killed in between leaves the index node, and the next one
        finishes the job. Only the listed bindings are read, and one is kept when it names
        another txid (its run was bound again after an interrupted cleanup deleted its old
        binding); an unreadable one is deleted. A binding whose index node was never written
        (made before the index existed, or a replay's begin killed between its two writes and
        never run again) is kept.
        """
        index = self.paths.txid_runs(txid)
        removed = 0
        for child in self.nodes.children(index):
            path = f"{self.paths.runs}/{child}"
            try:
                data, stat = self.client.retry(self.client.get, path)
            except NoNodeError:
                continue
            try:
                bound: int | None = int(decode_json(data)["txid"])
            except (ValueError, KeyError, TypeError):
                bound = None
            if bound is None or bound == txid:
                with contextlib.suppress(NoNodeError, BadVersionError):
                    self.client.retry(self.client.delete, path, version=stat.version)
                    removed += 1
        return removed + self.nodes.delete(index)
