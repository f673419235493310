"""A txid's shape — how many commit partitions each state's rows are staged in, and which rows
go where — on both runtimes and on replay (issue 32, items 1 and 2).

* Spark stages a ``partition_persist`` (and a state whose new values a stream reads) in exactly
  the in-process runtime's partitions, whatever the batch's size and Spark's settings (adaptive
  coalescing, empty partitions, ``maxRecordsPerFile``): Spark gave 1 where the hint said 2.
* A txid half committed into an Iceberg or Delta table, then replayed with another parallelism
  or on the other runtime (whose hash spreads the rows otherwise), is refused before anything
  is written; replayed as it was first, it commits every row once.
* An older txid replayed with another partition count, applied past the coordinator (as after a
  lost ZooKeeper), writes nothing and leaves the table's record of the newest txid.

Every runtime and commit mode (in process, worker commit; Spark, worker commit; Spark, Spark
commit), on the real ZooKeeper; Iceberg with its catalog in the run's state database on SQLite
and PostgreSQL, Delta beside the SQLite one.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_trident.batch.on_spark import commit_on_spark, process_on_spark
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.coordination.paths import CoordinatorPaths
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import StateError, TridentError
from airflow_trident.operation import Count, Split
from airflow_trident.runtime.reference import load_topology
from airflow_trident.runtime.spark.commit import SparkBatchApplier
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.iceberg import IcebergWriter, iceberg_state
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology
from tests.harness.iceberg_sinks import table_rows
from tests.runtime import shape_topologies as st

pytestmark = pytest.mark.integration

MODES = ["local", "spark_worker_commit", "spark_commit"]
SINKS = [("iceberg", "sqlite"), ("iceberg", "postgresql"), ("delta", "sqlite")]


# -- item 2: the partition count does not depend on the runtime ------------------------------


def _sink(tmp_path: Path, name: str) -> Any:
    catalog = {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/c.db",
        "warehouse": f"file://{tmp_path}",
    }
    return iceberg_state(f"trident_tests.{name}", name, catalog=catalog)


def _lines(t: TridentTopology, take: int, parts: int = 3) -> Any:
    data = {f"p{p}": [(f"k{(p + i) % 5} j{i}",) for i in range(8)] for p in range(parts)}
    spout = MemoryTransactionalSpout(data, ["line"], take_per_batch=take)
    return t.new_stream(f"lines{parts}", spout).each(["line"], Split(), ["word"])


def shaped(kind: str, name: str, tmp_path: Path) -> TridentTopology:
    """A topology whose state ``events`` (and ``counts``) has a fixed commit partition count."""
    t = TridentTopology(name)
    take = 1 if kind in ("by4", "by2") else 3
    words = _lines(t, take)
    if kind == "by4":  # a batch of few words: some of the 4 partitions are empty
        words = words.partition_by(["word"]).parallelism_hint(4)
    elif kind == "by2":
        words = words.partition_by(["word"]).parallelism_hint(2)
    elif kind == "shuffle3":
        words = words.shuffle().parallelism_hint(3)
    elif kind == "merge":
        words = t.merge(words, _lines(t, take, parts=2))
    if kind == "new_values":
        counts = words.group_by(["word"]).persistent_aggregate(
            memory_state(name, "transactional"), Count(), ["count"], name="counts"
        )
        words = counts.new_values_stream()
    words.partition_persist(_sink(tmp_path, name), ["word"], IcebergWriter(), name="events")
    return t


def partitions(manifest: dict[str, Any], steps: BatchSteps) -> dict[str, list[Counter[str]]]:
    """Each state's staged partitions, as the commit reads them (words per partition)."""
    staged = steps.staging.read_states(manifest)
    return {
        name: [Counter(str(r[0]) for r in part) for part in s.partitions]
        for name, s in staged.items()
    }


SETTINGS = {
    "defaults": {},
    "tiny files, many shuffle partitions": {
        "spark.sql.files.maxRecordsPerFile": "1",
        "spark.sql.shuffle.partitions": "7",
        "spark.sql.adaptive.coalescePartitions.enabled": "true",
    },
}


@pytest.fixture(params=list(SETTINGS))
def spark_settings(request: pytest.FixtureRequest, spark: Any) -> Iterator[Any]:
    """The session with some settings changed (restored after)."""
    changed = SETTINGS[request.param]
    before = {k: spark.conf.get(k, None) for k in changed}
    for key, value in changed.items():
        spark.conf.set(key, value)
    yield spark
    for key, value in before.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


@pytest.mark.parametrize("kind", ["source", "by4", "by2", "shuffle3", "merge", "new_values"])
def test_spark_stages_the_in_process_commit_partitions(
    spark_settings: Any, tmp_path: Path, unique_name: str, kind: str
) -> None:
    # Given a topology whose state has a fixed commit partition count
    t = shaped(kind, unique_name, tmp_path)
    steps = BatchSteps(t, MemoryCoordinatorStore(t.name), StagingArea(str(tmp_path), t.name))
    for run in ("r1", "r2"):
        txid = int(steps.begin(run)["txid"])
        # When a batch is staged on Spark and in process
        on_spark = process_on_spark(steps, spark_settings, txid, 0.0)
        in_process = steps.process_local(txid)
        # Then each state has the same commit partitions, in the manifest and in the files
        for name in on_spark["states"]:
            assert (
                on_spark["states"][name]["partitions"] == in_process["states"][name]["partitions"]
            ), name
        spark_parts, local_parts = partitions(on_spark, steps), partitions(in_process, steps)
        assert {n: len(p) for n, p in spark_parts.items()} == {
            n: len(p) for n, p in local_parts.items()
        }
        assert {n: sum(p, Counter()) for n, p in spark_parts.items()} == {
            n: sum(p, Counter()) for n, p in local_parts.items()
        }
        if kind in ("source", "merge"):  # placed by their source partition: the same rows
            assert spark_parts["events"] == local_parts["events"]


# -- items 1 and 2: a half-committed txid keeps its shape; an older txid writes nothing ------


@pytest.fixture(params=SINKS, ids=["-".join(s) for s in SINKS])
def sink(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    kind, backend = request.param
    url = (
        request.getfixturevalue("pg_url")
        if backend == "postgresql"
        else f"sqlite:///{tmp_path}/state.db"
    )
    if kind == "iceberg":
        catalog = st.iceberg_sink().located_at(url).inner.load_catalog()
        if catalog.table_exists(st.TABLE):
            catalog.drop_table(st.TABLE)
    return kind, url


@pytest.fixture
def stores(zk_config: ZkConfig) -> Iterator[CoordinatorStore]:
    st.FAIL_MARKER.unlink(missing_ok=True)
    client = connect(zk_config)
    store = CoordinatorStore(client, CoordinatorPaths(zk_config.root, st.NAME))
    store.delete_all()
    yield store
    store.delete_all()
    client.stop()
    client.close()
    st.FAIL_MARKER.unlink(missing_ok=True)


class Run:
    """The topology with 2 and with 3 partitions, over one store, staging and state database."""

    def __init__(self, kind: str, url: str, store: CoordinatorStore, root: Path, spark: Any):
        self.kind, self.spark = kind, spark
        binding = StateBinding(url)
        self.references = {n: f"tests.runtime.shape_topologies:{kind}_{n}" for n in (2, 3)}
        self.steps = {
            n: BatchSteps(
                load_topology(ref), store, StagingArea(str(root), st.NAME), states=binding
            )
            for n, ref in self.references.items()
        }
        self.store = store
        located = binding.factory(self.steps[2].topology.nodes[self._node()].factory)
        self.table = located.inner

    def _node(self) -> str:
        return self.steps[2].topology.states["events"]

    def process(self, n: int, runtime: str, txid: int) -> None:
        if runtime == "local":
            self.steps[n].process_local(txid)
        else:
            process_on_spark(self.steps[n], self.spark, txid, 0.0)

    def commit(self, n: int, mode: str, txid: int) -> dict[str, Any]:
        if mode == "spark_commit":
            return commit_on_spark(self.steps[n], self.spark, self.references[n], txid, 0.0)
        return self.steps[n].commit(txid)

    def apply_past_the_coordinator(self, n: int, mode: str, txid: int) -> None:
        """Apply txid's staged batch to the states without the coordinator (its order check,
        the record of the txid's first shape), as after a lost ZooKeeper."""
        steps = self.steps[n]
        plan = steps.plan(txid)
        manifest = steps.staging.verified_manifest(plan.attempt, plan.metas)
        if mode == "spark_commit":
            applier = SparkBatchApplier(
                self.spark, self.references[n], steps.staging, lambda t: {}, steps.states
            )
            applier.apply_staged(plan, manifest, revert=False)
        else:
            steps.apply_staged(plan, manifest, revert=False)

    def words(self) -> Counter[str]:
        if self.kind == "iceberg":
            return Counter(r["word"] for r in table_rows(self.table))
        path = self.table.inner.path
        if not DeltaTable.is_deltatable(path):
            return Counter()
        return Counter(pq.read_table(DeltaTable(path).file_uris())["word"].to_pylist())

    def settled_words(self) -> Counter[str]:
        """The words once no commit task is still writing: a failed Spark job's other tasks may
        finish their table commit after the job ended."""
        words, stable_since = self.words(), time.monotonic()
        deadline = stable_since + 60
        while time.monotonic() - stable_since < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
            now = self.words()
            if now != words:
                words, stable_since = now, time.monotonic()
        return words

    def newest(self) -> str:
        """The table's record of the newest txid and its partition count."""
        if self.kind == "iceberg":
            return str(self.table.load_table().properties[f"trident.txid.{st.APP}"])
        txid, count = divmod(DeltaTable(self.table.inner.path).transaction_version(st.APP), 4096)
        return f"{txid}/{count}"


def _shape_cases() -> list[Any]:
    """Every sink and mode; the test command runs each Spark commit mode on one format and each
    format in one Spark commit mode (Iceberg/SQLite by Spark's commit, Delta by the worker's),
    and every sink in process; the other Spark cases (the PostgreSQL catalog's too) are the long
    tier's."""
    in_command = {
        (("iceberg", "sqlite"), "spark_commit"),
        (("delta", "sqlite"), "spark_worker_commit"),
    }
    cases = []
    for s in SINKS:
        for mode in MODES:
            long = mode != "local" and (s, mode) not in in_command
            marks = [pytest.mark.long] if long else []
            cases.append(pytest.param(s, mode, marks=marks, id=f"{'-'.join(s)}-{mode}"))
    return cases


@pytest.mark.parametrize(("sink", "mode"), _shape_cases(), indirect=["sink"])
def test_a_txid_keeps_its_shape_on_replay(
    sink: tuple[str, str], stores: CoordinatorStore, mode: str, spark: Any, tmp_path: Path
) -> None:
    run = Run(*sink, stores, tmp_path / "staging", spark)
    runtime = "local" if mode == "local" else "spark"
    other = "spark" if mode == "local" else "local"
    # Given txids 1 and 2 committed in 2 partitions
    for batch in (1, 2):
        txid = int(run.steps[2].begin(f"r{batch}")["txid"])
        run.process(2, runtime, txid)
        assert run.commit(2, mode, txid)["applied"]
    assert run.words() == st.expected_words(2)
    # When txid 3's commit dies after a partition's table commit (the txid half written)
    txid = int(run.steps[2].begin("r3")["txid"])
    run.process(2, runtime, txid)
    st.FAIL_MARKER.touch()
    with pytest.raises(TridentError, match="died after its table commit"):
        run.commit(2, mode, txid)
    half = run.settled_words()
    assert stores.commits.committed_txid() == 2
    assert half != st.expected_words(2)
    # Then txid 3 replayed in 3 partitions is refused before anything is written
    run.process(3, runtime, txid)
    with pytest.raises(StateError, match=r"txid 3: state 'events' .* has 3 partitions"):
        run.commit(3, mode, txid)
    # And replayed on the other runtime (its hash places the words otherwise) too
    run.process(2, other, txid)
    with pytest.raises(StateError, match=r"first commit started with 2 partitions placed by"):
        run.commit(2, mode, txid)
    assert run.words() == half
    assert stores.commits.committed_txid() == 2
    # And replayed as it was first, it commits every word of it once
    run.process(2, runtime, txid)
    assert run.commit(2, mode, txid)["applied"]
    assert run.words() == st.expected_words(3)
    assert run.newest() == "3/2"
    # When an older txid is replayed in 3 partitions and applied past the coordinator (as
    # after a lost ZooKeeper) / Then it writes nothing, and the newest txid's record stays
    run.process(3, runtime, 2)
    run.apply_past_the_coordinator(3, mode, 2)
    assert run.words() == st.expected_words(3)
    assert run.newest() == "3/2"
    # And the next txid commits as usual
    txid = int(run.steps[2].begin("r4")["txid"])
    run.process(2, runtime, txid)
    assert run.commit(2, mode, txid)["applied"]
    assert run.words() == st.expected_words(4)


def test_a_txid_first_committed_before_shapes_were_recorded_commits(
    stores: CoordinatorStore, tmp_path: Path
) -> None:
    # Given txid 1 whose commit started (and died) before shapes were recorded: no shape
    run = Run("iceberg", f"sqlite:///{tmp_path}/state.db", stores, tmp_path / "staging", None)
    txid = int(run.steps[2].begin("r1")["txid"])
    run.process(2, "local", txid)
    assert not stores.attempts.mark_commit_started(txid)
    # When it commits / Then it is applied (nothing to compare with)
    assert run.commit(2, "local", txid)["applied"]
    assert run.words() == st.expected_words(1)


def test_the_shape_is_recorded_when_the_commit_starts(
    stores: CoordinatorStore, tmp_path: Path
) -> None:
    run = Run("iceberg", f"sqlite:///{tmp_path}/state.db", stores, tmp_path / "staging", None)
    txid = int(run.steps[2].begin("r1")["txid"])
    run.process(2, "local", txid)
    run.commit(2, "local", txid)
    assert stores.attempts.commit_shape(txid) == {"events": {"partitions": 2, "hash": "local"}}
