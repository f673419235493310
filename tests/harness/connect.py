"""A local Spark Connect server for tests, benchmarks and demos (``process_mode="connect"``).

The server ships in the pyspark wheel: its class (``SparkConnectServer``, in
``jars/spark-connect_2.13-<version>.jar``) is started with the venv's ``spark-submit``, as
``sbin/start-connect-server.sh --wait`` does (the pyspark 4.2 wheel had no ``sbin/`` script;
4.3's has). It runs in the foreground of its own process group, bound to loopback, with this
interpreter as its Python workers' (they import ``airflow_trident`` and the topologies: the
project root is on their ``PYTHONPATH``, for :mod:`tests.harness`'s), logs under the work
directory, loads the project's connector jars (``spark.jars``: the ``spark`` group of
``jvm/pom.xml``, Kafka and PostgreSQL JDBC; :mod:`tests.harness.jars`), and is warmed up (its
first query costs seconds) before it is handed out. Stopping kills the process group this
helper started, nothing else.

Example (starts a JVM: ~10 s)::

    with running_connect_server(Path("/tmp/sc")) as url:   # "sc://127.0.0.1:<port>"
        spark = SparkSession.builder.remote(url).getOrCreate()
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.harness import with_project_path
from tests.harness.jars import spark_jars_conf
from tests.harness.jvm import quick_jit_conf
from tests.harness.ports import free_port as _free_port

__all__ = [
    "running_connect_server",
    "shared_connect_server",
    "start_connect_server",
    "stop_connect_server",
    "stop_shared_connect_server",
]

_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"

_WARM_UP = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
spark.range(1000).selectExpr("sum(id)").collect()
spark.stop()
"""



def _listening(port: int) -> bool:
    with contextlib.closing(socket.socket()) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def start_connect_server(
    work_dir: Path,
    *,
    master: str = "local[2]",
    port: int | None = None,
    conf: dict[str, str] | None = None,
    jars: bool = True,
    quick_jit: bool = True,
    timeout_s: float = 120.0,
) -> tuple[str, subprocess.Popen[bytes]]:
    """Start a Spark Connect server in a process group of its own, warmed up; its ``sc://``
    URL and process (stop it with :func:`stop_connect_server`).

    ``jars``: the project's connector jars on its ``spark.jars``, before ``conf``'s own.
    ``quick_jit``: the JVM's JIT C1 only (:mod:`tests.harness.jvm`; the benchmarks pass False).

    Raises
    ------
    RuntimeError
        If the server exits or does not answer within ``timeout_s`` (with its log's tail).
    """
    import pyspark

    port = port or _free_port()
    work_dir.mkdir(parents=True, exist_ok=True)
    settings = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.driver.bindAddress": "127.0.0.1",
        **(conf or {}),
        **(spark_jars_conf((conf or {}).get("spark.jars")) if jars else {}),
    }
    if quick_jit:  # a test's server: C1 only (tests/harness/jvm.py); the benchmarks keep C2
        settings = quick_jit_conf(settings)
    submit = Path(sys.executable).parent / "spark-submit"
    args = [str(submit), "--class", _SERVER_CLASS, "--name", "Spark Connect server"]
    args += ["--master", master]
    for key, value in settings.items():
        args += ["--conf", f"{key}={value}"]
    env = {
        **os.environ,
        "SPARK_LOG_DIR": str(work_dir),
        "SPARK_PID_DIR": str(work_dir),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "SPARK_CONNECT_MODE": "0",  # the server is classic Spark (start-connect-server.sh's)
        "PYSPARK_PYTHON": sys.executable,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env = with_project_path(env)  # the workers import tests.harness's topologies
    log_path = work_dir / "connect-server.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    url = f"sc://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while not _listening(port):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
                msg = f"the Spark Connect server did not start on port {port}:\n{tail}"
                raise RuntimeError(msg)
            time.sleep(0.5)
        subprocess.run(
            [sys.executable, "-c", _WARM_UP, url],
            check=True,
            env=env,
            capture_output=True,
            timeout=timeout_s,
        )
    except BaseException:
        stop_connect_server(process.pid)
        raise
    return url, process


def stop_connect_server(pid: int) -> None:
    """Stop the server started as process ``pid`` (its whole process group), waiting for it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        while _alive(pid):
            time.sleep(0.2)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (reaped when it is this process's child)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return done == 0


@contextlib.contextmanager
def running_connect_server(
    work_dir: Path,
    *,
    master: str = "local[2]",
    port: int | None = None,
    conf: dict[str, str] | None = None,
    jars: bool = True,
    quick_jit: bool = True,
    timeout_s: float = 120.0,
) -> Iterator[str]:
    """Start a Spark Connect server; yield its ``sc://`` URL; stop it.

    ``jars``: the project's connector jars on its ``spark.jars``, before ``conf``'s own.
    ``quick_jit``: the JVM's JIT C1 only (:mod:`tests.harness.jvm`; the benchmarks pass False).

    Raises
    ------
    RuntimeError
        If the server exits or does not answer within ``timeout_s`` (with its log's tail).
    """
    url, process = start_connect_server(
        work_dir, master=master, port=port, conf=conf, jars=jars, quick_jit=quick_jit,
        timeout_s=timeout_s,
    )  # fmt: skip
    try:
        yield url
    finally:
        stop_connect_server(process.pid)


_SHARED = "connect-server.json"
_STARTED: list[subprocess.Popen[bytes]] = []  # the shared servers this process started


def shared_connect_server(root: Path) -> str:
    """The URL of the one Spark Connect server of every pytest-xdist worker of a run: the first
    worker to ask starts it under ``root`` (a directory all workers share) and records it, the
    others reuse it; :func:`stop_shared_connect_server` (the run's controller, at its end)
    stops it. Under an exclusive lock on ``root``, so it is started once."""
    import fcntl
    import json

    root.mkdir(parents=True, exist_ok=True)
    with (root / "connect-server.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = root / _SHARED
        if record.exists():
            found = json.loads(record.read_text())
            if _listening(int(found["url"].rpartition(":")[2])):
                return str(found["url"])
        url, process = start_connect_server(root / "server")
        _STARTED.append(process)
        record.write_text(json.dumps({"url": url, "pid": process.pid}))
        return url


def stop_shared_connect_server(root: Path) -> None:
    """Stop the server :func:`shared_connect_server` started under ``root``, if any."""
    import json

    record = root / _SHARED
    if record.exists():
        stop_connect_server(int(json.loads(record.read_text())["pid"]))
        record.unlink()
