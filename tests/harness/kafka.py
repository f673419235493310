"""Kafka brokers for tests: the shared single broker of ``scripts/services.sh`` and a private
3-broker KRaft cluster on loopback for the cluster tier (docs/jvm.md, docs/testing.md).

* :func:`ensure_broker` returns the bootstrap servers of the single broker
  (``TRIDENT_KAFKA_BOOTSTRAP``, which ``scripts/services.sh env`` exports), starting it with
  ``bash scripts/services.sh start kafka`` when nothing answers there. It is shared by every
  test and process on the machine: tests use topics of their own (:func:`unique_topic`) and
  never stop or restart it.
* :class:`PrivateKafkaCluster` runs three combined broker+controller nodes (a static KRaft
  quorum of the three) from the same jars (``scripts/jars.sh kafka``), each a process group of
  its own under a work directory: ``kill()``/``restart()`` one node by the id of the process
  this helper started, as :mod:`tests.harness.servers` does for ZooKeeper and PostgreSQL.
  Internal topics have replication factor 3 and min ISR 2, so a transactional producer and
  consumer groups survive one node down; a test chooses its own topics' replication.

Example (starts three JVMs, ~15 s)::

    with PrivateKafkaCluster(tmp_path) as cluster:
        create_topic(cluster.bootstrap, "t", partitions=6, replication=1)
        cluster.node(cluster.leader_of("t", 3)).kill()   # partition 3 is unreadable now
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from tests.harness import PROJECT_ROOT
from tests.harness.jars import group_dir, require_jars
from tests.harness.ports import free_ports
from tests.harness.servers import _PrivateServer

__all__ = [
    "BOOTSTRAP_ENV",
    "KafkaClusterNode",
    "PrivateBroker",
    "PrivateKafkaCluster",
    "create_topic",
    "ensure_broker",
    "unique_topic",
]

BOOTSTRAP_ENV = "TRIDENT_KAFKA_BOOTSTRAP"
_SERVICES = PROJECT_ROOT / "scripts" / "services.sh"
_STARTED = "Kafka Server started"
_JAVA_OPTS = ("-Xmx256m", "-Xms64m", "-XX:TieredStopAtLevel=1")
"""A small heap, C1 only: the start takes half as long (docs/jvm.md); as scripts/services.sh."""


def _open(host_port: str) -> bool:
    host, _, port = host_port.rpartition(":")
    with (
        contextlib.suppress(OSError, ValueError),
        socket.create_connection((host, int(port)), timeout=1.0),
    ):
        return True
    return False


def _answers(bootstrap: str, timeout_s: float) -> bool:
    """Whether a broker at ``bootstrap`` answers a metadata request (not just a TCP port)."""
    from confluent_kafka.admin import AdminClient

    if not all(_open(server) for server in bootstrap.split(",")[:1]):
        return False
    try:
        AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=timeout_s)
    except Exception:  # KafkaException: not (yet) serving
        return False
    return True


def ensure_broker(timeout_s: float = 180.0) -> str:
    """The single broker's bootstrap servers (``127.0.0.1:39092`` by default); started by
    ``scripts/services.sh start kafka`` if it does not answer. Sets ``TRIDENT_KAFKA_BOOTSTRAP``
    in this process's environment (children inherit it).

    Raises
    ------
    RuntimeError
        If the script fails or the broker does not answer (with the script's output).
    """
    bootstrap = os.environ.get(BOOTSTRAP_ENV)
    if bootstrap and _answers(bootstrap, 10.0):
        return bootstrap
    done = subprocess.run(
        ["bash", str(_SERVICES), "start", "kafka"],
        capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip
    settings = subprocess.run(
        ["bash", str(_SERVICES), "env"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    found = re.search(rf"{BOOTSTRAP_ENV}=(\S+)", settings)
    bootstrap = found.group(1) if found else ""
    if done.returncode != 0 or not bootstrap or not _answers(bootstrap, 30.0):
        msg = (
            f"the Kafka broker did not start (`bash scripts/services.sh start kafka` exited "
            f"{done.returncode}):\n{done.stderr[-3000:]}"
        )
        raise RuntimeError(msg)
    os.environ[BOOTSTRAP_ENV] = bootstrap
    return bootstrap


def unique_topic(prefix: str = "t") -> str:
    """A topic name no other test uses."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def create_topic(
    bootstrap: str,
    name: str,
    *,
    partitions: int = 1,
    replication: int = 1,
    config: dict[str, str] | None = None,
    timeout_s: float = 30.0,
) -> None:
    """Create topic ``name`` and wait until every partition has a leader.

    Raises
    ------
    confluent_kafka.KafkaException
        If the broker refuses it (it exists, too few brokers...).
    """
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, num_partitions=partitions, replication_factor=replication,
                     config=config or {})  # fmt: skip
    admin.create_topics([topic], operation_timeout=timeout_s)[name].result(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        meta = admin.list_topics(name, timeout=timeout_s).topics.get(name)
        ready = meta is not None and meta.error is None and len(meta.partitions) == partitions
        if ready and all(p.leader >= 0 for p in meta.partitions.values()):  # type: ignore[union-attr]
            return
        if time.monotonic() > deadline:
            msg = f"topic {name} has no leader for every partition after {timeout_s:g}s"
            raise TimeoutError(msg)
        time.sleep(0.1)


class KafkaClusterNode(_PrivateServer):
    """One combined broker+controller of a :class:`PrivateKafkaCluster`.

    Ready (for ``start``) when it has logged ``Kafka Server started`` once more than before this
    start and its port answers; it serves only while a majority of the quorum runs.
    """

    kind = "Kafka broker"

    def __init__(
        self, workdir: Path, node_id: int, port: int, controller_port: int, voters: str,
        cluster_id: str,
    ) -> None:  # fmt: skip
        super().__init__(workdir, port, f"node{node_id}")
        self.node_id = node_id
        self.controller_port = controller_port
        self.voters = voters
        self.cluster_id = cluster_id
        self.bootstrap = f"127.0.0.1:{port}"
        self.kafka_log = self.workdir / "kafka.log"
        self._starts_logged = 0

    def _classpath(self) -> str:
        require_jars("kafka")
        return str(group_dir("kafka") / "*")

    def _java(self) -> list[str]:
        java = shutil.which("java") or "java"
        log4j = f"-Dlog4j2.configurationFile=file:{self.workdir / 'log4j2.properties'}"
        return [java, *_JAVA_OPTS, "-Djava.awt.headless=true", log4j, "-cp", self._classpath()]

    def _prepare(self) -> None:
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        p = self.port
        rf = min(3, len(self.voters.split(",")))  # a 1-node cluster: internal topics of 1
        isr = min(2, rf)
        listeners = {"PLAINTEXT": ("PLAINTEXT", p), **self._listeners()}
        bound = ",".join(f"{name}://127.0.0.1:{port}" for name, (_, port) in listeners.items())
        protocols = ",".join(f"{name}:{kind}" for name, (kind, _) in listeners.items())
        (self.workdir / "server.properties").write_text(
            "process.roles=broker,controller\n"
            f"node.id={self.node_id}\n"
            f"controller.quorum.voters={self.voters}\n"
            f"listeners={bound},CONTROLLER://127.0.0.1:{self.controller_port}\n"
            f"advertised.listeners={bound}\n"
            "controller.listener.names=CONTROLLER\n"
            "inter.broker.listener.name=PLAINTEXT\n"
            f"listener.security.protocol.map=CONTROLLER:PLAINTEXT,{protocols}\n"
            f"log.dirs={data}\n"
            "auto.create.topics.enable=false\n"
            f"offsets.topic.replication.factor={rf}\n"
            "offsets.topic.num.partitions=4\n"
            f"transaction.state.log.replication.factor={rf}\n"
            f"transaction.state.log.min.isr={isr}\n"
            "transaction.state.log.num.partitions=4\n"
            f"share.coordinator.state.topic.replication.factor={rf}\n"
            f"share.coordinator.state.topic.min.isr={isr}\n"
            "group.initial.rebalance.delay.ms=0\n"
            "log.retention.check.interval.ms=5000\n"
            + self._extra_properties()
        )
        (self.workdir / "log4j2.properties").write_text(
            "appender.file.type = File\nappender.file.name = FILE\n"
            f"appender.file.fileName = {self.kafka_log}\n"
            "appender.file.layout.type = PatternLayout\n"
            "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = INFO\nrootLogger.appenderRef.file.ref = FILE\n"
            "logger.request.name = kafka.request.logger\nlogger.request.level = WARN\n"
        )
        if not (data / "meta.properties").exists():
            done = subprocess.run(
                [*self._java(), "kafka.tools.StorageTool", "format", "--ignore-formatted",
                 "-t", self.cluster_id, "-c", str(self.workdir / "server.properties"),
                 *self._format_args()],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                msg = f"formatting {data} exited {done.returncode}:\n{done.stdout[-2000:]}"
                raise RuntimeError(msg)
        self._starts_logged = self._logged_starts()

    def _listeners(self) -> dict[str, tuple[str, int]]:
        """Listeners besides PLAINTEXT: name -> (security protocol, port)."""
        return {}

    def _extra_properties(self) -> str:
        """Broker settings besides the common ones (lines ending in a newline)."""
        return ""

    def _format_args(self) -> list[str]:
        """Arguments of ``kafka-storage format`` besides the common ones (e.g. ``--add-scram``)."""
        return []

    def _logged_starts(self) -> int:
        if not self.kafka_log.exists():
            return 0
        return self.kafka_log.read_text(errors="replace").count(_STARTED)

    def _command(self) -> tuple[list[str], dict[str, Any]]:
        args = [*self._java(), "kafka.Kafka", str(self.workdir / "server.properties")]
        return args, {"cwd": str(self.workdir)}

    def _ready(self) -> bool:
        return self._logged_starts() > self._starts_logged and _open(self.bootstrap)


class PrivateKafkaCluster:
    """Three (``size``) KRaft nodes on free loopback ports, data under
    ``<workdir>/kafka_cluster/node<i>``; :attr:`bootstrap` lists every node. Internal topics
    are replicated ``min(3, size)`` times (``size=1``: a throw-away single broker a test may
    kill and restart, as the Kafka source-chaos schedule does)."""

    def __init__(self, workdir: str | Path, size: int = 3) -> None:
        base = Path(workdir).resolve() / "kafka_cluster"
        pairs = free_ports(2 * size)  # distinct: a repeated one breaks a broker's start
        ports = [(pairs[2 * i], pairs[2 * i + 1]) for i in range(size)]
        voters = ",".join(f"{i}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports, 1))
        cluster_id = _cluster_id()
        self.nodes = [
            KafkaClusterNode(base, i, p, c, voters, cluster_id)
            for i, (p, c) in enumerate(ports, 1)
        ]
        self.bootstrap = ",".join(node.bootstrap for node in self.nodes)

    def start(self, timeout_s: float = 120.0) -> None:
        """Start every node at once (a node serves only once the quorum has a majority), then
        wait until each serves and the cluster answers with all of them.

        Raises
        ------
        RuntimeError
            If a node exits or the cluster does not serve within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            if not node.running:
                node.workdir.mkdir(parents=True, exist_ok=True)
                node._prepare()
                node._spawn()
        for node in self.nodes:
            while not node._ready():
                if not node.running or time.monotonic() > deadline:
                    self.stop()
                    msg = (f"Kafka node {node.node_id} did not start (log "
                           f"{node.kafka_log}):\n{_tail(node.kafka_log)}\n{_tail(node.log_path)}")
                    raise RuntimeError(msg)
                time.sleep(0.2)
            node.starts += 1
        self.wait_for_brokers(len(self.nodes), max(1.0, deadline - time.monotonic()))

    def wait_for_brokers(self, count: int, timeout_s: float = 60.0) -> None:
        """Wait until the cluster's metadata lists ``count`` brokers."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(Exception):
                if len(admin.list_topics(timeout=5).brokers) == count:
                    return
            if time.monotonic() > deadline:
                msg = f"Kafka cluster {self.bootstrap}: not {count} brokers after {timeout_s:g}s"
                raise RuntimeError(msg)
            time.sleep(0.2)

    def node(self, node_id: int) -> KafkaClusterNode:
        """The node whose ``node.id`` is ``node_id`` (1-based)."""
        return self.nodes[node_id - 1]

    def leader_of(self, topic: str, partition: int) -> int:
        """The node id leading ``topic``'s ``partition`` now (``-1``: none)."""
        from confluent_kafka.admin import AdminClient

        running = ",".join(n.bootstrap for n in self.nodes if n.running) or self.bootstrap
        meta = AdminClient({"bootstrap.servers": running}).list_topics(topic, timeout=10)
        return int(meta.topics[topic].partitions[partition].leader)

    def stop(self) -> None:
        """Stop every node: ``SIGTERM`` to all at once (one by one, the last nodes would wait
        for a quorum that is gone), then ``SIGKILL`` what is left after 15 s."""
        for node in self.nodes:
            if node.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.pid, signal.SIGTERM)
        for node in self.nodes:
            node.stop(timeout_s=15.0)

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


class PrivateBroker:
    """One private broker node (a :class:`KafkaClusterNode` subclass with listeners of its own,
    e.g. secured ones) as a context manager: started, and ready once its PLAINTEXT listener
    (:attr:`plaintext`) answers a metadata request; stopped by the id of the process it
    started."""

    kind = "private broker"

    def __init__(self, node: KafkaClusterNode) -> None:
        self.node = node
        self.plaintext = node.bootstrap

    def start(self, timeout_s: float = 120.0) -> None:
        """Start the broker and wait until its PLAINTEXT listener answers.

        Raises
        ------
        RuntimeError
            If it does not (with its log's tail).
        """
        from confluent_kafka.admin import AdminClient

        try:
            self.node.start(timeout_s)
            AdminClient({"bootstrap.servers": self.plaintext}).list_topics(timeout=30)
        except Exception as exc:
            self.stop()
            msg = f"the {self.kind} did not start:\n{_tail(self.node.kafka_log, 40)}"
            raise RuntimeError(msg) from exc

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.node.stop(timeout_s=15.0)

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


def _cluster_id() -> str:
    """A KRaft cluster id: a random UUID in Kafka's URL-safe base64 (22 characters), never
    starting with ``-`` (Kafka's own ``random-uuid`` avoids that too: it reads as an option)."""
    import base64

    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _tail(path: Path, lines: int = 20) -> str:
    if not path.exists():
        return f"(no {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
