"""A newcomer's first look, in a real browser: log in, find the Trident DAG, open its run and
read the txid in the run's note, open the process task's log. A screenshot of each page is kept
in ``.work/artifacts/ui`` (``01-login.png`` ... ``04-process-log.png``)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.conftest import TridentUi
from tests.harness.ui import log_in

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.browser]

WAIT_S = 30.0


def _page_text(driver: Any) -> str:
    text: str = driver.find_element(By.TAG_NAME, "body").text
    return text


def _wait_for_text(driver: Any, needle: str) -> str:
    """The page's text once it shows ``needle`` (a React page renders after its load)."""
    WebDriverWait(driver, WAIT_S).until(lambda d: needle in _page_text(d))
    return _page_text(driver)


def _plugin_import_errors(ui: TridentUi) -> dict[str, Any]:
    """``/api/v2/plugins/importErrors`` with the login's token."""
    body = json.dumps({"username": ui.login.username, "password": ui.login.password}).encode()
    request = urllib.request.Request(
        f"{ui.url}/auth/token", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=WAIT_S) as response:
        token = json.loads(response.read())["access_token"]
    request = urllib.request.Request(
        f"{ui.url}/api/v2/plugins/importErrors", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=WAIT_S) as response:
        errors: dict[str, Any] = json.loads(response.read())
    return errors


@pytest.mark.long  # a DAG run with spark-submit and a browser: ~2 min
def test_a_newcomer_finds_the_txid_and_the_log_of_a_batch(
    trident_ui: TridentUi, browser: Any, ui_artifacts: Path
) -> None:
    # Given the UI of a home where one Trident batch ran (txid 1)
    run_id = trident_ui.run.run_id
    assert run_id is not None
    run_url = f"{trident_ui.url}/dags/{trident_ui.dag_id}/runs/{quote(run_id, safe='')}"

    # When the user logs in
    browser.get(trident_ui.url)
    WebDriverWait(browser, WAIT_S).until(lambda d: d.find_elements(By.NAME, "username"))
    browser.save_screenshot(str(ui_artifacts / "01-login.png"))
    log_in(browser, trident_ui.url, trident_ui.login)

    # Then the home page shows no plugin import error (each of the provider's plugins loads
    # once: a second copy of the package's metadata made Airflow register them twice)
    browser.get(trident_ui.url)
    home = _wait_for_text(browser, "Dag")
    assert "Import Error" not in home, home
    errors = _plugin_import_errors(trident_ui)
    assert errors["total_entries"] == 0, errors

    # And finds the DAG in the DAG list
    browser.get(f"{trident_ui.url}/dags")
    dags = _wait_for_text(browser, trident_ui.dag_id)
    browser.save_screenshot(str(ui_artifacts / "02-dags.png"))
    assert "1 Dag" in dags  # no example DAGs beside it
    browser.find_element(By.LINK_TEXT, trident_ui.dag_id).click()
    WebDriverWait(browser, WAIT_S).until(lambda d: f"/dags/{trident_ui.dag_id}" in d.current_url)

    # Then its run's page shows the txid in the run's note, with the attempt the process and
    # commit tasks and the Trident tab name (the first processing is attempt 1, never 0)
    browser.get(run_url)
    page = _wait_for_text(browser, "txid 1 · attempt 1")
    browser.save_screenshot(str(ui_artifacts / "03-run-note.png"))
    assert run_id in page

    # And the process task's log shows the batch it processed (the log view renders its end)
    browser.get(f"{run_url}/tasks/batch.process")
    log = _wait_for_text(browser, "txid 1 · attempt 1 processed:")
    browser.save_screenshot(str(ui_artifacts / "04-process-log.png"))
    assert "ProcessBatchOperator" in log
    assert "records in (" in log  # the batch's summary line: records per partition, keys staged
