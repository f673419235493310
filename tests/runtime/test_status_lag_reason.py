"""The lag of a file log as two readers see it (issue 31): the Trident tab's process and an
``airflow-trident status`` process collect it the same way, asking the topology's spout in
their own process. A reader whose topology names the log's root as the DAG's tasks do shows the
files waiting; one whose environment names another root (the main job's
``TRIDENT_DATA_DIR`` unset) cannot list it, and now says why instead of a bare "unknown".
Real ZooKeeper, SQLite state and ledger, a staging root, batches in process."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.lifecycle import zookeeper_batch_steps
from airflow_trident.batch.status import StatusCollector, TopologyStatus
from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.operation import Count, Split
from airflow_trident.plugins.status_page import render_page
from airflow_trident.spout.file_log import FileLogSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology

pytestmark = pytest.mark.integration


def file_log_topology(name: str, root: Path) -> TridentTopology:
    topology = TridentTopology(name)
    topology.new_stream("sentences", FileLogSpout(root, ["sentence"], max_files=1)).each(
        ["sentence"], Split(), ["word"]
    ).group_by(["word"]).persistent_aggregate(
        sql_state(None, name, "transactional", key_fields=("word",), value_type="bigint"),
        Count(), ["count"], name="counts",
    )  # fmt: skip
    return topology


def land(root: Path, name: str, lines: int) -> None:
    (root / "p0").mkdir(parents=True, exist_ok=True)
    text = "".join(f'{{"sentence": "the quick fox {i}"}}\n' for i in range(lines))
    (root / "p0" / name).write_text(text)


def test_a_reader_that_cannot_reach_the_file_log_says_why_its_lag_is_unknown(
    tmp_path: Path, zk_hosts: str
) -> None:
    # Given one batch of a file log, and two files landed since
    log, state_url = tmp_path / "landing", f"sqlite:///{tmp_path / 'state.db'}"
    name = f"lag_reason_{uuid.uuid4().hex[:8]}"
    topology = file_log_topology(name, log)
    zk = ZkConfig(hosts=zk_hosts, root="/trident_test_lag_reason", timeout=5.0)
    client = connect(zk)
    statuses: dict[str, TopologyStatus] = {}
    try:
        steps = zookeeper_batch_steps(topology, client, root=zk.root,
                                      staging_root=str(tmp_path / "staging"),
                                      state_url=state_url)  # fmt: skip
        land(log, "000001.json", 5)
        steps.run_batch("run_1")
        land(log, "000002.json", 5)
        land(log, "000003.json", 5)
        # When the status is read by the tasks' environment (the log's root), and by a process
        # whose environment names another root (the same topology module, built elsewhere)
        elsewhere = file_log_topology(name, tmp_path / "not_here" / "landing")
        for reader, built in (("tasks", topology), ("elsewhere", elsewhere)):
            statuses[reader] = StatusCollector(
                steps.store, ledger=CommitLedger(state_url), topology=built,
                staging=steps.staging,
            ).collect(dag_id="lag_reason")  # fmt: skip
        steps.store.delete_all()
    finally:
        client.stop()
        client.close()
    # Then the first shows the two files waiting (the figure the Trident tab shows)
    waiting = sum((log / "p0" / f"00000{n}.json").stat().st_size for n in (2, 3))
    (tasks,) = statuses["tasks"].lag
    assert tasks.text() == f"2 files ({waiting:,} bytes)"
    assert f"sentences/p0: 2 files ({waiting:,} bytes) after txid 1" in (
        statuses["tasks"].format_text())
    # And the other cannot list the root, and says so (not a bare "unknown"), on the command
    # line and on the page alike
    (other,) = statuses["elsewhere"].lag
    assert other.pending is None
    missing = tmp_path / "not_here" / "landing" / "p0"
    assert other.text().startswith("unknown (FileNotFoundError: ")
    assert str(missing) in other.text()
    assert f"sentences/p0: {other.text()} after txid 1" in statuses["elsewhere"].format_text()
    assert str(missing) in render_page(statuses["elsewhere"])
