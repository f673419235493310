"""The UI command: serve the Airflow home the main job left behind, on 127.0.0.1 only.

    bash scripts/ui.sh            # after bash scripts/main.sh; Ctrl-C stops it

starts Airflow's API server (the UI, http://127.0.0.1:8080), scheduler, DAG processor and
triggerer on ``.work/main/airflow``, and the main job's Spark Connect server (its DAG processes
on it), and prints the URL and the login once. Each run of the main
job shows its txid in its note and has its task logs; a run triggered from the UI uses the same
connections (stored in the home's metadata database) and state. Nothing listens beyond loopback:
the scheduler's and triggerer's log servers are not started (the API server reads the task logs
from the home's files). ``--check`` stops once the UI answers.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.harness.airflow import prepare_airflow_home
from tests.harness.connect import running_connect_server
from tests.harness.run_dag import CONNECT_PORT, DAGS_FOLDER, trident_env
from tests.harness.ui import UI_PORT, read_login, serving_airflow, write_ui_config

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the UI until interrupted (or, with ``--check``, until it answers); return 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", default=".work/main", help="the main job's --work-dir")
    parser.add_argument("--port", type=int, default=UI_PORT)
    parser.add_argument("--check", action="store_true", help="stop once the UI answers")
    parser.add_argument("--connect-port", type=int, default=CONNECT_PORT,
                        help="the main job's Spark Connect port (UI runs use it)")  # fmt: skip
    args = parser.parse_args(argv)
    work = Path(args.work_dir).resolve()
    if not (work / "airflow" / "airflow.db").exists():
        print(f"no Airflow home in {work}: run `bash scripts/main.sh` first", file=sys.stderr)
        return 2
    home = prepare_airflow_home(work / "airflow", dags_folder=DAGS_FOLDER, migrate=False)
    if not (home.path / "simple_auth_manager_passwords.json").exists():
        write_ui_config(home, port=args.port)  # a home from before the UI command existed
    login = read_login(home)
    os.environ.update(trident_env(work))  # the Connect server's workers import the topology
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop the servers as Ctrl-C does
    started = time.monotonic()
    try:
        with (
            running_connect_server(work / "connect", port=args.connect_port),
            serving_airflow(home, port=args.port, env=trident_env(work)) as servers,
        ):
            print(
                f"Airflow UI: {servers.url} (answered after {time.monotonic() - started:.1f} s)\n"
                f"login: {login.username} / {login.password}\n"
                f"servers' logs: {servers.log_dir}; Ctrl-C stops them",
                flush=True,
            )
            while not args.check:
                servers.check_alive()
                time.sleep(1)
    except KeyboardInterrupt:
        pass
    except RuntimeError as error:
        print(f"UI not started: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
