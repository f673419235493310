"""The coordinator's state in ZooKeeper (Trident's ``MasterBatchCoordinator`` bookkeeping).

Every write is a compare-and-set on a node version; multi-node writes are kazoo transactions whose
every result is checked (kazoo returns failures instead of raising). Public methods run their
``_inner_*`` twin under ``client.retry``, and each ``_inner_*`` is safe to run twice: a write that
may have landed before a connection loss is recognised on the re-run.

It is long on purpose: it is the one place that knows the ZooKeeper layout's invariants (txid
allocation with run bindings, attempts, commit markers, the committed txid with its token and
the opaque spouts' committed metadata in one transaction, rotation); callers see
:class:`~airflow_trident.coordination.protocol.CoordinatorStoreProtocol`.

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

import contextlib
import json
import logging
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.coordination.paths import CoordinatorPaths, parse_txid_node
from airflow_trident.coordination.spout_state import ZkPartitionState
from airflow_trident.errors import (
    CommitConflictError,
    CommitOrderError,
    ConfigurationError,
    MetadataError,
    MetadataNotSerializableError,
)
from airflow_trident.names import decode_segment
from airflow_trident.spout.tx_state import PartitionState

__all__ = ["CoordinatorStore", "encode_json", "require_allocated"]

log = logging.getLogger(__name__)


def encode_json(value: Any, *, what: str) -> bytes:
    """Encode ``value`` as JSON, or raise :class:`MetadataNotSerializableError` naming ``what``."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        msg = (
            f"{what} is not JSON-serialisable ({exc}); nothing was written. Hint: batch metadata "
            f"must be plain dicts, lists, str, int, float, bool or None"
        )
        raise MetadataNotSerializableError(msg) from exc


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


def _decode(data: bytes) -> Any:
    return json.loads(data.decode()) if data else None


def _check_results(results: list[Any]) -> Exception | None:
    """The failure of a kazoo transaction, or ``None`` if every operation succeeded.

    The operation that failed carries the real error; the others are only rolled back.
    """
    failures = [r for r in results if isinstance(r, Exception)]
    for failure in failures:
        if not isinstance(failure, RolledBackError | RuntimeInconsistency):
            return failure
    return failures[0] if failures else None


class CoordinatorStore:
    """Txids, attempts, batch metadata, run bindings and the committed txid of one topology."""

    def __init__(self, client: KazooClient, paths: CoordinatorPaths) -> None:
        self.client = client
        self.paths = paths

    # -- txids and runs -------------------------------------------------------------------------

    def current_txid(self) -> int:
        """The last txid allocated (0 before the first batch)."""
        return int(self._read_int(self.paths.current_txid))

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
        return int(_decode(data)["txid"])

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
            self._create_or_keep(self.paths.run(run_id), {"txid": txid})
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
            self._ensure(self.paths.current_txid, 0)
            data, stat = self.client.get(self.paths.current_txid)
            txid = int(_decode(data)) + 1
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
                self._ensure_parent(self.paths.run(run_id))
                self.client.ensure_path(self.paths.txid_runs(txid))
                with contextlib.suppress(NoNodeError):  # a stale index node would fail the create
                    self.client.delete(self.paths.txid_run(txid, run_id))
                tx.create(self.paths.run(run_id), encode_json({"txid": txid}, what="run binding"))
                tx.create(self.paths.txid_run(txid, run_id))
            failure = _check_results(tx.commit())
            if failure is None:
                log.info("topology %s: allocated txid %d", self.paths.topology, txid)
                return txid
            if run_id is not None:
                bound = self.txid_for_run(run_id)  # a concurrent begin of the same run won
                if bound is not None:
                    return bound
            if not isinstance(failure, BadVersionError | NodeExistsError):
                raise failure

    # -- attempts -------------------------------------------------------------------------------

    def attempt(self, txid: int) -> TransactionAttempt | None:
        """The latest attempt of ``txid``, ``None`` if it was never emitted."""
        try:
            data, _ = self.client.retry(self.client.get, self.paths.attempt(txid))
        except NoNodeError:
            return None
        return TransactionAttempt(txid, int(_decode(data)))

    def attempt_started_at(self, txid: int) -> datetime | None:
        """When the latest attempt of ``txid`` started (its attempt node's last change; the
        begin's creation when none started), ``None`` if it was never emitted. The commit
        keeps it in the ledger: a later replay's attempt changes the node."""
        try:
            _, stat = self.client.retry(self.client.get, self.paths.attempt(txid))
        except NoNodeError:
            return None
        return datetime.fromtimestamp(stat.last_modified, UTC)

    def next_attempt(self, txid: int) -> TransactionAttempt:
        """Record a new emit of ``txid`` and return its attempt (ids rise; kept in ZooKeeper).

        A retry after a connection loss may skip an id; ids only need to rise.
        """
        result: TransactionAttempt = self.client.retry(self._inner_next_attempt, txid)
        return result

    def _inner_next_attempt(self, txid: int) -> TransactionAttempt:
        path = self.paths.attempt(txid)
        while True:
            try:
                data, stat = self.client.get(path)
            except NoNodeError:
                try:
                    self.client.create(path, encode_json(0, what="attempt"), makepath=True)
                except NodeExistsError:
                    continue
                return TransactionAttempt(txid, 0)
            attempt_id = int(_decode(data)) + 1
            try:
                self.client.set(path, encode_json(attempt_id, what="attempt"), stat.version)
            except BadVersionError:
                continue
            return TransactionAttempt(txid, attempt_id)

    # -- batch metadata -------------------------------------------------------------------------

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
        return _decode(data)

    def has_meta(self, spout: str, txid: int) -> bool:
        """Whether ``spout`` stored metadata for ``txid``."""
        return self.client.retry(self.client.exists, self.paths.meta(spout, txid)) is not None

    def latest_meta_before(self, spout: str, txid: int) -> tuple[int, Any] | None:
        """The newest ``(txid, metadata)`` of ``spout`` strictly before ``txid``, if any."""
        for earlier in sorted(self._txid_children(self.paths.meta_root(spout)), reverse=True):
            if earlier < txid:
                return earlier, self.get_meta(spout, earlier)
        return None

    # -- commit ---------------------------------------------------------------------------------

    def committed_txid(self) -> int:
        """The last committed txid (0 before the first commit)."""
        try:
            data, _ = self.client.retry(self.client.get, self.paths.committed_txid)
        except NoNodeError:
            return 0
        return int(_decode(data)["txid"])

    def commit(
        self, txid: int, *, token: str | None = None, writes: Mapping[str, Any] | None = None
    ) -> None:
        """Advance the committed txid from ``txid - 1`` to ``txid`` by compare-and-set.

        ``writes`` (path -> JSON value) are stored in the same ZooKeeper transaction: opaque
        spouts keep the partition metadata of a batch this way, only once it commits. ``token``
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
        self.client.retry(self._inner_commit, txid, token, encoded)
        log.info("topology %s: committed txid %d", self.paths.topology, txid)

    def _inner_commit(self, txid: int, token: str, writes: Mapping[str, bytes]) -> None:
        path = self.paths.committed_txid
        while True:
            self._ensure(path, {"txid": 0, "token": None})
            data, stat = self.client.get(path)
            current = _decode(data)
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
                    self._ensure_parent(write_path)
                    tx.create(write_path, value)
                else:
                    tx.set_data(write_path, value)
            failure = _check_results(tx.commit())
            if failure is None:
                return
            if not isinstance(failure, BadVersionError | NodeExistsError):
                raise failure
            # Lost a race: re-read; the next loop reports a conflict or retries.

    # -- user state, cleanup --------------------------------------------------------------------

    def read_json(self, path: str) -> Any:
        """The JSON value at ``path`` (for spouts' own state), ``None`` when absent."""
        try:
            data, _ = self.client.retry(self.client.get, path)
        except NoNodeError:
            return None
        return _decode(data)

    def write_json(self, path: str, value: Any) -> None:
        """Create or replace the JSON value at ``path``."""
        data = encode_json(value, what=f"value at {path}")

        def inner() -> None:
            try:
                self.client.create(path, data, makepath=True)
            except NodeExistsError:
                self.client.set(path, data)

        self.client.retry(inner)

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
        for earlier in self._txid_children(self.paths.attempts):
            if earlier < txid:
                removed += self._delete(self.paths.attempt(earlier))
        for spout in self._children(f"{self.paths.coordinator}/meta"):
            below = sorted(t for t in self._txid_children(self.paths.meta_root(spout)) if t < txid)
            for earlier in below[:-1]:
                removed += self._delete(self.paths.meta(spout, earlier))
        runs_below = txid if runs_before is None else runs_before
        for earlier in self._txid_children(self.paths.txid_runs_root):
            if earlier < runs_below:
                removed += self._prune_runs_of(earlier)
        for earlier in self._txid_children(self.paths.commits_started):
            if earlier < txid:
                removed += self._delete(self.paths.commit_started(earlier))
        return removed

    def _prune_runs_of(self, txid: int) -> int:
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
        for child in self._children(index):
            path = f"{self.paths.runs}/{child}"
            try:
                data, stat = self.client.retry(self.client.get, path)
            except NoNodeError:
                continue
            try:
                bound: int | None = int(_decode(data)["txid"])
            except (ValueError, KeyError, TypeError):
                bound = None
            if bound is None or bound == txid:
                with contextlib.suppress(NoNodeError, BadVersionError):
                    self.client.retry(self.client.delete, path, version=stat.version)
                    removed += 1
        return removed + self._delete(index)

    def mark_commit_started(self, txid: int, shape: Mapping[str, Any] | None = None) -> bool:
        """Record that a commit of ``txid`` starts applying state, with the txid's ``shape``
        (:func:`~airflow_trident.runtime.shape.batch_shape`) as the node's data; return whether
        one had already started (then state may hold an earlier attempt's writes of ``txid``,
        and the node keeps the first one's shape).

        A create retried after a connection loss may find its own node and answer ``True``:
        that only costs the caller a needless check, never a missed one.
        """
        path = self.paths.commit_started(txid)
        data = b"" if shape is None else encode_json(dict(shape), what=f"shape of txid {txid}")
        try:
            self.client.retry(self.client.create, path, data, makepath=True)
        except NodeExistsError:
            return True
        return False

    def commit_shape(self, txid: int) -> dict[str, Any] | None:
        """The shape the first commit of ``txid`` started with (``None``: no commit started,
        or one started before shapes were recorded)."""
        try:
            data, _ = self.client.retry(self.client.get, self.paths.commit_started(txid))
        except NoNodeError:
            return None
        shape = _decode(data)
        return shape if isinstance(shape, dict) else None

    def delete_all(self) -> None:
        """Delete every node of this topology (tests, and dropping a topology)."""
        self._delete(self.paths.base)

    def partition_state(self, spout: str) -> PartitionState:
        """Partitioned spout ``spout``'s per-partition metadata, in ZooKeeper beside this."""
        return ZkPartitionState(self, spout)

    # -- helpers --------------------------------------------------------------------------------

    def _read_int(self, path: str) -> int:
        try:
            data, _ = self.client.retry(self.client.get, path)
        except NoNodeError:
            return 0
        return int(_decode(data))

    def _ensure(self, path: str, initial: Any) -> None:
        if self.client.exists(path) is None:
            with contextlib.suppress(NodeExistsError):
                self.client.create(path, encode_json(initial, what=path), makepath=True)

    def _ensure_parent(self, path: str) -> None:
        self.client.ensure_path(path.rsplit("/", 1)[0])

    def _create_or_keep(self, path: str, value: Any) -> None:
        with contextlib.suppress(NodeExistsError):
            self.client.create(path, encode_json(value, what=path), makepath=True)

    def _children(self, path: str) -> list[str]:
        try:
            children: list[str] = self.client.retry(self.client.get_children, path)
        except NoNodeError:
            return []
        return children

    def _txid_children(self, path: str) -> list[int]:
        txids = (parse_txid_node(name) for name in self._children(path))
        return [t for t in txids if t is not None]

    def _delete(self, path: str) -> int:
        try:
            self.client.retry(self.client.delete, path, recursive=True)
        except NoNodeError:
            return 0
        return 1
