"""The Trident status view in a real browser: log in to a real Airflow API server, open the DAG's
"Trident" tab (the plugin's page in the Airflow UI), check that the page renders and that its
numbers are the ledger's and ZooKeeper's, and keep a screenshot
(``.work/artifacts/ui/status_view.png``).

The batches: the real ``airflow dags test`` run of the ``trident_ui`` fixture (txid 1), then more
batches of the same topology through the same lifecycle in this process (txids 2..4 committed,
5 processed, 6 begun), so the timeline shows commits in order and batches in flight.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.lifecycle import zookeeper_batch_steps
from airflow_trident.coordination.client import ZkConfig, connect
from airflow_trident.examples.topologies import word_count
from tests.browser.conftest import ROOT, TridentUi
from tests.harness.airflow import run_airflow
from tests.harness.status import run_batches
from tests.harness.ui import log_in

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.browser]

WAIT_S = 30.0


def _zookeeper(ui: TridentUi, zk_hosts: str) -> ZkConfig:
    """The ZooKeeper root of the home's ``trident_zookeeper_default`` connection."""
    done = run_airflow(ui.home, "connections", "get", "trident_zookeeper_default", "-o", "json",
                       timeout_s=60)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    conn = json.loads(done.stdout)[0]
    extra = conn["extra_dejson"] if "extra_dejson" in conn else json.loads(conn["extra"] or "{}")
    return ZkConfig(hosts=zk_hosts, root=extra["root"], timeout=5.0)


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", header[16:24])
    return width, height


def _fact(driver: Any, name: str) -> int:
    return int(driver.find_element(By.CSS_SELECTOR, f'[data-fact="{name}"]').text)


def _cell(driver: Any, txid: int, field: str) -> str:
    selector = f'table.batches tr[data-txid="{txid}"] td[data-field="{field}"]'
    text: str = driver.find_element(By.CSS_SELECTOR, selector).text
    return text


@pytest.mark.long  # the status page stays in the test command: test_status_page_batches.py
def test_the_status_view_shows_the_ledger_in_the_airflow_ui(
    trident_ui: TridentUi, browser: Any, ui_artifacts: Path, zk_hosts: str
) -> None:
    # Given txid 1 committed by a real DAG run, then txids 2..4 committed, 5 processed, 6 begun
    root = trident_ui.home.path.parent  # the fixture's work dir: state.db and staging/
    state_url = f"sqlite:///{root / 'state.db'}"
    zk = _zookeeper(trident_ui, zk_hosts)
    client = connect(zk)
    try:
        steps = zookeeper_batch_steps(
            word_count, client, root=zk.root, staging_root=str(root / "staging"),
            state_url=state_url,
        )  # fmt: skip
        assert steps.store.commits.committed_txid() == 1
        run_batches(steps, committed=3, processed=1, begun=1)
    finally:
        client.stop()
        client.close()
    rows = CommitLedger(state_url).rows(word_count.name)
    assert [r["txid"] for r in rows] == [1, 2, 3, 4]

    # When the user logs in and opens the DAG's "Trident" tab
    log_in(browser, trident_ui.url, trident_ui.login)
    browser.get(f"{trident_ui.url}/dags/{trident_ui.dag_id}/plugin/trident-status")
    wait = WebDriverWait(browser, WAIT_S)
    frame = wait.until(ec.presence_of_element_located((By.TAG_NAME, "iframe")))
    assert frame.get_attribute("src").endswith(f"/trident-status/dags/{trident_ui.dag_id}")
    browser.switch_to.frame(frame)
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, '[data-fact="committed_txid"]')))

    # Then the page inside the Airflow UI shows ZooKeeper's txids and the ledger's numbers
    assert (_fact(browser, "committed_txid"), _fact(browser, "allocated_txid"),
            _fact(browser, "in_flight")) == (4, 6, 2)  # fmt: skip
    assert _fact(browser, "records_in") == sum(r["records_in"] for r in rows)
    for row in rows:
        assert _cell(browser, row["txid"], "records_in") == str(row["records_in"])
        keys = json.loads(row["keys_written"])
        assert _cell(browser, row["txid"], "keys_written") == ", ".join(
            f"{k}={v}" for k, v in sorted(keys.items()))  # fmt: skip
        assert _cell(browser, row["txid"], "phase") == "committed"
    assert [_cell(browser, t, "phase") for t in (5, 6)] == ["processed", "begun"]
    # And each committed txid names the run that committed it: the DAG run, then run_2..run_4
    assert [_cell(browser, t, "run_id") for t in (1, 2, 3, 4)] == [
        trident_ui.run.run_id, "run_2", "run_3", "run_4"]  # fmt: skip
    # And the timeline renders a commit bar for each commit, in txid order along the time axis
    bars = browser.find_elements(By.CSS_SELECTOR, "svg.timeline rect.commit")
    assert len(bars) == 4
    assert all(bar.is_displayed() and bar.size["width"] > 0 for bar in bars)
    starts = [float(bar.get_attribute("x")) for bar in bars]
    assert starts == sorted(starts)
    lag = browser.find_element(By.CSS_SELECTOR, 'tr[data-partition="sentences/p0"]')
    assert lag.find_element(By.CSS_SELECTOR, '[data-field="as_of_txid"]').text == "5"

    # And the screenshot of the Airflow UI with the view is kept
    browser.switch_to.default_content()
    shot = ui_artifacts / "status_view.png"
    assert browser.save_screenshot(str(shot))
    assert _png_size(shot)[0] >= 1000  # the whole UI at the browser's width
    frame_shot = ui_artifacts / "status_view_frame.png"
    assert frame.screenshot(str(frame_shot))
    assert _png_size(frame_shot)[0] > 600
    assert frame_shot.stat().st_size > 20_000  # not a blank frame (a blank PNG is ~5 KB)
    if os.environ.get("TRIDENT_DOCS_SHOTS") == "1":  # docs/status.md shows it: when asked
        docs_shot = ROOT / "docs" / "ui" / "status_view_airflow.png"
        docs_shot.parent.mkdir(parents=True, exist_ok=True)
        docs_shot.write_bytes(shot.read_bytes())

    # And the list of Trident topologies (Browse -> Trident topologies) links to the DAG's page
    browser.get(f"{trident_ui.url}/trident-status/")
    link = wait.until(ec.presence_of_element_located(
        (By.CSS_SELECTOR, f'a[data-dag-id="{trident_ui.dag_id}"]')))  # fmt: skip
    assert link.get_attribute("href").endswith(f"/trident-status/dags/{trident_ui.dag_id}")

    # And the DAG run's own "Trident" tab names the txid the run is bound to and its phase
    run_id = trident_ui.run.run_id
    browser.get(f"{trident_ui.url}/dags/{trident_ui.dag_id}/runs/{run_id}/plugin/trident-run")
    frame = wait.until(ec.presence_of_element_located((By.TAG_NAME, "iframe")))
    assert "/trident-status/dags/" in frame.get_attribute("src")
    browser.switch_to.frame(frame)
    summary = wait.until(ec.presence_of_element_located(
        (By.CSS_SELECTOR, '[data-fact="run_summary"]')))  # fmt: skip
    assert summary.text == "txid 1 · committed · attempt 1"
    assert browser.find_element(By.CSS_SELECTOR, '[data-fact="run_txid"]').text == "1"
    browser.switch_to.default_content()
    run_shot = ui_artifacts / "status_run_tab.png"
    assert browser.save_screenshot(str(run_shot))
    if os.environ.get("TRIDENT_DOCS_SHOTS") == "1":  # refresh the docs' copy only when asked
        (ROOT / "docs" / "ui" / "status_run_tab.png").write_bytes(run_shot.read_bytes())
