"""Exactly-once into Apache Iceberg (pyiceberg, SQL catalog on SQLite and PostgreSQL, warehouse on
the local filesystem): each partition's rows of a txid go in one Iceberg commit that records the
txid in the table's properties and the snapshot's summary; a replayed txid adds nothing."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.errors import (
    ConfigurationError,
    MissingConnectionError,
    NotExactlyOnceError,
    SchemaMismatchError,
    StateError,
)
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.memory import MemoryOpaqueSpout
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.iceberg import IcebergWriter, iceberg_state
from airflow_trident.topology import TridentTopology
from tests.harness.iceberg_sinks import (
    SENTENCES,
    FailOnce,
    expected_words,
    table_rows,
    words_topology,
)


@pytest.fixture(params=["sqlite", "postgresql"])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """A SQL catalog on SQLite or PostgreSQL (its own catalog name), warehouse under tmp."""
    if request.param == "sqlite":
        uri = f"sqlite:///{tmp_path}/catalog.db"
    else:
        uri = request.getfixturevalue("pg_url")
    return {
        "catalog_name": f"t{uuid.uuid4().hex[:10]}",
        "type": "sql",
        "uri": uri,
        "warehouse": f"file://{tmp_path}/warehouse",
    }


def table_name() -> str:
    return f"trident_tests.t{uuid.uuid4().hex[:10]}"


def commit(state: Any, txid: int, rows: list[dict[str, Any]]) -> None:
    state.begin_commit(txid)
    state.write(rows)
    state.commit(txid)


def rows_of(factory: Any, *columns: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in columns) for r in table_rows(factory))


def snapshots(factory: Any) -> list[dict[str, str]]:
    table = factory.load_table()
    return [dict(s.summary.additional_properties) for s in table.metadata.snapshots]


def test_a_replayed_txid_adds_nothing_and_the_snapshot_says_its_txid(
    catalog: dict[str, str],
) -> None:
    # Given an Iceberg sink with txids 1 and 2 written
    factory = iceberg_state(table_name(), "topo.events", catalog=catalog)
    sink = factory.make_state()
    commit(sink, 1, [{"k": "a", "n": 1}])
    commit(sink, 2, [{"k": "b", "n": 2}])
    # When txid 2 is committed again (other rows: they must not land), txid 1 too, and 3 comes
    commit(sink, 2, [{"k": "b", "n": 2}, {"k": "zzz", "n": 99}])
    commit(sink, 1, [{"k": "a", "n": 1}])
    commit(sink, 3, [{"k": "c", "n": 3}])
    # Then each txid's rows are there once
    assert rows_of(factory, "k", "trident_txid") == [("a", 1), ("b", 2), ("c", 3)]
    # And each snapshot's summary carries the writer and its txid; the properties the last txid
    summaries = snapshots(factory)
    assert [s["trident.txid"] for s in summaries] == ["1", "2", "3"]
    assert {s["trident.app-id"] for s in summaries} == {"topo.events"}
    props = factory.load_table().properties
    assert props["trident.txid.topo.events.p0of1"] == "3"
    assert props["trident.txid.topo.events"] == "3/1"
    assert sink.written_txid() == 3


def test_merge_upserts_matching_keys_and_a_replay_changes_nothing(
    catalog: dict[str, str],
) -> None:
    factory = iceberg_state(table_name(), "topo.latest", catalog=catalog, merge_keys=("k",))
    sink = factory.make_state()
    commit(sink, 1, [{"k": "a", "n": 1}, {"k": "b", "n": 1}])
    # When txid 2 updates "a" (twice in the batch: the last wins) and adds "c", then replays
    commit(sink, 2, [{"k": "a", "n": 5}, {"k": "c", "n": 2}, {"k": "a", "n": 7}])
    commit(sink, 2, [{"k": "a", "n": 100}])
    # Then each key has its latest value of txid <= 2, once
    assert rows_of(factory, "k", "n", "trident_txid") == [("a", 7, 2), ("b", 1, 1), ("c", 2, 2)]


def test_partitions_and_two_topologies_committing_at_once_each_land_once(
    catalog: dict[str, str],
) -> None:
    # Given one table written by two topologies (two app ids), 3 commit partitions each
    name = table_name()
    factories = {app: iceberg_state(name, app, catalog=catalog) for app in ("ta.e", "tb.e")}
    commit(factories["ta.e"].make_state(0, 3), 1, [{"app": "ta.e", "p": 0}])  # the table exists
    errors: list[BaseException] = []

    def run(app: str, i: int, txid: int) -> None:
        try:
            commit(factories[app].make_state(i, 3), txid, [{"app": app, "p": i}] * 2)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    # every partition of both topologies commits txid 1, then 2 (and 2 again: a retry), then 3
    # (a topology's txid starts after every partition of the one before committed)
    for txid in (1, 2, 2, 3):
        threads = [
            threading.Thread(target=run, args=(a, i, txid)) for a in factories for i in range(3)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    # When every commit is done / Then each (topology, partition, txid) landed once: 2 rows
    assert errors == []
    got = Counter((r["app"], r["p"], r["trident_txid"]) for r in table_rows(factories["ta.e"]))
    want = {(a, p, t): 2 for a in factories for p in range(3) for t in (1, 2, 3)}
    want[("ta.e", 0, 1)] = 1
    assert got == want


def test_a_replay_with_another_partition_count_is_refused(catalog: dict[str, str]) -> None:
    factory = iceberg_state(table_name(), "topo.n", catalog=catalog)
    commit(factory.make_state(0, 2), 1, [{"x": 1}])
    with pytest.raises(StateError, match=r"written with 2 partitions .* again with 3"):
        commit(factory.make_state(0, 3), 1, [{"x": 1}])
    assert len(table_rows(factory)) == 1


def test_expired_snapshots_keep_the_record_of_committed_txids(tmp_path: Path) -> None:
    # Given txids 1..3 written, then every snapshot but the current one expired
    catalog = {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/c.db",
        "warehouse": f"file://{tmp_path}",
    }
    factory = iceberg_state(table_name(), "topo.x", catalog=catalog)
    sink = factory.make_state()
    for txid in (1, 2, 3):
        commit(sink, txid, [{"t": txid}])
    table = factory.load_table()
    current = table.current_snapshot().snapshot_id
    old = [s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id != current]
    table.maintenance.expire_snapshots().by_ids(old).commit()
    assert len(factory.load_table().metadata.snapshots) == 1
    # When txids 1 and 3 are replayed / Then nothing is added: the record is in the properties
    commit(sink, 1, [{"t": 1}])
    commit(sink, 3, [{"t": 3}])
    assert rows_of(factory, "t") == [(1,), (2,), (3,)]


def test_a_commit_whose_outcome_was_lost_is_recognised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a catalog whose answer to a commit is lost after the commit landed
    from pyiceberg.table import Transaction

    catalog = {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/c.db",
        "warehouse": f"file://{tmp_path}",
    }
    factory = iceberg_state(table_name(), "topo.lost", catalog=catalog)
    sink = factory.make_state()
    commit(sink, 1, [{"t": 1}])
    landed = Transaction.commit_transaction

    def lost(self: Any) -> Any:
        landed(self)
        raise ConnectionResetError("injected: the catalog's answer was lost")

    monkeypatch.setattr(Transaction, "commit_transaction", lost)
    # When txid 2 is committed / Then it succeeds (the properties say it landed), once
    commit(sink, 2, [{"t": 2}])
    monkeypatch.undo()
    commit(sink, 2, [{"t": 2}])
    assert rows_of(factory, "t") == [(1,), (2,)]


def test_schema_evolution_is_opt_in_and_incompatible_changes_write_nothing(
    catalog: dict[str, str],
) -> None:
    name = table_name()
    strict = iceberg_state(name, "topo.s", catalog=catalog)
    commit(strict.make_state(), 1, [{"k": "a", "n": 1}])
    # When a new field arrives without opt-in / Then refused, nothing written
    with pytest.raises(SchemaMismatchError, match=r"columns the table does not: \['lang'\]"):
        commit(strict.make_state(), 2, [{"k": "b", "n": 2, "lang": "en"}])
    # And a field of another type is refused even with opt-in
    evolving = iceberg_state(name, "topo.s", catalog=catalog, evolve_schema=True)
    with pytest.raises(SchemaMismatchError, match=r"incompatible column types \['n: string"):
        commit(evolving.make_state(), 2, [{"k": "b", "n": "two"}])
    assert len(snapshots(strict)) == 1
    assert strict.make_state().written_txid() == 1
    # When the sink evolves: the column is added, nullable, in the commit of the rows
    commit(evolving.make_state(), 2, [{"k": "b", "n": 2, "lang": "en"}])
    field = strict.load_table().schema().find_field("lang")
    assert not field.required
    # And an older txid of another writer (rows without the column) writes with its schema
    commit(iceberg_state(name, "other.s", catalog=catalog).make_state(), 1, [{"k": "c", "n": 3}])
    assert rows_of(strict, "k", "lang") == [("a", None), ("b", "en"), ("c", None)]


def test_the_partition_spec_is_the_users(catalog: dict[str, str]) -> None:
    factory = iceberg_state(
        table_name(), "topo.p", catalog=catalog, partition_by=["k", ("n", "bucket[4]")]
    )
    commit(factory.make_state(), 1, [{"k": "a", "n": 1}, {"k": "b", "n": 2}])
    spec = factory.load_table().spec()
    assert [(f.name, str(f.transform)) for f in spec.fields] == [
        ("k", "identity"), ("n_bucket_4", "bucket[4]"),
    ]  # fmt: skip
    assert rows_of(factory, "k", "n") == [("a", 1), ("b", 2)]


def test_two_partitions_creating_the_table_at_once_both_commit(
    catalog: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two commit partitions of the first batch, the second's catalog creating the table
    # between the first's create transaction and its commit (as parallel Spark tasks do)
    factory = iceberg_state(table_name(), "topo.race", catalog=catalog)
    real_load = factory.load_catalog
    raced: list[bool] = []

    def racing_catalog() -> Any:
        loaded = real_load()
        real_create = loaded.create_table_transaction

        def create_then_lose(name: str, **kwargs: Any) -> Any:
            tx = real_create(name, **kwargs)
            if not raced:  # the other writer, once
                raced.append(True)
                commit(factory.make_state(1, 2), 1, [{"k": "b", "n": 2}])
            return tx

        monkeypatch.setattr(loaded, "create_table_transaction", create_then_lose)
        return loaded

    monkeypatch.setattr(factory, "load_catalog", racing_catalog)
    # When the first partition commits, it loses the race to create the table
    commit(factory.make_state(0, 2), 1, [{"k": "a", "n": 1}])
    # Then both partitions' rows are in the one table, each once
    assert rows_of(factory, "k", "n") == [("a", 1), ("b", 2)]


def test_two_partitions_creating_the_namespace_at_once_both_commit(
    catalog: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a commit partition whose namespace is created by another task just before its own
    # insert: the SQL catalog's loser gets the database's unique-key error (seen in CI on
    # SQLite), not NamespaceAlreadyExistsError
    fresh = f"race_{uuid.uuid4().hex[:8]}"
    factory = iceberg_state(f"{fresh}.words", "ns_race", catalog=catalog)
    real_load = factory.load_catalog
    failure: list[BaseException] = [sa.exc.IntegrityError("INSERT", {}, Exception("UNIQUE"))]

    def racing_catalog() -> Any:
        loaded = real_load()
        real_create = loaded.create_namespace

        def create_then_lose(namespace: Any, properties: Any = None) -> None:
            if failure and isinstance(failure[0], sa.exc.IntegrityError):
                real_create(namespace)  # the other task wins
            if failure:
                raise failure.pop()
            real_create(namespace)

        monkeypatch.setattr(loaded, "create_namespace", create_then_lose)
        return loaded

    monkeypatch.setattr(factory, "load_catalog", racing_catalog)
    # When it commits, it goes on: the namespace is there
    commit(factory.make_state(), 1, [{"k": "a", "n": 1}])
    assert not failure  # the race happened
    assert rows_of(factory, "k", "n") == [("a", 1)]
    # And a failure that leaves no namespace is raised
    other = iceberg_state(f"{fresh}_down.words", "ns_broken", catalog=catalog)
    monkeypatch.setattr(other, "load_catalog", racing_catalog)
    failure.append(RuntimeError("the catalog is down"))
    with pytest.raises(Exception, match="the catalog is down"):
        commit(other.make_state(), 1, [{"k": "a", "n": 1}])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"table": "no_namespace"}, "name the table with its namespace"),
        ({"app_id": ""}, "app_id must be a non-empty string"),
        ({"merge_keys": "k"}, "merge_keys is a sequence"),
        ({"partition_by": [("ts", "weekly")]}, "partition transform 'weekly'"),
        ({"catalog": {}, "iceberg_conn_id": "x"}, "not both"),
    ],
)
def test_bad_options_are_refused(kwargs: dict[str, Any], match: str) -> None:
    options: dict[str, Any] = {"table": "db.t", "app_id": "a", **kwargs}
    with pytest.raises(ConfigurationError, match=match):
        iceberg_state(**options)


def test_the_catalog_comes_from_the_run_state_database_or_a_connection(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a sink naming no catalog, bound to the run's SQLite state database
    name = table_name()
    unbound = iceberg_state(name, "topo.c")
    sink = StateBinding(f"sqlite:///{tmp_path}/state.db").make_state(unbound)
    commit(sink, 1, [{"x": 1}])
    # Then the catalog is in that database and the warehouse beside it
    assert (tmp_path / "iceberg_warehouse").is_dir()
    engine = sa.create_engine(f"sqlite:///{tmp_path}/state.db")
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT table_name FROM iceberg_tables")).scalars().all() == [
            name.split(".")[1]
        ]
    engine.dispose()
    # And a PostgreSQL state database needs a warehouse, said before any write
    with pytest.raises(ConfigurationError, match="has no warehouse"):
        StateBinding(pg_url).factory(unbound).catalog_properties()
    # And a catalog connection is read through Airflow (a task installs its resolver)
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_TEST",
        f'{{"conn_type": "sqlite", "host": "{tmp_path}/state.db", '
        f'"extra": {{"warehouse": "file://{tmp_path}/iceberg_warehouse"}}}}',
    )
    from airflow_trident import connections
    from airflow_trident.hooks.connections import install

    install()
    try:
        by_conn = iceberg_state(name, "topo.c", iceberg_conn_id="iceberg_test")
        assert rows_of(by_conn, "x", "trident_txid") == [(1, 1)]
        with pytest.raises(MissingConnectionError, match="'nope' was not found"):
            iceberg_state(name, "topo.c", iceberg_conn_id="nope").load_table()
    finally:
        connections.install_resolver(None)


def test_an_opaque_spout_into_iceberg_is_not_exactly_once() -> None:
    topology = TridentTopology("iceberg_opaque")
    stream = topology.new_stream("s", MemoryOpaqueSpout(SENTENCES, ["sentence"], 2))
    with pytest.raises(NotExactlyOnceError):
        stream.partition_persist(iceberg_state("db.t", "x"), ["sentence"], IcebergWriter())


# -- whole batches, in-process --------------------------------------------------------------


def run_batch(steps: BatchSteps, run_id: str) -> int:
    txid = int(steps.begin(run_id)["txid"])
    steps.process_local(txid)
    assert steps.commit(txid)["applied"]
    steps.success(txid)
    return txid


def word_counts(factory: Any) -> Counter[str]:
    return Counter(r["word"] for r in table_rows(factory))


def test_batches_that_fail_retry_replay_and_backfill_leave_every_word_once(
    catalog: dict[str, str], tmp_path: Path
) -> None:
    # Given word events appended to Iceberg by in-process batches, with a fault switch
    sink = FailOnce(iceberg_state(table_name(), "iceberg_steps.events", catalog=catalog))
    topology = words_topology("iceberg_steps", sink)
    store = MemoryCoordinatorStore(topology.name)
    steps = BatchSteps(topology, store, StagingArea(str(tmp_path / "staging"), topology.name))
    run_batch(steps, "r1")
    # When txid 2's commit dies before its Iceberg commit, and is retried
    txid = int(steps.begin("r2")["txid"])
    steps.process_local(txid)
    sink.arm("before")
    with pytest.raises(StateError, match="before its Iceberg commit"):
        steps.commit(txid)
    assert word_counts(sink.inner) == expected_words(1)
    assert steps.commit(txid)["applied"]
    steps.success(txid)
    # And txid 3's commit dies after its Iceberg commit (before the compare-and-set), retried
    txid = int(steps.begin("r3")["txid"])
    steps.process_local(txid)
    sink.arm("after")
    with pytest.raises(StateError, match="after its Iceberg commit"):
        steps.commit(txid)
    assert store.commits.committed_txid() == 2
    assert steps.commit(txid)["applied"]
    steps.success(txid)
    # And the newest txid and an older one are replayed, and committed txids 1..3 backfilled
    steps.replay(3)
    steps.replay(1)
    for t in (1, 2, 3):
        steps.replay(t)
    for i in (4, 5, 6):
        run_batch(steps, f"r{i}")
    # Then the table read back holds every word of the source once, each txid's rows once
    assert word_counts(sink.inner) == expected_words(6)
    props = sink.inner.load_table().properties
    assert {v for k, v in props.items() if ".p" in k} == {"6"}
