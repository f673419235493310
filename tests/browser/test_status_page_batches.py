"""The Trident tab's page in a real browser (headless Chromium), over real batches of a file-log
topology (ZooKeeper, SQLite state and ledger, a staging root; in-process runtime): a committed
txid names the run that committed it and shows a later replay as a replay; the file log's lag
(files and bytes behind) shows while records wait; an idle gap between batches is drawn
compressed so each bar keeps a readable width. Screenshot: ``docs/ui/status_page.png``.

The page is the one the plugin serves (``render_page``), opened from a file: no Airflow server
(``test_status_view.py`` checks the page inside the Airflow UI).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.lifecycle import zookeeper_batch_steps
from airflow_trident.batch.status import StatusCollector
from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.operation import Count, Filter, Split
from airflow_trident.plugins.status_page import render_page
from airflow_trident.spout.file_log import FileLogSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology
from airflow_trident.tuple import TridentTuple
from tests.harness.ui import chromium

pytestmark = [pytest.mark.integration, pytest.mark.browser]

# the docs' screenshot is refreshed only when asked (TRIDENT_DOCS_SHOTS=1): a test run must
# not write into the source tree (a fresh clone's tree stays clean)
DOCS_UI = Path(__file__).resolve().parents[2] / "docs" / "ui"
IDLE_S = 3.0  # a pause between batches: an idle gap on the timeline (no assertion on time)
PAUSE_S = 0.01  # per word in the process step: processing is most of each batch's busy time


class Pausing(Filter):
    """Keeps every word after a short pause, so that each batch's process step takes most of
    its busy span (a SQLite commit of a few keys can otherwise outlast processing 40 lines and
    leave a process bar too narrow for the assertion: 38.2 px once)."""

    def is_keep(self, tuple_: TridentTuple) -> bool:
        time.sleep(PAUSE_S)
        return True


def _land(log: Path, name: str, lines: int) -> None:
    (log / "p0").mkdir(parents=True, exist_ok=True)
    text = "".join(f'{{"sentence": "the quick fox {i}"}}\n' for i in range(lines))
    (log / "p0" / name).write_text(text)


def test_runs_replays_lag_and_idle_gaps_read_at_a_glance(tmp_path: Path, zk_hosts: str) -> None:
    # Given two batches of a file log an idle pause apart, a replay of txid 1, and files waiting
    log, state_url = tmp_path / "log", f"sqlite:///{tmp_path / 'state.db'}"
    name = f"browser_status_{uuid.uuid4().hex[:8]}"
    topology = TridentTopology(name)
    topology.new_stream("sentences", FileLogSpout(log, ["sentence"], max_files=1)).each(
        ["sentence"], Split(), ["word"]
    ).filter(Pausing()).group_by(["word"]).persistent_aggregate(
        sql_state(None, name, "transactional", key_fields=("word",), value_type="bigint"),
        Count(), ["count"], name="counts",
    )  # fmt: skip
    zk = ZkConfig(hosts=zk_hosts, root="/trident_test_browser_status", timeout=5.0)
    client = connect(zk)
    try:
        steps = zookeeper_batch_steps(topology, client, root=zk.root,
                                      staging_root=str(tmp_path / "staging"),
                                      state_url=state_url)  # fmt: skip
        _land(log, "000001.json", 40)
        _land(log, "000002.json", 40)
        steps.run_batch("scheduled__2026-11-25T09:00:00+00:00")
        time.sleep(IDLE_S)
        steps.run_batch("scheduled__2026-11-25T09:05:00+00:00")
        steps.begin("manual__replay_txid_1", 1)  # dag_run.conf {"txid": 1}: commits nothing
        assert steps.commit(1)["applied"] is False
        for n in range(3, 6):
            _land(log, f"{n:06d}.json", 80)
        status = StatusCollector(steps.store, ledger=CommitLedger(state_url), topology=topology,
                                 staging=steps.staging).collect(dag_id="word_count_files")
        steps.store.delete_all()
    finally:
        client.stop()
        client.close()
    page = tmp_path / "status.html"
    page.write_text(render_page(status))
    waiting = sum((log / "p0" / f"{n:06d}.json").stat().st_size for n in range(3, 6))

    # When a person opens the page
    with chromium(tmp_path, width=1100, height=900) as browser:
        browser.get(page.as_uri())

        def cell(txid: int, field: str) -> Any:
            return browser.find_element(
                By.CSS_SELECTOR, f'table.batches tr[data-txid="{txid}"] td[data-field="{field}"]')

        # Then txid 1 names the run that committed it, and the replay as a replay
        assert cell(1, "run_id").text == "scheduled__2026-11-25T09:00:00+00:00"
        assert cell(1, "replay_run_id").text == "replayed by manual__replay_txid_1"
        assert cell(2, "run_id").text == "scheduled__2026-11-25T09:05:00+00:00"
        assert cell(2, "replay_run_id").text == ""
        # And the file log's lag: three files and their bytes behind txid 2
        lag = browser.find_element(By.CSS_SELECTOR, 'tr[data-partition="sentences/p0"]')
        assert lag.find_element(By.CSS_SELECTOR, '[data-field="pending"]').text == (
            f"3 files ({waiting:,} bytes)")
        assert lag.find_element(By.CSS_SELECTOR, '[data-field="as_of_txid"]').text == "2"
        assert "tells its lag" not in browser.page_source
        # And the idle pause is one compressed gap; both batches keep readable process bars
        gaps = browser.find_elements(By.CSS_SELECTOR, "svg.timeline g.gap")
        assert len(gaps) == 1
        assert float(gaps[0].get_attribute("data-seconds")) >= IDLE_S - 1
        timeline = browser.find_element(By.CSS_SELECTOR, "svg.timeline")
        for txid in (1, 2):
            bar = timeline.find_element(By.CSS_SELECTOR, f'g[data-txid="{txid}"] rect.process')
            assert bar.is_displayed()
            assert bar.size["width"] >= 40, (txid, bar.size)
        shots = DOCS_UI if os.environ.get("TRIDENT_DOCS_SHOTS") == "1" else tmp_path
        shots.mkdir(parents=True, exist_ok=True)
        shot = shots / "status_page.png"
        assert browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 20_000  # not a blank page
