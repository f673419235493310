"""Free loopback ports for the private servers of the tests, never one port twice.

Asking the OS for a free port (bind to port 0, read it, close) and asking again can give the same
port: the first was released before the second was asked for. Servers that need several ports
(a ZooKeeper ensemble's client, quorum and election ports, a Kafka cluster's listeners) then
collide, and the collision shows only later, e.g. as an ensemble that cannot elect a leader once
a server is killed. :func:`free_ports` holds every socket open until all are picked, and a port
handed out once in this process is not handed out again.
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["free_port", "free_ports"]

_handed_out: set[int] = set()
_lock = threading.Lock()


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback TCP ports that were free a moment ago (the OS picks them),
    none of them handed out before by this process.

    >>> first, second = free_ports(2)
    >>> first != second and first not in free_ports(3)
    True
    """
    with _lock, contextlib.ExitStack() as held:
        ports: list[int] = []
        while len(ports) < count:
            sock = held.enter_context(contextlib.closing(socket.socket()))
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
            if port not in _handed_out:
                ports.append(port)
        _handed_out.update(ports)
        return ports


def free_port() -> int:
    """One loopback TCP port that was free a moment ago (see :func:`free_ports`)."""
    return free_ports(1)[0]
