"""The coordinator store against a real ZooKeeper."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import (
    CommitConflictError,
    CommitOrderError,
    ConfigurationError,
    CoordinatorUnavailableError,
    InvalidNameError,
    MetadataError,
    MetadataNotSerializableError,
)

pytestmark = pytest.mark.integration


def test_runs_bind_to_consecutive_txids_and_rebind(zk_store: CoordinatorStore) -> None:
    # Given three runs When each begins (and the second begins twice)
    first = zk_store.runs.bind_run("scheduled__1")
    second = zk_store.runs.bind_run("scheduled__2")
    again = zk_store.runs.bind_run("scheduled__2")
    third = zk_store.runs.bind_run("manual__x")
    # Then txids are 1, 2, 3 with no gap and the retry re-binds
    assert (first, second, again, third) == (1, 2, 2, 3)
    assert zk_store.runs.current_txid() == 3


def test_concurrent_begins_of_distinct_runs_leave_no_gap(
    zk_config: ZkConfig, zk_store: CoordinatorStore
) -> None:
    results: list[int] = []
    barrier = threading.Barrier(4)

    def begin(i: int) -> None:
        client = connect(zk_config)
        try:
            store = CoordinatorStore(client, zk_store.paths)
            barrier.wait()
            results.append(store.runs.bind_run(f"run{i}"))
        finally:
            client.stop()

    threads = [threading.Thread(target=begin, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [1, 2, 3, 4]


def test_replay_of_allocated_txid_and_refusal_of_unknown(zk_store: CoordinatorStore) -> None:
    zk_store.runs.bind_run("a")
    zk_store.runs.bind_run("b")
    assert zk_store.runs.bind_run("replay-of-1", 1) == 1
    with pytest.raises(ConfigurationError, match=r"txid 9 .* last allocated txid is 2"):
        zk_store.runs.bind_run("replay-of-9", 9)
    with pytest.raises(MetadataError, match=r"bound to txid 1, not 2"):
        zk_store.runs.bind_run("replay-of-1", 2)


def test_attempts_rise_and_survive_a_new_client(
    zk_config: ZkConfig, zk_store: CoordinatorStore
) -> None:
    assert zk_store.attempts.attempt(1) is None
    zk_store.attempts.next_attempt(1)
    zk_store.attempts.next_attempt(1)
    # When the coordinator restarts (a new client, a new store object)
    client = connect(zk_config)
    try:
        restarted = CoordinatorStore(client, zk_store.paths)
        # Then the attempt id keeps rising
        assert restarted.attempts.attempt(1) == TransactionAttempt(1, 1)
        assert restarted.attempts.next_attempt(1) == TransactionAttempt(1, 2)
    finally:
        client.stop()


def test_non_json_metadata_is_an_error_and_writes_nothing(zk_store: CoordinatorStore) -> None:
    with pytest.raises(MetadataNotSerializableError, match=r"spout 'words' for txid 4"):
        zk_store.metas.put_meta("words", 4, {"offset": object()})
    with pytest.raises(MetadataNotSerializableError):
        zk_store.metas.put_meta("words", 4, {"x": float("nan")})
    assert not zk_store.metas.has_meta("words", 4)


def test_fixed_metadata_refuses_a_different_value(zk_store: CoordinatorStore) -> None:
    zk_store.metas.put_meta("words", 1, {"offset": 0})
    zk_store.metas.put_meta("words", 1, {"offset": 0})  # same value: fine
    with pytest.raises(MetadataError, match=r"fixed"):
        zk_store.metas.put_meta("words", 1, {"offset": 5})
    zk_store.metas.put_meta("words", 1, {"offset": 5}, overwrite=True)
    assert zk_store.metas.get_meta("words", 1) == {"offset": 5}


def test_a_flat_name_of_before_still_works_with_a_warning(zk_store: CoordinatorStore) -> None:
    # Given the ZooKeeper store When its old flat names are used Then they work and warn
    with pytest.warns(DeprecationWarning, match=r"call store\.runs\.bind_run\(\)"):
        assert zk_store.bind_run("flat") == 1
    with pytest.warns(DeprecationWarning, match=r"call store\.nodes\.read_json\(\)"):
        assert zk_store.read_json(zk_store.paths.committed_txid) is None
    assert zk_store.runs.txid_for_run("flat") == 1


def test_latest_meta_before(zk_store: CoordinatorStore) -> None:
    for txid in (1, 2, 10):
        zk_store.metas.put_meta("s", txid, {"t": txid})
    assert zk_store.metas.latest_meta_before("s", 10) == (2, {"t": 2})
    assert zk_store.metas.latest_meta_before("s", 1) is None


def test_commit_advances_only_from_previous_txid(zk_store: CoordinatorStore) -> None:
    with pytest.raises(CommitOrderError, match=r"txid 1 must commit first"):
        zk_store.commits.commit(2)
    zk_store.commits.commit(1)
    with pytest.raises(CommitConflictError, match=r"already committed"):
        zk_store.commits.commit(1)
    zk_store.commits.commit(2)
    assert zk_store.commits.committed_txid() == 2


def test_two_committers_racing_exactly_one_wins(
    zk_config: ZkConfig, zk_store: CoordinatorStore
) -> None:
    zk_store.commits.commit(1)
    outcomes: list[Any] = []
    barrier = threading.Barrier(2)

    def commit(name: str) -> None:
        client = connect(zk_config)
        try:
            store = CoordinatorStore(client, zk_store.paths)
            barrier.wait()
            try:
                store.commits.commit(2, token=name)
                outcomes.append("won")
            except CommitConflictError as exc:
                outcomes.append(exc)
        finally:
            client.stop()

    for _ in range(5):  # several rounds make a true race likely
        outcomes.clear()
        threads = [threading.Thread(target=commit, args=(n,)) for n in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert outcomes.count("won") == 1
        assert len(outcomes) == 2
        assert "txid 2" in str(next(o for o in outcomes if o != "won"))
        # reset for the next round
        zk_store.client.set(zk_store.paths.committed_txid, b'{"txid":1,"token":null}')


def test_commit_writes_land_atomically_with_the_txid(zk_store: CoordinatorStore) -> None:
    path = f"{zk_store.paths.user('words')}/p0/committed"
    zk_store.commits.commit(1, writes={path: {"txid": 1, "meta": {"next_offset": 3}}})
    assert zk_store.nodes.read_json(path) == {"txid": 1, "meta": {"next_offset": 3}}
    # A refused commit writes nothing
    with pytest.raises(CommitOrderError):
        zk_store.commits.commit(3, writes={path: {"txid": 3}})
    assert zk_store.nodes.read_json(path)["txid"] == 1


def test_session_expiry_in_the_middle_of_a_commit(
    zk_config: ZkConfig, zk_store: CoordinatorStore
) -> None:
    # Given a committer whose session expires just before its compare-and-set
    zk_store.commits.commit(1)
    client = connect(zk_config)
    store = CoordinatorStore(client, zk_store.paths)
    original = store.commits._inner_commit
    expired = []

    def expire_then_commit(*args: Any) -> None:
        if not expired:
            expired.append(True)
            killer = KazooClient(hosts=zk_config.connect_string, client_id=client.client_id)
            killer.start()
            killer.stop()  # closing a twin session expires the committer's session
        original(*args)

    store.commits._inner_commit = expire_then_commit  # type: ignore[method-assign]
    try:
        # When it commits txid 2, Then the retry lands it exactly once
        store.commits.commit(2, token="me")
        assert expired == [True]
        assert zk_store.commits.committed_txid() == 2
        # and a second commit of 2 by another committer is refused
        with pytest.raises(CommitConflictError):
            zk_store.commits.commit(2, token="other")
    finally:
        client.stop()


def test_commit_retry_after_landing_is_idempotent(zk_store: CoordinatorStore) -> None:
    zk_store.commits.commit(1, token="me")
    # Re-running the inner step (as kazoo's retry does after a connection loss) is a no-op
    zk_store.commits._inner_commit(1, "me", {})
    assert zk_store.commits.committed_txid() == 1


def test_cleanup_keeps_znode_count_bounded(zk_store: CoordinatorStore) -> None:
    for i in range(1, 31):
        txid = zk_store.runs.bind_run(f"run{i}")
        zk_store.metas.put_meta("s", txid, {"t": txid})
        zk_store.attempts.next_attempt(txid)
        zk_store.commits.commit(txid)
        zk_store.cleanup_before(txid - 4)
    client = zk_store.client
    assert len(client.get_children(zk_store.paths.meta_root("s"))) <= 6
    assert len(client.get_children(zk_store.paths.attempts)) <= 5
    assert len(client.get_children(zk_store.paths.runs)) <= 5
    assert zk_store.metas.get_meta("s", 30) == {"t": 30}


def test_chroot_isolates_the_tree(zk_hosts: str, unique_name: str) -> None:
    config = ZkConfig(hosts=zk_hosts, chroot=f"/{unique_name}_chroot", root="/trident")
    plain = connect(ZkConfig(hosts=zk_hosts))
    plain.ensure_path(config.chroot)
    client = connect(config)
    try:
        store = CoordinatorStore(client, CoordinatorPaths("/trident", "wc"))
        store.runs.bind_run("r")
        assert plain.exists(f"{config.chroot}/trident/wc/coordinator/current_txid")
    finally:
        client.stop()
        plain.delete(config.chroot, recursive=True)
        plain.stop()


def test_digest_acl_keeps_others_out(zk_hosts: str, unique_name: str) -> None:
    secure = ZkConfig(hosts=zk_hosts, root=f"/{unique_name}", username="etl", password="pw")
    client = connect(secure)
    anonymous = connect(ZkConfig(hosts=zk_hosts))
    try:
        store = CoordinatorStore(client, CoordinatorPaths(secure.root, "wc"))
        store.runs.bind_run("r")
        assert store.runs.current_txid() == 1
        with pytest.raises(NoAuthError):
            anonymous.get(store.paths.current_txid)
    finally:
        store.delete_all()
        client.delete(secure.root)
        client.stop()
        anonymous.stop()


def test_missing_zookeeper_is_a_clear_error() -> None:
    with pytest.raises(CoordinatorUnavailableError, match=r"127.0.0.1:1 .*connection's host"):
        connect(ZkConfig(hosts="127.0.0.1:1", timeout=1.0))


def test_invalid_topology_name() -> None:
    with pytest.raises(InvalidNameError, match=r"topology name 'word count'"):
        CoordinatorPaths("/trident", "word count")


def _znodes(client: KazooClient, path: str) -> set[str]:
    """Every znode at and below ``path``."""
    if client.exists(path) is None:
        return set()
    found = {path}
    for child in client.get_children(path):
        found |= _znodes(client, f"{path}/{child}")
    return found


def test_binding_a_txid_never_allocated_is_refused_and_writes_nothing(
    zk_client: KazooClient, zk_store: CoordinatorStore
) -> None:
    # Given txids 1..2 allocated
    zk_store.runs.bind_run("a")
    zk_store.runs.bind_run("b")
    before = _znodes(zk_client, zk_store.paths.base)
    # When a run asks to replay txid 5, never allocated
    with pytest.raises(ConfigurationError, match=r"txid 5 .* last allocated txid is 2"):
        zk_store.runs.bind_run("replay-of-5", 5)
    # Then no znode was created (no run binding, no txid moved)
    assert _znodes(zk_client, zk_store.paths.base) == before
    assert zk_store.runs.current_txid() == 2
    assert zk_store.runs.txid_for_run("replay-of-5") is None


def test_a_new_run_is_bound_to_exactly_the_next_txid_or_refused(
    zk_client: KazooClient, zk_store: CoordinatorStore
) -> None:
    # Given txid 1 allocated
    zk_store.runs.bind_run("scheduled__1")
    # When a backfill binds its new runs to txids 2 and 3, and the first binding is repeated
    second = zk_store.runs.bind_new_run("trident_new__txid_2", 2)
    third = zk_store.runs.bind_new_run("trident_new__txid_3", 3)
    again = zk_store.runs.bind_new_run("trident_new__txid_2", 2)
    # Then each run holds the txid its name says
    assert (second, third, again) == (2, 3, 2)
    assert zk_store.runs.txid_for_run("trident_new__txid_3") == 3
    assert zk_store.runs.current_txid() == 3
    # And a gap, or a txid taken already, is refused without writing anything
    before = _znodes(zk_client, zk_store.paths.base)
    with pytest.raises(ConfigurationError, match=r"txid 6 .* the next txid is 4"):
        zk_store.runs.bind_new_run("trident_new__txid_6", 6)
    with pytest.raises(ConfigurationError, match=r"txid 3 .* the next txid is 4"):
        zk_store.runs.bind_new_run("other", 3)
    with pytest.raises(MetadataError, match=r"bound to txid 2, not 4"):
        zk_store.runs.bind_new_run("trident_new__txid_2", 4)
    assert _znodes(zk_client, zk_store.paths.base) == before
