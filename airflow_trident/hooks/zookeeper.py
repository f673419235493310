"""Airflow hook for the ZooKeeper that coordinates Trident batches.

A ``trident_zookeeper`` connection maps onto :class:`~airflow_trident.coordination.client.ZkConfig`:

============  ==================================================================================
field         meaning
============  ==================================================================================
host          ``zk1,zk2:2182``: comma-separated hosts, each with an optional port
port          port of the hosts given without one (default 2181)
schema        chroot (``/apps`` or ``apps``), shown as "Chroot" in the UI
login         digest user: every znode created through the hook gets a digest ACL for it
password      digest password (never logged, never in ``repr``)
extra         ``root`` (default ``/trident``), ``timeout``, ``session_timeout`` (seconds);
              TLS: ``use_ssl``, ``ca``, ``certfile``, ``keyfile``, ``keyfile_password``,
              ``verify_certs`` (default true), ``check_hostname`` (default false);
              SASL: ``sasl_mechanism`` (``DIGEST-MD5`` or ``GSSAPI``), ``sasl_username``,
              ``sasl_password``, ``sasl_service`` (default ``zookeeper``), ``sasl_principal``
============  ==================================================================================

TLS and SASL map onto kazoo's ``KazooClient(use_ssl=..., ca=..., sasl_options=...)``
(:class:`~airflow_trident.coordination.client.ZkTls`,
:class:`~airflow_trident.coordination.client.ZkSasl`); the files must exist at those paths on
every machine that reaches ZooKeeper (workers, triggerer, Spark driver).

Give connections as JSON (``AIRFLOW_CONN_<ID>='{"conn_type": "trident_zookeeper", ...}'``): a URI
cannot carry several hosts.

Examples
--------
>>> import json, os
>>> os.environ["AIRFLOW_CONN_ZK_DOC"] = json.dumps(
...     {"conn_type": "trident_zookeeper", "host": "zk1, zk2:2182", "port": 2181,
...      "schema": "apps", "extra": {"root": "/etl", "timeout": 3}})
>>> config = ZooKeeperHook(zookeeper_conn_id="zk_doc").get_config()
>>> config.connect_string, config.root, config.timeout
('zk1:2181,zk2:2182/apps', '/etl', 3.0)
>>> os.environ["AIRFLOW_CONN_ZK_DOC"] = json.dumps(
...     {"conn_type": "trident_zookeeper", "host": "zk1:2281",
...      "extra": {"use_ssl": True, "ca": "/etc/zk/ca.pem", "sasl_mechanism": "DIGEST-MD5",
...                "sasl_username": "etl", "sasl_password": "not-shown"}})
>>> config = ZooKeeperHook(zookeeper_conn_id="zk_doc").get_config()
>>> config.tls
ZkTls(ca='/etc/zk/ca.pem', certfile=None, keyfile=None, verify_certs=True, check_hostname=False)
>>> config.sasl
ZkSasl(mechanism='DIGEST-MD5', username='etl', service='zookeeper', principal=None)
>>> del os.environ["AIRFLOW_CONN_ZK_DOC"]
"""

from __future__ import annotations

import difflib
from types import TracebackType
from typing import Any

from airflow.sdk import BaseHook
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoAuthError

from airflow_trident.coordination.client import ZkConfig, ZkSasl, ZkTls, connect
from airflow_trident.errors import ConfigurationError, TridentError
from airflow_trident.get_provider_info import ui_field_behaviour
from airflow_trident.hooks.connection_reader import extra_of, get_connection

__all__ = ["ZooKeeperHook"]

_DEFAULT_PORT = 2181
_TLS_EXTRAS = ("use_ssl", "ca", "certfile", "keyfile", "keyfile_password", "verify_certs",
               "check_hostname")  # fmt: skip
_SASL_EXTRAS = ("sasl_mechanism", "sasl_username", "sasl_password", "sasl_service",
                "sasl_principal")  # fmt: skip
_EXTRAS = ("root", "timeout", "session_timeout", *_TLS_EXTRAS, *_SASL_EXTRAS)


class ZooKeeperHook(BaseHook):
    """Build and hold the ZooKeeper client of a ``trident_zookeeper`` connection.

    Parameters
    ----------
    zookeeper_conn_id:
        Airflow connection id (default ``trident_zookeeper_default``).
    logger_name:
        Name of the logger, as for every Airflow hook.
    """

    conn_name_attr = "zookeeper_conn_id"
    default_conn_name = "trident_zookeeper_default"
    conn_type = "trident_zookeeper"
    hook_name = "Trident ZooKeeper"

    def __init__(
        self, *, zookeeper_conn_id: str = default_conn_name, logger_name: str | None = None
    ) -> None:
        super().__init__(logger_name=logger_name)
        self.zookeeper_conn_id = zookeeper_conn_id
        self._client: KazooClient | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(zookeeper_conn_id={self.zookeeper_conn_id!r})"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Connection form behaviour, mirrored from the provider info (Airflow reads it there)."""
        return ui_field_behaviour(cls.conn_type)

    def get_config(self) -> ZkConfig:
        """Read the connection into a :class:`ZkConfig` (no ZooKeeper I/O).

        Raises
        ------
        ConfigurationError
            If a field or extra is malformed (the message names the connection and the field).
        """
        conn = get_connection(self.zookeeper_conn_id)
        where = f"ZooKeeper connection {self.zookeeper_conn_id!r}"
        extra = extra_of(conn, where)  # a malformed extra must not silently turn TLS/SASL off
        unknown = sorted(set(extra) - set(_EXTRAS) - {_prefixed(k) for k in _EXTRAS})
        if unknown:  # a misspelt TLS/SASL extra must not silently give a plain connection
            close = {k: difflib.get_close_matches(k, _EXTRAS, n=1) for k in unknown}
            hints = [f"{k!r} -> {c[0]!r}" for k, c in close.items() if c]
            msg = f"{where}: unknown extra(s) {unknown}; known: {', '.join(_EXTRAS)}" + (
                f"; hint: did you mean {', '.join(hints)}?" if hints else ""
            )
            raise ConfigurationError(msg)
        options: dict[str, Any] = {
            "hosts": _hosts(conn.host, conn.port, where),
            "chroot": _chroot(conn.schema),
        }
        root = _extra(extra, "root")
        if root is not None:
            options["root"] = _root(root, where)
        for key in ("timeout", "session_timeout"):
            value = _extra(extra, key)
            if value is not None:
                options[key] = _seconds(value, where, key)
        try:
            options["tls"] = _tls(extra)
            options["sasl"] = _sasl(extra)
            return ZkConfig(username=conn.login or None, password=conn.password or None, **options)
        except ConfigurationError as exc:  # ZkConfig's own checks do not know the connection id
            msg = f"{where}: {exc}"
            raise ConfigurationError(msg) from None

    def get_conn(self) -> KazooClient:
        """The started client of this hook, connected on first call and cached until :meth:`close`.

        Raises
        ------
        ConfigurationError
            If the connection is malformed.
        CoordinatorUnavailableError
            If ZooKeeper does not answer within the connection's ``timeout``.
        """
        if self._client is None:
            self._client = self._connect(self.get_config())
        return self._client

    def close(self) -> None:
        """Stop and close the cached client, if any (safe to call twice)."""
        client, self._client = self._client, None
        if client is not None:
            client.stop()
            client.close()

    def __enter__(self) -> ZooKeeperHook:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def test_connection(self) -> tuple[bool, str]:
        """Connect with a fresh client, read the root, and say what was found.

        Used by the "Test" button of the connection form; never raises.
        """
        try:
            config = self.get_config()
            client = self._connect(config)
        except TridentError as exc:
            return False, str(exc)
        where = f"ZooKeeper at {config.connect_string}"
        try:
            return True, f"Connected to {where}; {_describe_root(client, config)}"
        except NoAuthError:
            return False, (
                f"Connected to {where}, but reading {config.root} was refused; hint: check the "
                f"digest user and password (the root's ACL does not admit them)"
            )
        except KazooException as exc:
            return False, f"Connected to {where}, but reading {config.root} failed: {exc!r}"
        finally:
            client.stop()
            client.close()

    def _connect(self, config: ZkConfig) -> KazooClient:
        user = f" as digest user {config.username!r}" if config.username else ""
        self.log.info(
            "Connecting to ZooKeeper %s%s (root %s)", config.connect_string, user, config.root
        )
        return connect(config)


def _describe_root(client: KazooClient, config: ZkConfig) -> str:
    if config.chroot and client.exists("/") is None:
        return f"chroot {config.chroot} does not exist yet (it is created on first write)"
    if client.exists(config.root) is None:
        return f"root {config.root} does not exist yet (it is created on first write)"
    topologies = client.get_children(config.root)  # needs READ: checks the credentials
    return f"root {config.root} holds {len(topologies)} topologies"


def _prefixed(key: str) -> str:
    # Forms of Airflow 2 stored custom fields as extra__<conn_type>__<field>.
    return f"extra__{ZooKeeperHook.conn_type}__{key}"


def _extra(extra: dict[str, Any], key: str) -> Any:
    value = extra.get(key, extra.get(_prefixed(key)))
    return None if value == "" else value


def _tls(extra: dict[str, Any]) -> ZkTls | None:
    files = {key: _extra(extra, key) for key in ("ca", "certfile", "keyfile")}
    if not _flag(extra, "use_ssl", default=False):
        given = sorted(key for key, value in files.items() if value)
        if given:
            msg = f"extras {given} are set but use_ssl is not; hint: set use_ssl to true"
            raise ConfigurationError(msg)
        return None
    return ZkTls(
        **files,
        keyfile_password=_extra(extra, "keyfile_password"),
        verify_certs=_flag(extra, "verify_certs", default=True),
        check_hostname=_flag(extra, "check_hostname", default=False),
    )


def _sasl(extra: dict[str, Any]) -> ZkSasl | None:
    mechanism = _extra(extra, "sasl_mechanism")
    if mechanism is None:
        return None
    return ZkSasl(
        mechanism=str(mechanism).upper(),
        username=_extra(extra, "sasl_username"),
        password=_extra(extra, "sasl_password"),
        service=_extra(extra, "sasl_service") or "zookeeper",
        principal=_extra(extra, "sasl_principal"),
    )


def _flag(extra: dict[str, Any], key: str, *, default: bool) -> bool:
    value = _extra(extra, key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    msg = f"extra {key!r} must be true or false, got {value!r}"
    raise ConfigurationError(msg)


def _hosts(host: str | None, port: int | None, where: str) -> str:
    if not host or not host.strip():
        msg = f"{where} has no host; hint: set Hosts to 'zk1:2181,zk2:2181'"
        raise ConfigurationError(msg)
    if "/" in host:
        msg = f"{where}: host {host!r} contains '/'; hint: put the chroot in the Chroot field"
        raise ConfigurationError(msg)
    entries = [entry.strip() for entry in host.split(",")]
    if not all(entries):
        msg = f"{where}: host {host!r} has an empty entry; hint: 'zk1:2181,zk2:2181'"
        raise ConfigurationError(msg)
    default_port = port or _DEFAULT_PORT
    return ",".join(e if _has_port(e) else f"{e}:{default_port}" for e in entries)


def _has_port(entry: str) -> bool:
    # "[::1]:2181" carries a port, "[::1]" does not.
    return ":" in entry.rsplit("]", 1)[-1]


def _chroot(schema: str | None) -> str | None:
    if not schema or not schema.strip("/ "):
        return None
    return "/" + schema.strip().strip("/")


def _root(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.startswith("/") or value.endswith("/"):
        msg = (
            f"{where}: extra 'root' {value!r} must be an absolute znode path without a "
            f"trailing '/'; hint: '/trident'"
        )
        raise ConfigurationError(msg)
    return value


def _seconds(value: Any, where: str, key: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if not seconds > 0:
        msg = f"{where}: extra {key!r} must be a positive number of seconds, got {value!r}"
        raise ConfigurationError(msg)
    return seconds
