"""Fault points: armed faults fire once at the n-th hit, wrappers delegate, kills are real."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.errors import CommitConflictError
from airflow_trident.state.map.backing import MemoryBackingMap
from airflow_trident.state.map.opaque import OpaqueMap
from airflow_trident.testing.fault_points import (
    FaultInjector,
    FaultyState,
    FaultyStore,
    InjectedFault,
    kill_this_process,
)
from airflow_trident.testing.faults import expire_session
from airflow_trident.testing.forked import run_forked


def test_an_armed_fault_fires_once_at_its_nth_hit() -> None:
    # Given an injector armed for the 3rd hit of any store call
    injector = FaultInjector()
    store = FaultyStore(MemoryCoordinatorStore("fp_nth"), injector)
    injector.arm("store.*", at=3, label="third")

    # When store calls are made (each call is a .before and an .after hit)
    store.runs.current_txid()  # hits 1 and 2
    with pytest.raises(InjectedFault, match=r"store\.bind_run\.before"):
        store.runs.bind_run("r1")  # hit 3: before the call, so nothing is bound
    txid = store.runs.bind_run("r1")

    # Then it fired once, before the binding, and the retry bound txid 1
    assert injector.fired == {"third": 1}
    assert txid == 1
    assert not injector.armed


def test_a_fault_after_the_compare_and_set_leaves_the_txid_committed() -> None:
    # Given a store whose commit fails right after the compare-and-set
    injector = FaultInjector()
    store = FaultyStore(MemoryCoordinatorStore("fp_after"), injector)
    store.runs.bind_run("r1")
    injector.arm("store.commit.after")

    # When txid 1 is committed
    with pytest.raises(InjectedFault):
        store.commits.commit(1, token="a")

    # Then it is committed, and a second committer is refused
    assert store.commits.committed_txid() == 1
    with pytest.raises(CommitConflictError):
        store.commits.commit(1, token="b")


def test_the_parts_calls_are_the_store_points_of_before_and_flat_names_still_hit_them() -> None:
    # Given a faulty store
    injector = FaultInjector()
    store = FaultyStore(MemoryCoordinatorStore("fp_parts"), injector)

    # When each part is called, and a flat name of before
    store.runs.bind_run("r1")
    store.runs.runs_of_txid(1)  # never a fault point
    store.attempts.next_attempt(1)
    store.metas.put_meta("s", 1, {"n": 1})
    with pytest.warns(DeprecationWarning, match=r"store\.commits\.commit\(\)"):
        store.commit(1)
    store.cleanup_before(1)

    # Then the points are named as before, by the method
    assert sorted({p.rsplit(".", 1)[0] for p in injector.hits}) == [
        "store.bind_run",
        "store.cleanup_before",
        "store.commit",
        "store.next_attempt",
        "store.put_meta",
    ]
    assert store.commits.committed_txid() == 1


def test_a_state_fault_runs_its_action_and_hidden_methods_are_not_seen() -> None:
    # Given an opaque map state behind a FaultyState that hides revert_txid
    injector = FaultInjector()
    actions: list[str] = []
    state = FaultyState(
        OpaqueMap(MemoryBackingMap()), injector, 0, hidden=frozenset({"revert_txid"})
    )
    injector.arm("state.commit.before", action=lambda: actions.append("restart"))

    # When a batch is applied
    state.begin_commit(1)
    state.multi_put([("a",)], [5])
    state.commit(1)

    # Then the action ran in place of a failure, the write landed, and revert_txid is hidden
    assert actions == ["restart"]
    assert state.multi_get([("a",)]) == [5]
    assert getattr(state, "revert_txid", None) is None
    assert injector.hits["state.multi_put.after"] == 1


def test_run_forked_reports_a_sigkill_and_a_result() -> None:
    # Given work that kills its process at its second fault point, and work that returns
    injector = FaultInjector()

    def doomed() -> int:
        injector.arm("*", at=2, action=kill_this_process)
        injector.hit("one")
        injector.hit("two")
        return 1

    # When each runs in a forked child
    killed = run_forked(doomed)
    fine = run_forked(lambda: 6 * 7)
    failed = run_forked(lambda: 1 // 0)

    # Then the first was SIGKILL-ed, the second returned, the third failed; the parent's
    # injector never fired
    assert killed.status == "killed"
    assert (fine.status, fine.result) == ("ok", 42)
    assert failed.status == "error"
    assert "ZeroDivisionError" in str(failed.error)
    assert not injector.fired


@pytest.mark.integration
def test_expire_session_gives_the_client_a_new_session(zk_hosts: str) -> None:
    # Given a connected client with a node
    client: KazooClient = connect(ZkConfig(hosts=zk_hosts, root="/trident_test"))
    try:
        path = "/trident_test/expire_probe"
        client.ensure_path(path)
        old_session = client.client_id[0]

        # When its session is expired from outside
        noticed = expire_session(client)

        # Then the client saw it, and works again on a new session
        assert noticed
        assert client.retry(client.exists, path) is not None
        assert client.client_id[0] != old_session
    finally:
        client.stop()
        client.close()
