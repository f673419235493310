"""Connecting to ZooKeeper: hosts, chroot, digest credentials, timeouts.

The Airflow hook builds a :class:`ZkConfig` from a connection; tests and scripts build one by hand.
Secrets never appear in ``repr`` or in error messages.

>>> cfg = ZkConfig(hosts="127.0.0.1:2181", chroot="/apps", username="etl", password="s3cret")
>>> "s3cret" in repr(cfg)
False
>>> cfg.connect_string
'127.0.0.1:2181/apps'
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import Auth
from kazoo.retry import KazooRetry
from kazoo.security import make_digest_acl

from airflow_trident.errors import ConfigurationError, CoordinatorUnavailableError

__all__ = ["ZkConfig", "connect"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ZkConfig:
    """Where and how to reach ZooKeeper.

    Parameters
    ----------
    hosts:
        ``host:port[,host:port...]``.
    chroot:
        Optional path every other path is relative to (``/apps``).
    root:
        Root of airflow-trident's nodes below the chroot (one child per topology).
    username, password:
        Digest credentials; when given, every node created carries a digest ACL for them.
    timeout:
        Seconds to wait for the first connection.
    session_timeout:
        ZooKeeper session timeout in seconds.
    """

    hosts: str = "127.0.0.1:2181"
    chroot: str | None = None
    root: str = "/trident"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout: float = 10.0
    session_timeout: float = 10.0

    def __post_init__(self) -> None:
        if not self.hosts or "/" in self.hosts:
            msg = f"ZooKeeper hosts {self.hosts!r} must be 'host:port[,...]' (chroot goes apart)"
            raise ConfigurationError(msg)
        if self.chroot is not None and not self.chroot.startswith("/"):
            msg = f"ZooKeeper chroot {self.chroot!r} must start with '/'"
            raise ConfigurationError(msg)
        if (self.username is None) != (self.password is None):
            msg = "ZooKeeper digest auth needs both a username and a password"
            raise ConfigurationError(msg)

    @property
    def connect_string(self) -> str:
        """``hosts`` followed by the chroot, as kazoo takes it."""
        return self.hosts + (self.chroot.rstrip("/") if self.chroot else "")

    def acl(self) -> list[Any] | None:
        """The ACL given to created nodes: digest for our user, or ZooKeeper's default."""
        if self.username is None or self.password is None:
            return None
        return [make_digest_acl(self.username, self.password, all=True)]

    def client(self) -> KazooClient:
        """A configured, not yet started :class:`KazooClient` (no I/O)."""
        auth = []
        if self.username is not None and self.password is not None:
            auth.append(("digest", f"{self.username}:{self.password}"))
        return KazooClient(
            hosts=self.connect_string,
            timeout=self.session_timeout,
            auth_data=auth or None,
            default_acl=self.acl(),
            command_retry=KazooRetry(max_tries=8, delay=0.1, backoff=2, max_delay=3.0),
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=3.0),
        )


class _KazooAuthRedactor(logging.Filter):
    """Hide the credentials kazoo logs at DEBUG when it sends an ``Auth`` packet."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, Auth) for a in record.args):
            record.args = tuple(_redacted(a) for a in record.args)
        return True


def _redacted(arg: object) -> object:
    if not isinstance(arg, Auth):
        return arg
    user = str(arg.auth).partition(":")[0]
    return f"Auth(auth_type={arg.auth_type}, scheme={arg.scheme!r}, auth='{user}:***')"


def _redact_kazoo_auth() -> None:
    # kazoo logs every request it sends at DEBUG on "kazoo.client", the digest
    # "user:password" included; a filter on that logger sees each record before any handler.
    kazoo_log = logging.getLogger("kazoo.client")
    if not any(isinstance(f, _KazooAuthRedactor) for f in kazoo_log.filters):
        kazoo_log.addFilter(_KazooAuthRedactor())


def connect(config: ZkConfig) -> KazooClient:
    """Start a client for ``config`` and wait for its session.

    Raises
    ------
    CoordinatorUnavailableError
        If no server answers within ``config.timeout`` seconds (the client is stopped).
    """
    client = config.client()
    _redact_kazoo_auth()
    try:
        client.start(timeout=config.timeout)
    except KazooTimeoutError as exc:
        client.stop()
        client.close()
        msg = (
            f"ZooKeeper at {config.connect_string} did not answer within {config.timeout:g}s; "
            f"hint: is it running? (`bash scripts/services.sh start` starts a local one)"
        )
        raise CoordinatorUnavailableError(msg) from exc
    log.debug("connected to ZooKeeper at %s", config.connect_string)
    return client
