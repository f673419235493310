"""Look at an Airflow home in its UI: a complete ``airflow.cfg``, servers on loopback, a browser.

:func:`write_ui_config` makes an isolated home (:func:`~tests.harness.airflow.
prepare_airflow_home`) complete for its UI: ``airflow.cfg`` with the real DAGs folder, no example
DAGs, the LocalExecutor, an API server on 127.0.0.1, shared secrets (the API server and the task
processes must agree on the JWT secret) and a simple-auth-manager login kept in a file of the home.
:func:`serving_airflow` starts Airflow's components on it in a process group of their own, on
loopback only (the scheduler's and triggerer's log servers would listen on every interface, so
they are not started: the API server reads the task logs from the home's files), and kills the
group on exit. :func:`chromium` drives Debian's headless Chromium through Selenium, and
:func:`log_in` signs in to the UI; the browser tests (``tests/browser``) use these.

This module does not import ``airflow`` (the servers run in child processes), nor ``selenium``
until :func:`chromium` is called.

Examples
--------
>>> import tempfile
>>> from tests.harness.airflow import prepare_airflow_home
>>> with tempfile.TemporaryDirectory() as tmp:
...     home = prepare_airflow_home(Path(tmp), migrate=False)
...     login = write_ui_config(home, port=8080, password="pw")
...     cfg = (home.path / "airflow.cfg").read_text()
...     same = read_login(home) == login
>>> login.username, same, "host = 127.0.0.1" in cfg, "load_examples = False" in cfg
('admin', True, True, True)
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness.airflow import AirflowHome, run_airflow
from tests.harness.ports import free_port

__all__ = [
    "ALL_COMPONENTS",
    "UI_PORT",
    "AirflowServers",
    "UiLogin",
    "chromium",
    "free_port",
    "log_in",
    "read_login",
    "serving_airflow",
    "server_env",
    "store_connections",
    "wait_for_http",
    "write_ui_config",
]

UI_PORT = 8080
"""The port of the README's UI command (``bash scripts/ui.sh``)."""

USERNAME = "admin"
_PASSWORDS_FILE = "simple_auth_manager_passwords.json"
_MAX_PROFILE_PARENT = 48  # + "/chromium-XXXXXXXX/profile/SingletonSocket" < 108 bytes
ALL_COMPONENTS: tuple[str, ...] = ("api-server", "scheduler", "dag-processor", "triggerer")


@dataclass(frozen=True)
class UiLogin:
    """The simple auth manager's user of a home (role admin)."""

    username: str
    password: str



def write_ui_config(
    home: AirflowHome,
    *,
    port: int = UI_PORT,
    parallelism: int = 4,
    password: str | None = None,
) -> UiLogin:
    """Write ``home``'s ``airflow.cfg`` and login file so its UI (and its runs) work as is.

    Parameters
    ----------
    home:
        The home (its DAGs folder and metadata database go into the file).
    port:
        The API server's port on 127.0.0.1 (the UI, and the task processes' execution API).
    parallelism:
        The LocalExecutor's worker processes.
    password:
        The login's password (default: a new random one; an existing login file is kept).

    Returns
    -------
    UiLogin
        The user and password to sign in with.
    """
    passwords = home.path / _PASSWORDS_FILE
    if password is None and passwords.exists():
        password = read_login(home).password
    login = UiLogin(USERNAME, password or secrets.token_urlsafe(12))
    passwords.write_text(json.dumps({login.username: login.password}) + "\n")
    passwords.chmod(0o600)
    url = f"http://127.0.0.1:{port}"
    config = f"""\
# Written by tests.harness.ui.write_ui_config: this home's UI and runs work as is.
[core]
dags_folder = {home.dags_folder}
load_examples = False
executor = LocalExecutor
parallelism = {parallelism}
execution_api_server_url = {url}/execution/
simple_auth_manager_users = {login.username}:admin
simple_auth_manager_passwords_file = {passwords}

[database]
sql_alchemy_conn = sqlite:///{home.metadata_db}

[api]
host = 127.0.0.1
port = {port}
base_url = {url}
workers = 1
secret_key = {secrets.token_hex(16)}

[api_auth]
jwt_secret = {secrets.token_hex(24)}

[logging]
base_log_folder = {home.path / "logs"}

[scheduler]
enable_health_check = False
"""
    cfg = home.path / "airflow.cfg"
    cfg.write_text(config)
    cfg.chmod(0o600)
    return login


def store_connections(home: AirflowHome, connections: Mapping[str, Mapping[str, Any]]) -> None:
    """Store ``connections`` (``{conn_id: {"conn_type": ..., ...}}``) in ``home``'s metadata
    database (``airflow connections import --overwrite``), where every later process sees them.

    Raises
    ------
    RuntimeError
        If the import fails; the message carries its output.
    """
    path = home.path / "connections.import.json"
    path.write_text(json.dumps(dict(connections)))
    path.chmod(0o600)
    try:
        done = run_airflow(home, "connections", "import", "--overwrite", str(path), timeout_s=120)
    finally:
        path.unlink()
    if done.returncode != 0:
        msg = f"`airflow connections import` in {home.path} exited {done.returncode}:\n"
        raise RuntimeError(msg + done.stderr[-2000:])


def read_login(home: AirflowHome | Path) -> UiLogin:
    """The login :func:`write_ui_config` wrote in a home."""
    path = home.path if isinstance(home, AirflowHome) else Path(home)
    passwords: dict[str, str] = json.loads((path / _PASSWORDS_FILE).read_text())
    username, password = next(iter(passwords.items()))
    return UiLogin(username, password)


def server_env(port: int) -> dict[str, str]:
    """Settings moving a home's API server (and its tasks' execution API) to ``port``."""
    url = f"http://127.0.0.1:{port}"
    return {
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": url,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
    }


def wait_for_http(url: str, *, timeout_s: float, alive: Any = None) -> float:
    """Wait until ``url`` answers HTTP (any status); return the seconds it took.

    ``alive`` (optional) is called between tries and may raise to stop waiting early.
    """
    started = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return time.monotonic() - started
        except urllib.error.HTTPError:
            return time.monotonic() - started
        except OSError:
            if time.monotonic() - started > timeout_s:
                msg = f"{url} did not answer within {timeout_s:g}s"
                raise RuntimeError(msg) from None
        if alive is not None:
            alive()
        time.sleep(0.2)


@dataclass
class AirflowServers:
    """Airflow components serving one home; use :func:`serving_airflow`.

    Attributes
    ----------
    home, url:
        The home and the API server's base URL (``http://127.0.0.1:PORT``).
    log_dir:
        Where each component writes ``<component>.log``.
    processes:
        The components by name, all in the process group of the first.
    started_s:
        Seconds from the start until the API server answered.
    """

    home: AirflowHome
    url: str
    log_dir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started_s: float = 0.0

    def check_alive(self) -> None:
        """Raise ``RuntimeError`` (with the logs' tails) if a component exited."""
        for name, process in self.processes.items():
            if process.poll() is not None:
                msg = f"airflow {name} exited {process.returncode}:\n{self.logs_tail()}"
                raise RuntimeError(msg)

    def logs_tail(self, lines: int = 20) -> str:
        """The last lines of each component's log."""
        parts = []
        for name in self.processes:
            path = self.log_dir / f"{name}.log"
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
            parts.append(f"--- {name}\n" + "\n".join(text))
        return "\n".join(parts)


@contextlib.contextmanager
def serving_airflow(
    home: AirflowHome,
    *,
    port: int = UI_PORT,
    components: Sequence[str] = ALL_COMPONENTS,
    env: Mapping[str, str] | None = None,
    log_dir: Path | None = None,
    timeout_s: float = 120.0,
) -> Iterator[AirflowServers]:
    """Start Airflow's ``components`` on ``home`` (loopback only); SIGKILL them all on exit.

    Parameters
    ----------
    home:
        A migrated home whose ``airflow.cfg`` :func:`write_ui_config` wrote.
    port:
        The API server's port on 127.0.0.1 (refused if taken).
    components:
        Among ``api-server``, ``scheduler``, ``dag-processor``, ``triggerer``.
    env:
        More environment for every component (e.g. the topologies' variables).
    log_dir:
        Where the components' output goes (default ``home/servers``).
    timeout_s:
        How long the API server may take to answer.

    Raises
    ------
    RuntimeError
        If the port is taken, a component exits early, or the API server does not answer.
    """
    url = f"http://127.0.0.1:{port}"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            msg = f"127.0.0.1:{port} is taken: stop what listens there, or pick another --port"
            raise RuntimeError(msg)
    logs = log_dir or home.path / "servers"
    logs.mkdir(parents=True, exist_ok=True)
    servers = AirflowServers(home=home, url=url, log_dir=logs)
    child_env = home.env({**(env or {}), **server_env(port)})
    started = time.monotonic()
    try:
        pgid = 0
        for name in components:
            args = [sys.executable, "-m", "airflow", name]
            if name in ("scheduler", "triggerer"):
                args.append("--skip-serve-logs")  # its log server would bind every interface
            if name == "api-server":
                args += ["--host", "127.0.0.1", "--port", str(port)]
            with open(logs / f"{name}.log", "wb") as out:
                process = subprocess.Popen(
                    args, env=child_env, cwd=home.path, stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, process_group=pgid,
                )  # fmt: skip
            servers.processes[name] = process
            pgid = pgid or process.pid
            if name == "api-server":  # the UI answers first; the others start behind it
                wait_for_http(
                    f"{url}/api/v2/version", timeout_s=timeout_s, alive=servers.check_alive
                )
                servers.started_s = time.monotonic() - started
        yield servers
    finally:
        _kill_group(servers)


def _kill_group(servers: AirflowServers) -> None:
    """SIGKILL the components' process group (SIGTERM leaves orphans) and reap them."""
    first = next(iter(servers.processes.values()), None)
    if first is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(first.pid, signal.SIGKILL)
    for process in servers.processes.values():
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


@contextlib.contextmanager
def chromium(
    work_dir: Path | None = None, *, width: int = 1400, height: int = 1000
) -> Iterator[Any]:
    """A headless Debian Chromium driven by Selenium (``chromium``, ``chromium-driver``).

    Chromium's profile, HOME and temporary files go to a new directory under ``work_dir``
    (default, or when ``work_dir`` is too deep: the system's temporary directory), removed on
    exit: the profile holds a UNIX socket, whose path may not exceed 107 bytes (under a pytest
    ``tmp_path`` it does: "Chrome instance exited"). The Selenium Manager is never asked (it
    would go to the network): the driver's path is given.
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if work_dir is not None and len(str(work_dir.resolve())) > _MAX_PROFILE_PARENT:
        work_dir = None  # too deep for the profile's socket
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="chromium-", dir=work_dir) as tmp,
        _chromium_driver(webdriver, Service, Path(tmp), width, height) as driver,
    ):
        yield driver


@contextlib.contextmanager
def _chromium_driver(
    webdriver: Any, service_class: Any, work_dir: Path, width: int, height: int
) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", f"--user-data-dir={work_dir / 'profile'}"):
        options.add_argument(arg)  # fmt: skip
    env = {"HOME": str(work_dir), "XDG_CONFIG_HOME": str(work_dir / "config"),
           "XDG_CACHE_HOME": str(work_dir / "cache"), "TMPDIR": str(work_dir)}  # fmt: skip
    service = service_class("/usr/bin/chromedriver", env={**os.environ, **env})
    driver = webdriver.Chrome(service=service, options=options)
    try:
        yield driver
    finally:
        driver.quit()


def log_in(driver: Any, url: str, login: UiLogin, *, timeout_s: float = 30.0) -> None:
    """Sign in to the UI at ``url`` with the simple auth manager's login form."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, timeout_s)
    for attempt in range(3):  # the UI redirects to its login page: a command may race it
        try:
            driver.get(url)
            wait.until(_loaded)
            user = wait.until(ec.presence_of_element_located((By.NAME, "username")))
            user.send_keys(login.username)
            driver.find_element(By.NAME, "password").send_keys(login.password)
            driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
            wait.until(lambda d: "login" not in d.current_url)
            return
        except WebDriverException as exc:  # "aborted by navigation", a stale element
            if attempt == 2 or ("navigation" not in str(exc) and "stale" not in str(exc)):
                raise


def _loaded(driver: Any) -> bool:
    return bool(driver.execute_script("return document.readyState") == "complete")

