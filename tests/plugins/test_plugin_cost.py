"""Loading airflow-trident's plugins costs a task process nothing of the API server's.

Every Airflow process loads the plugins of every distribution (a task process does, to integrate
macros, before its task runs). The plugins' FastAPI apps are built on the API server's first
request (``plugins/lazy.py``); the cost is measured by ``bench/plugin_cost.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import json, sys
import airflow.sdk.plugins_manager as pm
pm.integrate_macros_plugins()
plugins = sorted(p.name for p in pm._get_plugins()[0])
heavy = sorted(m for m in sys.modules
               if m.split(".")[0] in ("fastapi", "starlette") or m.startswith("airflow.api_fastapi")
               or m in ("airflow_trident.plugins.drpc_app", "airflow_trident.plugins.status_app"))
print(json.dumps({"plugins": plugins, "heavy": heavy}))
"""


def test_a_task_process_loads_the_plugins_without_the_api_servers_code(tmp_path: Path) -> None:
    # Given a fresh process as a task runs it (plugins loaded for macros)
    env = dict(os.environ, AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    done = subprocess.run([sys.executable, "-W", "always", "-c", _CHILD], env=env,
                          capture_output=True, text=True, timeout=240, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    # Then our three plugins are loaded
    assert {"trident_drpc", "trident_notes", "trident_status"} <= set(report["plugins"])
    # and neither FastAPI, Starlette nor Airflow's API server was imported for them
    assert report["heavy"] == [], report["heavy"][:20]
    # and no Starlette deprecation warning reaches the task's log
    assert "StarletteDeprecationWarning" not in done.stdout + done.stderr


def test_the_lazy_app_is_built_on_first_use() -> None:
    from airflow_trident.plugins.drpc import TridentDRPCPlugin
    from airflow_trident.plugins.lazy import LazyApp

    # Given the DRPC plugin's app as the API server mounts it
    lazy = TridentDRPCPlugin.fastapi_apps[0]["app"]
    assert isinstance(lazy, LazyApp)
    # When it is built, Then it is the FastAPI app with the DRPC routes, built once
    app = lazy.build()
    assert lazy.build() is app
    paths = {route.path for route in app.routes}
    assert "/dags/{dag_id}/functions/{function}" in paths
