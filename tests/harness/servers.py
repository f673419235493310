"""Private, throw-away ZooKeeper and PostgreSQL servers for restart faults.

The shared services of ``scripts/services.sh`` are used by everyone on the machine and must never
be restarted. A fault schedule that restarts (or ``kill -9``-s) a coordinator or a state database
starts one of these instead: a server on a free loopback port whose data lives under a work
directory, in its own process group, stopped or killed by the id of the process this helper
started and nothing else.

* :class:`PrivateZooKeeper` runs the Debian ``zookeeper`` jars (as ``scripts/services.sh`` does)
  and is ready when it answers ``ruok``.
* :class:`PrivatePostgres` runs PostgreSQL 15 (``/usr/lib/postgresql/15/bin``; as the
  ``postgres`` OS user when run by root, like ``scripts/services.sh``), with a role and database
  ``trident`` whose password is random, kept in a 0600 file of the work directory and never shown
  by ``repr``.

``kill()`` is ``SIGKILL`` with the data kept; ``restart()`` is ``kill()`` + ``start()`` on the same
port and data directory, so what was committed before survives. A server still running when the
interpreter exits is killed (``atexit``), so a failed test does not leak a JVM.

Example (starts a JVM, ~2 s)::

    with PrivateZooKeeper(tmp_path) as zk:
        client = KazooClient(hosts=zk.hosts); client.start()
        client.create("/x", b"1")
        zk.restart()                       # SIGKILL, then the same port and data
        assert client.get("/x")[0] == b"1" # kazoo reconnects; the node survived
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from tests.harness.ports import free_port, free_ports

__all__ = [
    "PrivatePostgres",
    "PrivateZooKeeper",
    "PrivateZooKeeperEnsemble",
    "ZooKeeperEnsembleNode",
    "free_port",
]

_ZK_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")
_ZK_CONF_DIR = "/etc/zookeeper/conf"
_PG_BIN = Path("/usr/lib/postgresql/15/bin")
_LOG_TAIL_LINES = 30
_START_ATTEMPTS = 3

_running: set[_PrivateServer] = set()



def _log_tail(path: Path) -> str:
    if not path.exists():
        return f"(no log at {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:])


def _group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process is in process group ``pgid`` (Linux ``/proc``)."""
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _wait_group_gone(pgid: int, timeout_s: float = 15.0) -> None:
    """Wait until every process of the group is dead: a PostgreSQL backend still dying keeps
    the shared memory attached, and a new postmaster would refuse to start on it."""
    deadline = time.monotonic() + timeout_s
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


class _PrivateServer:
    """One server process in its own process group: start, readiness wait, stop, kill."""

    #: Signal of a graceful stop.
    stop_signal: signal.Signals = signal.SIGTERM
    #: What the server is, for messages.
    kind: str = "server"

    def __init__(self, workdir: str | Path, port: int | None, subdir: str) -> None:
        self.workdir = Path(workdir).resolve() / subdir
        self.port = port or free_port()
        self.log_path = self.workdir / "server.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._owner = os.getpid()
        self.starts = 0

    # -- what subclasses provide
    def _prepare(self) -> None:
        raise NotImplementedError

    def _command(self) -> tuple[list[str], dict[str, Any]]:
        raise NotImplementedError

    def _ready(self) -> bool:
        raise NotImplementedError

    def _after_first_ready(self) -> None:
        """Runs once the server answers for the first time in this object's life."""

    # -- lifecycle
    @property
    def pid(self) -> int | None:
        """The id of the running server process (``None`` when stopped)."""
        return self._process.pid if self.running else None  # type: ignore[union-attr]

    @property
    def running(self) -> bool:
        """Whether the process this helper started is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self, timeout_s: float = 60.0) -> None:
        """Start the server (no-op if running) and wait until it answers.

        Raises
        ------
        RuntimeError
            If it exits or does not answer within ``timeout_s`` (with its log's tail).
        """
        if self.running:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._prepare()
        deadline = time.monotonic() + timeout_s
        for attempt in range(1, _START_ATTEMPTS + 1):
            process = self._spawn()
            while not self._ready():
                if process.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            else:
                break
            code = process.poll()
            self.kill()
            if code is None or attempt == _START_ATTEMPTS or time.monotonic() > deadline:
                msg = (
                    f"private {self.kind} on 127.0.0.1:{self.port} did not answer within "
                    f"{timeout_s:g}s (attempt {attempt}, exit code {code}); log "
                    f"{self.log_path}:\n{_log_tail(self.log_path)}"
                )
                raise RuntimeError(msg)
            time.sleep(0.5)  # it exited early (a port or lock still held): try again
        if self.starts == 0:
            self._after_first_ready()
        self.starts += 1

    def _spawn(self) -> subprocess.Popen[bytes]:
        args, options = self._command()
        with self.log_path.open("ab") as log:
            process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **options,
            )
        self._process = process
        self._owner = os.getpid()
        _running.add(self)
        return process

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop gracefully (:attr:`stop_signal`), then ``SIGKILL`` after ``timeout_s``; waits."""
        if self._process is None:
            return
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._process.pid, self.stop_signal)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=timeout_s)
        self.kill()

    def kill(self) -> None:
        """``SIGKILL`` the server's process group (the group of the process we started); waits.

        The data directory is kept, as after a machine's power cut of that one process.
        """
        process, self._process = self._process, None
        if process is None:
            return
        # The group id is the id of the process we started (start_new_session): its children
        # (PostgreSQL backends) die with it; nothing outside that group is touched.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        _wait_group_gone(process.pid)
        _running.discard(self)

    def restart(self, timeout_s: float = 60.0) -> None:
        """``kill()`` then ``start()``: same port, same data."""
        self.kill()
        self.start(timeout_s)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"{type(self).__name__}(127.0.0.1:{self.port}, {state}, {self.workdir})"


class PrivateZooKeeper(_PrivateServer):
    """A standalone ZooKeeper on a free loopback port, data under ``<workdir>/zookeeper``.

    Parameters
    ----------
    workdir:
        Directory for its configuration, data and log (``<workdir>/zookeeper``).
    port:
        Client port (default: a free one).

    Attributes
    ----------
    hosts:
        Connection string for kazoo, ``"127.0.0.1:<port>"``.
    """

    kind = "ZooKeeper"

    def __init__(self, workdir: str | Path, port: int | None = None) -> None:
        super().__init__(workdir, port, "zookeeper")
        self.hosts = f"127.0.0.1:{self.port}"

    def _prepare(self) -> None:
        missing = [jar for jar in _ZK_JARS[:1] if not Path(jar).exists()]
        java = shutil.which("java")
        if missing or java is None:
            msg = (
                f"private ZooKeeper needs java and {', '.join(_ZK_JARS[:1])}: "
                "run `bash scripts/services.sh start` once (it installs the zookeeper package)"
            )
            raise RuntimeError(msg)
        (self.workdir / "data").mkdir(parents=True, exist_ok=True)
        (self.workdir / "zoo.cfg").write_text(
            "tickTime=2000\n"
            f"dataDir={self.workdir / 'data'}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,stat,srvr\n"
            # Small transaction-log preallocation (KB): restarts in many work dirs stay cheap.
            "preAllocSize=4096\n"
        )

    def _command(self) -> tuple[list[str], dict[str, Any]]:
        classpath = [_ZK_CONF_DIR, *(jar for jar in _ZK_JARS if Path(jar).exists())]
        java = shutil.which("java") or "java"
        args = [
            java,
            "-Xmx256m",
            "-cp",
            os.pathsep.join(classpath),
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(self.workdir / "zoo.cfg"),
        ]
        return args, {"cwd": str(self.workdir)}

    def _ready(self) -> bool:
        # No trailing newline: unread input makes the server reset the socket and lose "imok".
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2.0) as sock:
                sock.sendall(b"ruok")
                sock.shutdown(socket.SHUT_WR)
                answer = b""
                while chunk := sock.recv(64):
                    answer += chunk
        except OSError:
            return False
        return answer == b"imok"

    def four_letter(self, command: str) -> str:
        """The server's answer to a four-letter word (``srvr``, ``cons``, ...); ``""`` if none."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2.0) as sock:
                sock.sendall(command.encode())
                sock.shutdown(socket.SHUT_WR)
                answer = b""
                while chunk := sock.recv(4096):
                    answer += chunk
        except OSError:
            return ""
        return answer.decode(errors="replace")


class ZooKeeperEnsembleNode(PrivateZooKeeper):
    """One server of a :class:`PrivateZooKeeperEnsemble` (``QuorumPeerMain``, its own ``myid``).

    Ready (for :meth:`start`) when it answers ``ruok``; it serves clients only once the ensemble
    has a quorum (:attr:`mode` is ``"leader"`` or ``"follower"``).
    """

    def __init__(self, workdir: str | Path, myid: int, servers: list[str]) -> None:
        super().__init__(Path(workdir) / f"node{myid}")
        self.myid = myid
        self.servers = servers

    def _prepare(self) -> None:
        super()._prepare()
        (self.workdir / "data" / "myid").write_text(f"{self.myid}\n")
        with (self.workdir / "zoo.cfg").open("a") as cfg:
            cfg.write("initLimit=10\nsyncLimit=5\n")
            cfg.write("4lw.commands.whitelist=ruok,stat,srvr,cons\n")
            cfg.writelines(f"server.{i}={peer}\n" for i, peer in enumerate(self.servers, 1))

    def _command(self) -> tuple[list[str], dict[str, Any]]:
        args, options = super()._command()
        args[args.index("org.apache.zookeeper.server.ZooKeeperServerMain")] = (
            "org.apache.zookeeper.server.quorum.QuorumPeerMain"
        )
        return args, options

    @property
    def mode(self) -> str | None:
        """``"leader"``, ``"follower"``, or ``None`` (stopped, or not in a quorum)."""
        for line in self.four_letter("srvr").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def client_connections(self) -> int:
        """How many client sessions other than this probe the server holds (``cons``)."""
        lines = [line for line in self.four_letter("cons").splitlines() if line.strip()]
        return max(0, len(lines) - 1)


class PrivateZooKeeperEnsemble:
    """Three (``size``) ZooKeeper servers on free loopback ports forming one ensemble.

    Each node lives under ``<workdir>/zookeeper_ensemble/node<i>`` with its own client port and
    quorum port pair; :attr:`hosts` lists every client port, as a production connection string
    does. Nodes are :class:`ZooKeeperEnsembleNode`-s: ``kill()``/``restart()`` one of them by its
    process (the id this helper started), never anything else.

    Example (starts three JVMs, ~3-5 s)::

        with PrivateZooKeeperEnsemble(tmp_path) as zk:
            client = KazooClient(hosts=zk.hosts); client.start()
            zk.connected_node().kill()      # the client reconnects to another server
            client.create("/x", b"1")
    """

    def __init__(self, workdir: str | Path, size: int = 3) -> None:
        base = Path(workdir).resolve() / "zookeeper_ensemble"
        ports = free_ports(2 * size)  # distinct: a repeated one breaks a later election
        peers = [f"127.0.0.1:{ports[2 * i]}:{ports[2 * i + 1]}" for i in range(size)]
        self.nodes = [ZooKeeperEnsembleNode(base, i, peers) for i in range(1, size + 1)]
        self.hosts = ",".join(node.hosts for node in self.nodes)

    def start(self, timeout_s: float = 60.0) -> None:
        """Start every node, then wait until each is a leader or a follower.

        Raises
        ------
        RuntimeError
            If the ensemble has no quorum within ``timeout_s``.
        """
        for node in self.nodes:
            node.start(timeout_s)
        self.wait_for_quorum(timeout_s)

    def wait_for_quorum(self, timeout_s: float = 60.0) -> None:
        """Wait until every running node serves (leader or follower)."""
        deadline = time.monotonic() + timeout_s
        while any(n.running and n.mode not in ("leader", "follower") for n in self.nodes):
            if time.monotonic() > deadline:
                modes = {n.myid: n.mode for n in self.nodes}
                msg = f"ZooKeeper ensemble {self.hosts} has no quorum after {timeout_s:g}s: {modes}"
                raise RuntimeError(msg)
            time.sleep(0.1)

    def connected_node(self) -> ZooKeeperEnsembleNode:
        """The running node holding the most client sessions (the one a single client uses)."""
        running = [node for node in self.nodes if node.running]
        return max(running, key=lambda node: node.client_connections())

    def stop(self) -> None:
        """Stop every node (gracefully, then ``SIGKILL``)."""
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class PrivatePostgres(_PrivateServer):
    """A PostgreSQL 15 cluster on a free loopback port, data under ``<workdir>/postgres``.

    The first start runs ``initdb`` (as the ``postgres`` OS user when run by root) and creates
    the role and database ``trident``; later starts reuse the data directory. Run by root, every
    parent of ``workdir`` is made traversable (``o+x``) for that user at each start (a pytest
    session resets its base temp directory to 0700 when it begins). TCP on 127.0.0.1
    only (no Unix socket), password authentication, ``fsync=off`` (a killed *process* loses
    nothing; only an OS crash would).

    Parameters
    ----------
    workdir:
        Directory for its data and log (``<workdir>/postgres``).
    port:
        Port (default: a free one).

    Attributes
    ----------
    url:
        SQLAlchemy URL ``postgresql+psycopg://trident:<password>@127.0.0.1:<port>/trident``
        (``repr`` of this object never shows it).
    """

    kind = "PostgreSQL"
    #: SIGINT is PostgreSQL's "fast" shutdown; SIGTERM ("smart") waits for every client to leave.
    stop_signal = signal.SIGINT

    def __init__(self, workdir: str | Path, port: int | None = None) -> None:
        super().__init__(workdir, port, "postgres")
        self.data_dir = self.workdir / "data"
        self._password_file = self.workdir / "password"
        self._run_as = self._os_user()

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the ``trident`` database (contains the password)."""
        return f"postgresql+psycopg://trident:{self._password()}@127.0.0.1:{self.port}/trident"

    @staticmethod
    def _os_user() -> pwd.struct_passwd | None:
        if os.geteuid() != 0:
            return None
        try:
            return pwd.getpwnam("postgres")
        except KeyError:
            msg = "private PostgreSQL run by root needs the 'postgres' OS user (postgresql-15)"
            raise RuntimeError(msg) from None

    def _as_server_user(self) -> dict[str, Any]:
        if self._run_as is None:
            return {}
        return {
            "user": self._run_as.pw_uid,
            "group": self._run_as.pw_gid,
            "extra_groups": [],
            "cwd": "/",
        }

    def _password(self) -> str:
        if not self._password_file.exists():
            self.workdir.mkdir(parents=True, exist_ok=True)
            self._password_file.write_text(secrets.token_hex(16))
            self._password_file.chmod(0o600)
            self._chown(self._password_file)
        return self._password_file.read_text().strip()

    def _chown(self, path: Path) -> None:
        if self._run_as is not None:
            os.chown(path, self._run_as.pw_uid, self._run_as.pw_gid)

    def _make_traversable(self) -> None:
        """Let the server's OS user reach its data directory (every parent needs o+x)."""
        if self._run_as is None:
            return
        for parent in reversed(self.workdir.parents):
            mode = parent.stat().st_mode
            if not mode & stat.S_IXOTH:
                parent.chmod(mode | stat.S_IXOTH)

    def _prepare(self) -> None:
        if not (_PG_BIN / "initdb").exists():
            msg = f"private PostgreSQL needs {_PG_BIN}: run `bash scripts/services.sh start` once"
            raise RuntimeError(msg)
        if (self.data_dir / "PG_VERSION").exists():
            return
        self._make_traversable()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._chown(self.workdir)
        self._chown(self.data_dir)
        self.data_dir.chmod(0o700)
        self._password()
        done = subprocess.run(
            [
                str(_PG_BIN / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-locale",
                "--auth=scram-sha-256",
                f"--pwfile={self._password_file}",
            ],
            capture_output=True,
            text=True,
            check=False,
            **self._as_server_user(),
        )
        if done.returncode != 0:
            msg = f"initdb {self.data_dir} exited {done.returncode}:\n{done.stderr[-2000:]}"
            raise RuntimeError(msg)

    def _command(self) -> tuple[list[str], dict[str, Any]]:
        settings = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": "",
            "fsync": "off",
            "shared_buffers": "32MB",
            "max_connections": "60",
        }
        # Again at every start: a pytest session resets its base temp dir to 0700 when it
        # starts, and another one may have started since the last time.
        self._make_traversable()
        args = [str(_PG_BIN / "postgres"), "-D", str(self.data_dir), "-p", str(self.port)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        options = self._as_server_user()
        self._chown_log()
        return args, options

    def _chown_log(self) -> None:
        self.log_path.touch(exist_ok=True)
        self._chown(self.log_path)

    def _ready(self) -> bool:
        done = subprocess.run(
            [str(_PG_BIN / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)],
            check=False,
            timeout=10,
        )
        return done.returncode == 0

    def _after_first_ready(self) -> None:
        import psycopg
        from psycopg import sql

        password = self._password()
        with psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user="postgres",
            password=password,
            dbname="postgres",
            autocommit=True,
        ) as connection:
            exists = connection.execute("SELECT 1 FROM pg_roles WHERE rolname = 'trident'")
            if exists.fetchone() is None:
                connection.execute("CREATE ROLE trident")
            connection.execute(
                sql.SQL("ALTER ROLE trident WITH LOGIN CREATEDB PASSWORD {}").format(
                    sql.Literal(password)
                )
            )
            found = connection.execute("SELECT 1 FROM pg_database WHERE datname = 'trident'")
            if found.fetchone() is None:
                connection.execute("CREATE DATABASE trident OWNER trident")


@atexit.register
def _kill_leftovers() -> None:
    # Only in the process that started them: a forked child exiting must not kill them.
    for server in list(_running):
        if server._owner == os.getpid():
            server.kill()
