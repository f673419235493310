"""ZooKeeper TLS and SASL on the ``trident_zookeeper`` connection: the extras reach kazoo's
``KazooClient``, bad combinations are refused with the connection id, and a real ZooKeeper
that speaks only TLS and requires SASL (DIGEST-MD5) admits the hook — and nothing less."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from airflow_trident.coordination.client import (
    SECURITY_ENV,
    ZkConfig,
    ZkSasl,
    ZkTls,
    security_env,
    with_security_from_env,
)
from airflow_trident.errors import ConfigurationError, CoordinatorUnavailableError
from airflow_trident.hooks.spark import job_arguments, job_secrets
from airflow_trident.hooks.zookeeper import ZooKeeperHook
from tests.hooks import secure_zookeeper
from tests.hooks.conftest import SetConnection
from tests.hooks.secure_zookeeper import SASL_PASSWORD, SASL_USER, SecureZooKeeper

KEY_PASSWORD = "Key-Pa55-never-shown"


def hook_for(airflow_conn: SetConnection, host: str, **extra: Any) -> ZooKeeperHook:
    conn_id = airflow_conn(conn_type="trident_zookeeper", host=host, extra=extra)
    return ZooKeeperHook(zookeeper_conn_id=conn_id)


# ---------------------------------------------------------------- mapping (no ZooKeeper)


def test_tls_and_sasl_extras_reach_the_kazoo_client(airflow_conn: SetConnection) -> None:
    # Given a connection with every TLS and SASL extra (booleans as the form or as text)
    hook = hook_for(
        airflow_conn, "zk1:2281",
        use_ssl="true", ca="/etc/zk/ca.pem", certfile="/etc/zk/me.pem", keyfile="/etc/zk/me.key",
        keyfile_password=KEY_PASSWORD, verify_certs=True, check_hostname=True,
        sasl_mechanism="digest-md5", sasl_username=SASL_USER, sasl_password=SASL_PASSWORD,
        sasl_service="zk",
    )  # fmt: skip
    # When it is read and a client built from it
    config = hook.get_config()
    client = config.client()
    # Then kazoo gets each option, and no secret shows in the config's repr
    assert (client.use_ssl, client.ca, client.certfile, client.keyfile) == (
        True, "/etc/zk/ca.pem", "/etc/zk/me.pem", "/etc/zk/me.key",
    )  # fmt: skip
    assert (client.verify_certs, client.check_hostname) == (True, True)
    assert client.keyfile_password == KEY_PASSWORD
    assert client._connection.sasl_options == {
        "mechanism": "DIGEST-MD5", "service": "zk", "username": SASL_USER,
        "password": SASL_PASSWORD,
    }  # fmt: skip
    assert SASL_PASSWORD not in repr(config)
    assert KEY_PASSWORD not in repr(config)


def test_without_tls_and_sasl_extras_the_client_is_plain(airflow_conn: SetConnection) -> None:
    config = hook_for(airflow_conn, "zk1:2181").get_config()
    client = config.client()
    assert (config.tls, config.sasl) == (None, None)
    assert client.use_ssl is False
    assert client._connection.sasl_options is None


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"ca": "/ca.pem"}, r"extras \['ca'\] are set but use_ssl is not; hint: set use_ssl"),
        ({"use_ssl": True, "certfile": "/c.pem"}, "needs both certfile and keyfile"),
        ({"use_ssl": True, "verify_certs": False, "check_hostname": True}, "needs verify_certs"),
        ({"use_ssl": "yes please"}, "extra 'use_ssl' must be true or false"),
        ({"sasl_mechanism": "PLAIN"}, "SASL mechanism 'PLAIN' is not one of DIGEST-MD5, GSSAPI"),
        ({"sasl_mechanism": "DIGEST-MD5", "sasl_username": "u"}, "needs a username and a password"),
    ],
)
def test_bad_security_extras_are_refused_naming_the_connection(
    airflow_conn: SetConnection, extra: dict[str, Any], match: str
) -> None:
    hook = hook_for(airflow_conn, "zk1:2281", **extra)
    with pytest.raises(ConfigurationError, match=match) as info:
        hook.get_config()
    assert hook.zookeeper_conn_id in str(info.value)
    ok, message = hook.test_connection()
    assert (ok, message) == (False, str(info.value))


def test_a_missing_tls_file_fails_before_connecting(
    airflow_conn: SetConnection, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere" / "ca.pem"
    hook = hook_for(airflow_conn, "127.0.0.1:1", use_ssl=True, ca=str(missing))
    ok, message = hook.test_connection()
    assert not ok
    assert f"TLS ca file '{missing}' does not exist on this machine" in message


def test_the_spark_job_gets_tls_and_sasl_as_a_secret_never_as_arguments() -> None:
    # Given a config with TLS and SASL
    config = ZkConfig(
        hosts="zk:2281",
        tls=ZkTls(ca="/ca.pem", verify_certs=False),
        sasl=ZkSasl(mechanism="DIGEST-MD5", username=SASL_USER, password=SASL_PASSWORD),
    )
    # When the job's arguments and secrets are built
    arguments = job_arguments("m:t", 3, "/stage", config, emit_wait_s=1.0)
    secrets = job_secrets(config, None)
    # Then the password is only in the secret environment, and the job rebuilds the same config
    assert not any(SASL_PASSWORD in argument for argument in arguments)
    assert SASL_PASSWORD in secrets[SECURITY_ENV]
    rebuilt = with_security_from_env(ZkConfig(hosts="zk:2281"), secrets)
    assert rebuilt == config
    assert security_env(ZkConfig()) == {}
    assert json.loads(secrets[SECURITY_ENV])["tls"]["ca"] == "/ca.pem"


# ---------------------------------------------------------------- a real TLS + SASL ZooKeeper


@pytest.fixture(scope="module")
def secure_zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureZooKeeper]:
    if not secure_zookeeper.available():
        pytest.skip("needs java and Debian's netty jars (the zookeeper package)")
    server = SecureZooKeeper(tmp_path_factory.mktemp("secure_zk"))
    server.start()
    try:
        yield server
    finally:
        server.kill()


def secure_extras(server: SecureZooKeeper, **overrides: Any) -> dict[str, Any]:
    extras: dict[str, Any] = {
        "use_ssl": True,
        "ca": str(server.certificates["ca"]),
        "check_hostname": True,
        "sasl_mechanism": "DIGEST-MD5",
        "sasl_username": SASL_USER,
        "sasl_password": SASL_PASSWORD,
        "timeout": 8,
        "root": "/secure",
    }
    extras.update(overrides)
    return {k: v for k, v in extras.items() if v is not None}


@pytest.mark.integration
def test_hook_connects_over_tls_with_sasl(
    airflow_conn: SetConnection, secure_zk: SecureZooKeeper
) -> None:
    # Given a connection to the TLS port with the CA and the SASL user
    hook = hook_for(airflow_conn, secure_zk.secure_hosts, **secure_extras(secure_zk))
    # When it is tested and used
    ok, message = hook.test_connection()
    with hook:
        client = hook.get_conn()
        client.ensure_path("/secure/t")
        children = client.get_children("/secure")
    # Then the session is up, over TLS, and writes go through
    assert (ok, message) == (
        True,
        f"Connected to ZooKeeper at {secure_zk.secure_hosts}; root /secure does not exist yet "
        f"(it is created on first write)",
    )
    assert children == ["t"]


@pytest.mark.integration
# kazoo's connection thread raises the SASL failure itself before the client gives up
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            {"sasl_mechanism": None, "sasl_username": None, "sasl_password": None},
            "refused the session: it requires SASL authentication; hint: set the connection's "
            "sasl_mechanism",
        ),
        (
            {"sasl_password": "wrong"},
            "refused the session: SASL DIGEST-MD5 authentication failed; hint: check the user",
        ),
        ({"use_ssl": False, "ca": None, "check_hostname": None, "timeout": 2}, "did not answer"),
    ],
)
def test_hook_is_refused_without_the_right_tls_or_sasl(
    airflow_conn: SetConnection,
    secure_zk: SecureZooKeeper,
    overrides: dict[str, Any],
    match: str,
) -> None:
    # Given a connection missing SASL, with a wrong password, or without TLS on the TLS port
    hook = hook_for(airflow_conn, secure_zk.secure_hosts, **secure_extras(secure_zk, **overrides))
    # When it is tested, and used
    ok, message = hook.test_connection()
    # Then both say why, and no password shows
    assert not ok
    assert match in message
    assert SASL_PASSWORD not in message
    with pytest.raises(CoordinatorUnavailableError, match=match[:30]), hook:
        hook.get_conn()


@pytest.mark.integration
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_sasl_refusal_that_closes_the_session_before_start_looks_is_no_timeout(
    airflow_conn: SetConnection, secure_zk: SecureZooKeeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given kazoo's start() looking at the session only after its connection thread has
    # connected, failed SASL and closed it (the interleaving a loaded machine gives CI)
    real_start_async = KazooClient.start_async

    def late_start(self: KazooClient, timeout: float = 15) -> None:
        lost = threading.Event()
        self.add_listener(lambda state: lost.set() if state == KazooState.LOST else None)
        real_start_async(self).wait(timeout=timeout)
        lost.wait(timeout)
        if not self.connected:
            self.stop()
            self.close()
            raise self.handler.timeout_exception("Connection time-out")

    monkeypatch.setattr(KazooClient, "start", late_start)
    hook = hook_for(
        airflow_conn, secure_zk.secure_hosts, **secure_extras(secure_zk, sasl_password="wrong")
    )
    # When it is tested
    ok, message = hook.test_connection()
    # Then the refusal is named, not a timeout
    assert not ok
    assert "refused the session: SASL DIGEST-MD5 authentication failed" in message
    assert SASL_PASSWORD not in message
