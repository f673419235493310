"""Connecting to ZooKeeper: hosts, chroot, digest credentials, timeouts, TLS and SASL.

The Airflow hook builds a :class:`ZkConfig` from a connection; tests and scripts build one by hand.
Secrets never appear in ``repr`` or in error messages.

>>> cfg = ZkConfig(hosts="127.0.0.1:2181", chroot="/apps", username="etl", password="s3cret")
>>> "s3cret" in repr(cfg)
False
>>> cfg.connect_string
'127.0.0.1:2181/apps'
>>> tls = ZkConfig(hosts="zk:2281", tls=ZkTls(ca="/etc/zk/ca.pem"),
...                sasl=ZkSasl(mechanism="DIGEST-MD5", username="etl", password="s3cret"))
>>> "s3cret" in repr(tls), tls.client().use_ssl
(False, True)
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    SessionClosedRequireSaslError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import Auth
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry
from kazoo.security import make_digest_acl

from airflow_trident.errors import ConfigurationError, CoordinatorUnavailableError

__all__ = [
    "SASL_MECHANISMS",
    "SECURITY_ENV",
    "ZkConfig",
    "ZkSasl",
    "ZkTls",
    "connect",
    "security_env",
    "with_security_from_env",
]

log = logging.getLogger(__name__)

SASL_MECHANISMS = ("DIGEST-MD5", "GSSAPI")
SECURITY_ENV = "TRIDENT_ZK_SECURITY"
"""Environment variable carrying a config's TLS and SASL settings (secrets included) to a Spark
job, as JSON: never on a command line."""


@dataclass(frozen=True)
class ZkTls:
    """TLS to ZooKeeper (its ``secureClientPort``), as kazoo's ``use_ssl`` options.

    Parameters
    ----------
    ca:
        PEM file of the CA that signed the servers' certificates (``None``: the system's).
    certfile, keyfile:
        PEM client certificate and key, for servers that require client authentication.
    keyfile_password:
        Password of an encrypted ``keyfile`` (never in ``repr``).
    verify_certs:
        Verify the server's certificate (turn off only for a test server).
    check_hostname:
        Also check that the certificate names the host connected to.
    """

    ca: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    keyfile_password: str | None = field(default=None, repr=False)
    verify_certs: bool = True
    check_hostname: bool = False

    def __post_init__(self) -> None:
        if (self.certfile is None) != (self.keyfile is None):
            msg = "ZooKeeper TLS client authentication needs both certfile and keyfile"
            raise ConfigurationError(msg)
        if self.check_hostname and not self.verify_certs:
            msg = "ZooKeeper TLS check_hostname needs verify_certs"
            raise ConfigurationError(msg)

    def files(self) -> dict[str, str]:
        """The files this configuration names, by option."""
        named = {"ca": self.ca, "certfile": self.certfile, "keyfile": self.keyfile}
        return {option: path for option, path in named.items() if path}

    def kazoo_arguments(self) -> dict[str, Any]:
        """Keyword arguments of :class:`KazooClient` for this configuration."""
        return {
            "use_ssl": True,
            "ca": self.ca,
            "certfile": self.certfile,
            "keyfile": self.keyfile,
            "keyfile_password": self.keyfile_password,
            "verify_certs": self.verify_certs,
            "check_hostname": self.check_hostname,
        }


@dataclass(frozen=True)
class ZkSasl:
    """SASL authentication to ZooKeeper, as kazoo's ``sasl_options`` (needs ``pure-sasl``).

    Parameters
    ----------
    mechanism:
        ``"DIGEST-MD5"`` (a user of the server's JAAS ``Server`` section) or ``"GSSAPI"``
        (Kerberos: the ticket cache of the process, ``kinit`` beforehand).
    username, password:
        DIGEST-MD5 credentials (the password never in ``repr``).
    service:
        Kerberos service name of the servers (default ``zookeeper``).
    principal:
        Kerberos principal of the client (GSSAPI, optional).
    """

    mechanism: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    service: str = "zookeeper"
    principal: str | None = None

    def __post_init__(self) -> None:
        if self.mechanism not in SASL_MECHANISMS:
            msg = (
                f"ZooKeeper SASL mechanism {self.mechanism!r} is not one of "
                f"{', '.join(SASL_MECHANISMS)}"
            )
            raise ConfigurationError(msg)
        if self.mechanism == "DIGEST-MD5" and not (self.username and self.password):
            msg = "ZooKeeper SASL DIGEST-MD5 needs a username and a password"
            raise ConfigurationError(msg)

    def kazoo_options(self) -> dict[str, str]:
        """kazoo's ``sasl_options`` for this configuration (a fresh dict: kazoo mutates it)."""
        options = {"mechanism": self.mechanism, "service": self.service}
        if self.username:
            options["username"] = self.username
        if self.password:
            options["password"] = self.password
        if self.principal:
            options["principal"] = self.principal
        return options


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
    tls:
        TLS settings (``None``: plain TCP).
    sasl:
        SASL authentication (``None``: none; digest ACL credentials are ``username``).
    """

    hosts: str = "127.0.0.1:2181"
    chroot: str | None = None
    root: str = "/trident"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout: float = 10.0
    session_timeout: float = 10.0
    tls: ZkTls | None = None
    sasl: ZkSasl | None = None

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
            sasl_options=self.sasl.kazoo_options() if self.sasl else None,
            **(self.tls.kazoo_arguments() if self.tls else {}),
        )


def security_env(config: ZkConfig) -> dict[str, str]:
    """``{SECURITY_ENV: json}`` of ``config``'s TLS and SASL settings, or ``{}`` without any.

    A secret (it may hold passwords): export it, never pass it as an argument.

    >>> cfg = ZkConfig(tls=ZkTls(ca="/ca.pem"))
    >>> with_security_from_env(ZkConfig(), security_env(cfg)) == cfg
    True
    """
    if config.tls is None and config.sasl is None:
        return {}
    payload = {
        "tls": asdict(config.tls) if config.tls else None,
        "sasl": asdict(config.sasl) if config.sasl else None,
    }
    return {SECURITY_ENV: json.dumps(payload)}


def with_security_from_env(config: ZkConfig, environ: Mapping[str, str] | None = None) -> ZkConfig:
    """``config`` with the TLS and SASL settings of :func:`security_env`'s variable, if set."""
    raw = (os.environ if environ is None else environ).get(SECURITY_ENV)
    if not raw:
        return config
    payload = json.loads(raw)
    tls = ZkTls(**payload["tls"]) if payload.get("tls") else None
    sasl = ZkSasl(**payload["sasl"]) if payload.get("sasl") else None
    return replace(config, tls=tls, sasl=sasl)


def _refusal(config: ZkConfig, exc: KazooException) -> str:
    where = f"ZooKeeper at {config.connect_string} refused the session"
    if isinstance(exc, SessionClosedRequireSaslError):
        return (
            f"{where}: it requires SASL authentication; hint: set the connection's "
            f"sasl_mechanism (DIGEST-MD5 with sasl_username and sasl_password, or GSSAPI)"
        )
    if isinstance(exc, AuthFailedError) or (
        isinstance(exc, ConnectionLoss | ConnectionClosedError) and config.sasl is not None
    ):
        scheme = f"SASL {config.sasl.mechanism}" if config.sasl else "digest"
        return f"{where}: {scheme} authentication failed; hint: check the user and password"
    return f"{where}: {type(exc).__name__} {exc}"


def _check_tls_files(config: ZkConfig) -> None:
    if config.tls is None:
        return
    for option, path in config.tls.files().items():
        if not Path(path).is_file():
            msg = (
                f"ZooKeeper at {config.connect_string}: TLS {option} file {path!r} does not "
                f"exist on this machine; hint: every machine that reaches ZooKeeper (workers, "
                f"triggerer, Spark driver) needs it at that path"
            )
            raise ConfigurationError(msg)


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
    ConfigurationError
        If a TLS file the config names does not exist.
    CoordinatorUnavailableError
        If no server answers within ``config.timeout`` seconds (the client is stopped).
    """
    _check_tls_files(config)
    client = config.client()
    _redact_kazoo_auth()
    states: list[KazooState] = []  # what the start went through (see the timeout below)
    client.add_listener(states.append)
    try:
        client.start(timeout=config.timeout)
        # A server requiring SASL refuses a session only at its first request: ask one here,
        # so the refusal is this function's clear error, not a later task's ConnectionLoss
        # (a short retry rides out a connection lost by chance right after the start).
        KazooRetry(max_tries=5, delay=0.1, backoff=2, max_delay=1.0)(client.exists, "/")
    except KazooTimeoutError as exc:
        client.stop()
        client.close()
        if KazooState.CONNECTED in states and config.sasl is not None:
            # The server answered and dropped the session at its SASL step before start()
            # looked (kazoo's connection thread raised the refusal): not a timeout.
            raise CoordinatorUnavailableError(_refusal(config, ConnectionClosedError())) from exc
        secure = ""
        if config.tls is not None:
            secure += " (TLS: is that its secureClientPort, does the ca file sign its certificate?)"
        if config.sasl is not None:
            secure += f" (SASL {config.sasl.mechanism}: does the server accept these credentials?)"
        msg = (
            f"ZooKeeper at {config.connect_string} did not answer within {config.timeout:g}s; "
            f"hint: is it running, and are the trident_zookeeper connection's host and port "
            f"right?{secure}"
        )
        raise CoordinatorUnavailableError(msg) from exc
    except KazooException as exc:  # the server answered, and refused the session
        client.stop()
        client.close()
        raise CoordinatorUnavailableError(_refusal(config, exc)) from exc
    finally:
        client.remove_listener(states.append)
    log.debug("connected to ZooKeeper at %s", config.connect_string)
    return client
