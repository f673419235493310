"""ZooKeeperHook: connection parsing, digest ACLs on the real ZooKeeper, secrets kept out of
logs, and the connection test the UI's "Test" button runs."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.protocol.serialization import Auth

from airflow_trident.coordination.client import ZkConfig, _KazooAuthRedactor
from airflow_trident.errors import ConfigurationError
from airflow_trident.hooks.zookeeper import ZooKeeperHook
from tests.harness.airflow import AirflowHome, run_airflow
from tests.hooks.conftest import SetConnection

PASSWORD = "Pa55-w0rd-never-shown"


def hook_for(airflow_conn: SetConnection, **fields: object) -> ZooKeeperHook:
    return ZooKeeperHook(zookeeper_conn_id=airflow_conn(conn_type="trident_zookeeper", **fields))


@pytest.fixture
def digest_root(zk_hosts: str, unique_name: str) -> Iterator[str]:
    """A fresh znode path, deleted afterwards by a client holding user etl's digest credentials
    (only such a client may delete nodes below a node created with etl's digest ACL)."""
    root = f"/{unique_name}"
    yield root
    authed = KazooClient(hosts=zk_hosts, auth_data=[("digest", f"etl:{PASSWORD}")])
    authed.start(timeout=5)
    try:
        if authed.exists(root):
            authed.delete(root, recursive=True)
    finally:
        authed.stop()
        authed.close()


# ---------------------------------------------------------------- config (no ZooKeeper)


def test_config_reads_hosts_chroot_digest_and_extras(airflow_conn: SetConnection) -> None:
    # Given a connection with two hosts (one without port), a chroot, credentials and extras
    hook = hook_for(
        airflow_conn,
        host="zk1, zk2:2182",
        port=2191,
        schema="apps/",
        login="etl",
        password=PASSWORD,
        extra={"root": "/etl", "timeout": "2.5", "session_timeout": 30},
    )
    # When it is read
    config = hook.get_config()
    # Then every field lands in the ZkConfig
    assert config == ZkConfig(
        hosts="zk1:2191,zk2:2182",
        chroot="/apps",
        root="/etl",
        username="etl",
        password=PASSWORD,
        timeout=2.5,
        session_timeout=30.0,
    )
    assert config.connect_string == "zk1:2191,zk2:2182/apps"


def test_config_defaults(airflow_conn: SetConnection) -> None:
    config = hook_for(airflow_conn, host="127.0.0.1").get_config()
    assert (config.hosts, config.chroot, config.root) == ("127.0.0.1:2181", None, "/trident")
    assert (config.username, config.password, config.timeout) == (None, None, 10.0)


def test_config_accepts_airflow2_prefixed_extras(airflow_conn: SetConnection) -> None:
    hook = hook_for(airflow_conn, host="zk", extra={"extra__trident_zookeeper__root": "/old"})
    assert hook.get_config().root == "/old"


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({}, "has no host; hint"),
        ({"host": "zk1:2181/apps"}, "contains '/'; hint: put the chroot in the Chroot field"),
        ({"host": "zk1,,zk2"}, "empty entry"),
        (
            {"host": "zk", "extra": {"root": "trident"}},
            "extra 'root' 'trident' must be an absolute znode path",
        ),
        ({"host": "zk", "extra": {"timeout": "soon"}}, "extra 'timeout' must be a positive"),
        ({"host": "zk", "extra": {"session_timeout": 0}}, "'session_timeout' must be a positive"),
        ({"host": "zk", "login": "etl"}, "needs both a username and a password"),
    ],
)
def test_config_rejects_malformed_connections(
    airflow_conn: SetConnection, fields: dict[str, object], match: str
) -> None:
    hook = hook_for(airflow_conn, **fields)
    with pytest.raises(ConfigurationError, match=match) as info:
        hook.get_config()
    assert hook.zookeeper_conn_id in str(info.value)


@pytest.mark.parametrize(
    ("extra", "hint"),
    [({"use_tls": True}, "'use_tls' -> 'use_ssl'"), ({"session-timeout": 3}, "'session_timeout'")],
)
def test_unknown_extras_are_refused_with_the_close_name(
    airflow_conn: SetConnection, extra: dict[str, object], hint: str
) -> None:
    # Given a connection with a misspelt extra (use_tls was a warning, then plain TCP)
    hook = hook_for(airflow_conn, host="zk", extra=extra)
    # When its config is read, or the form's Test button runs
    with pytest.raises(ConfigurationError, match="unknown extra") as info:
        hook.get_config()
    ok, message = hook.test_connection()
    # Then both refuse it, naming the connection, the extra and the known name
    assert hook.zookeeper_conn_id in str(info.value)
    assert hint in str(info.value)
    assert not ok
    assert hint in message


def test_ui_relabels_fields_for_zookeeper() -> None:
    behaviour = ZooKeeperHook.get_ui_field_behaviour()
    assert behaviour["relabeling"]["schema"] == "Chroot"
    assert behaviour["relabeling"]["login"] == "Digest user"
    assert behaviour["hidden_fields"] == ["extra"]


def test_kazoo_auth_packets_are_redacted_in_logs() -> None:
    # Given the record kazoo logs (at DEBUG) when it sends digest credentials
    record = logging.LogRecord(
        "kazoo.client", logging.DEBUG, __file__, 1, "Sending request(xid=%s): %s",
        (-4, Auth(0, "digest", f"etl:{PASSWORD}")), None,
    )  # fmt: skip
    # When the redactor sees it
    kept = _KazooAuthRedactor().filter(record)
    # Then the record is kept but the password is gone from its message
    assert kept
    assert PASSWORD not in record.getMessage()
    assert "auth='etl:***'" in record.getMessage()


# ---------------------------------------------------------------- against the real ZooKeeper


@pytest.mark.integration
def test_digest_acl_and_chroot_on_real_zookeeper(
    airflow_conn: SetConnection,
    zk_hosts: str,
    zk_client: KazooClient,
    digest_root: str,
    all_output: Callable[[], str],
) -> None:
    # Given an open chroot node and a connection with digest credentials below it
    chroot = digest_root
    zk_client.create(chroot)
    hook = hook_for(
        airflow_conn,
        host=zk_hosts,
        schema=chroot,
        login="etl",
        password=PASSWORD,
        extra={"root": "/trident", "timeout": 5},
    )
    try:
        # When a node is created through the hook's client
        client = hook.get_conn()
        client.create("/trident/topo", b"payload", makepath=True)
        acls, _ = client.get_acls("/trident/topo")
        # Then it lives below the chroot and carries the digest ACL of the hook's user
        assert zk_client.exists(f"{chroot}/trident/topo") is not None
        assert [(acl.id.scheme, acl.id.id.split(":")[0], acl.perms) for acl in acls] == [
            ("digest", "etl", 31)
        ]
        # And a client without the credentials may not read it
        with pytest.raises(NoAuthError):
            zk_client.get(f"{chroot}/trident/topo")
        assert hook.test_connection() == (
            True,
            f"Connected to ZooKeeper at {zk_hosts}{chroot}; root /trident holds 1 topologies",
        )
    finally:
        hook.close()
    # And the password appears nowhere: not in repr/str, not in any log line or output
    output = all_output()
    assert "as digest user 'etl'" in output  # the hook's own log lines were captured
    assert "auth='etl:***'" in output  # kazoo's DEBUG line of the Auth packet, redacted
    for text in (output, repr(hook), str(hook), repr(hook.get_config()), str(hook.get_config())):
        assert PASSWORD not in text


@pytest.mark.integration
def test_get_conn_is_cached_until_close(airflow_conn: SetConnection, zk_hosts: str) -> None:
    with hook_for(airflow_conn, host=zk_hosts) as hook:
        first = hook.get_conn()
        assert hook.get_conn() is first
        assert first.connected
        hook.close()
        second = hook.get_conn()
        assert second is not first
        assert not first.connected
    assert not second.connected  # leaving the with-block closed it


@pytest.mark.integration
def test_connection_succeeds_on_real_zookeeper(
    airflow_conn: SetConnection, zk_hosts: str, unique_name: str
) -> None:
    hook = hook_for(airflow_conn, host=zk_hosts, extra={"root": f"/{unique_name}"})
    ok, message = hook.test_connection()
    assert ok, message
    assert message == (
        f"Connected to ZooKeeper at {zk_hosts}; root /{unique_name} does not exist yet "
        f"(it is created on first write)"
    )


@pytest.mark.integration
def test_connection_fails_clearly_on_a_closed_port(
    airflow_conn: SetConnection, closed_port: int
) -> None:
    hook = hook_for(airflow_conn, host=f"127.0.0.1:{closed_port}", extra={"timeout": 1})
    ok, message = hook.test_connection()
    assert not ok
    assert message.startswith(f"ZooKeeper at 127.0.0.1:{closed_port} did not answer within 1s")
    assert "hint:" in message


@pytest.mark.integration
def test_connection_fails_when_the_acl_refuses_the_credentials(
    airflow_conn: SetConnection, zk_hosts: str, digest_root: str
) -> None:
    # Given a root owned by digest user etl
    owner = hook_for(airflow_conn, host=zk_hosts, login="etl", password=PASSWORD)
    with owner:
        owner.get_conn().create(digest_root)
    # When another password tests the connection to that root
    intruder = hook_for(
        airflow_conn, host=zk_hosts, login="etl", password="wrong-password",
        extra={"root": digest_root},
    )  # fmt: skip
    ok, message = intruder.test_connection()
    # Then the test fails and says why
    assert not ok
    assert f"reading {digest_root} was refused; hint: check the digest user" in message


@pytest.mark.integration
def test_airflow_connections_test_cli_uses_the_hook(
    airflow_home: AirflowHome, zk_hosts: str, unique_name: str
) -> None:
    # Given a trident_zookeeper connection known to a separate Airflow process
    conn = f'{{"conn_type": "trident_zookeeper", "host": "{zk_hosts}", "extra": {{"timeout": 5}}}}'
    env = {"AIRFLOW__CORE__TEST_CONNECTION": "Enabled", f"AIRFLOW_CONN_{unique_name.upper()}": conn}
    # When `airflow connections test` runs it (the code path of the UI's Test button)
    done = run_airflow(
        airflow_home, "connections", "test", unique_name, timeout_s=60, extra_env=env
    )
    # Then Airflow found the hook through the provider and the hook reached ZooKeeper
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Connection success!" in done.stdout
