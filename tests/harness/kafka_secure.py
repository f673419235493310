"""A private single Kafka broker with secured listeners, for the security tests
(docs/security.md): TLS material made at test time with Debian's ``openssl``, SCRAM users made
with the broker's own ``kafka-storage format --add-scram``.

Listeners on free loopback ports (the broker's own ``PLAINTEXT`` one serves the tests' producer
and admin calls):

* ``SSL``: TLS with client authentication required (mutual TLS);
* ``SASL_SSL``: TLS, then SASL ``PLAIN``, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``;
* ``OAUTH``: ``SASL_PLAINTEXT`` with ``OAUTHBEARER`` and the broker's unsecured JWT validator
  (no token server: the client signs nothing, the broker checks the token's form and expiry).

:meth:`SecuredKafka.config` gives the librdkafka settings a user writes in a ``kafka``
connection's extra for each (:data:`MECHANISMS`), and the bad variants of the failure tests.

Example (starts one JVM, ~10 s)::

    with SecuredKafka(tmp_path) as kafka:
        create_topic(kafka.plaintext, "t")
        AdminClient(kafka.config("scram-sha-512")).list_topics(timeout=10)
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tests.harness.kafka import KafkaClusterNode, PrivateBroker, _cluster_id
from tests.harness.ports import free_ports

__all__ = ["MECHANISMS", "PASSWORD", "USER", "SecuredKafka", "make_tls"]

USER = "etl"
PASSWORD = "etl-secret-1"  # a throw-away broker's test user
MECHANISMS = ("mtls", "plain", "scram-sha-256", "scram-sha-512", "oauthbearer")
"""The ways in a test runs a batch through: mutual TLS, SASL_SSL with each SASL mechanism
the wheel's librdkafka has, and OAUTHBEARER (GSSAPI: docs/security.md)."""
_STORE_PASSWORD = "broker-store-1"


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    if done.returncode != 0:
        msg = f"openssl {' '.join(args[:2])} exited {done.returncode}: {done.stderr[-1500:]}"
        raise RuntimeError(msg)


def _signed(name: str, subject: str, ca: str, cwd: Path, san: str | None = None) -> None:
    """``<name>.key`` (PKCS#8) and ``<name>.crt`` signed by ``<ca>``."""
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
             f"{name}.csr", "-subj", subject, cwd=cwd)  # fmt: skip
    ext = cwd / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-sha256", "-extfile",
             str(ext), cwd=cwd)  # fmt: skip


def make_tls(directory: Path) -> Path:
    """A CA (``ca.crt``), a broker key store (``broker.p12``, for 127.0.0.1 and localhost),
    a client certificate and key (``client.crt``, ``client.key``), and a second CA that
    signed nothing the broker trusts (``other-ca.crt``) plus a client of it
    (``stranger.crt``/``.key``), under ``directory``; returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key",
                 "-out", f"{ca}.crt", "-days", "2", "-subj", f"/CN=trident-test-{ca}",
                 cwd=directory)  # fmt: skip
    _signed("broker", "/CN=localhost", "ca", directory, "IP:127.0.0.1,DNS:localhost")
    _signed("client", f"/CN={USER}", "ca", directory)
    _signed("stranger", "/CN=stranger", "other-ca", directory)
    _openssl("pkcs12", "-export", "-in", "broker.crt", "-inkey", "broker.key", "-certfile",
             "ca.crt", "-name", "broker", "-out", "broker.p12", "-passout",
             f"pass:{_STORE_PASSWORD}", cwd=directory)  # fmt: skip
    _openssl("pkcs12", "-export", "-in", "client.crt", "-inkey", "client.key", "-name",
             "client", "-out", "client.p12", "-passout", f"pass:{PASSWORD}",
             cwd=directory)  # fmt: skip
    return directory


class _SecuredNode(KafkaClusterNode):
    def __init__(self, workdir: Path, tls: Path) -> None:
        port, controller, self.ssl_port, self.sasl_ssl_port, self.oauth_port = free_ports(5)
        super().__init__(workdir, 1, port, controller, f"1@127.0.0.1:{controller}", _cluster_id())
        self.tls = tls

    def _listeners(self) -> dict[str, tuple[str, int]]:
        return {"SSL": ("SSL", self.ssl_port), "SASL_SSL": ("SASL_SSL", self.sasl_ssl_port),
                "OAUTH": ("SASL_PLAINTEXT", self.oauth_port)}  # fmt: skip

    def _extra_properties(self) -> str:
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        plain = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                 f'user_{USER}="{PASSWORD}";')  # fmt: skip
        oauth = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                 'required unsecuredLoginStringClaim_sub="broker";')  # fmt: skip
        return (
            f"ssl.keystore.location={self.tls / 'broker.p12'}\n"
            "ssl.keystore.type=PKCS12\n"
            f"ssl.keystore.password={_STORE_PASSWORD}\n"
            f"ssl.key.password={_STORE_PASSWORD}\n"
            f"ssl.truststore.location={self.tls / 'ca.crt'}\n"
            "ssl.truststore.type=PEM\n"
            "listener.name.ssl.ssl.client.auth=required\n"
            "listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512\n"
            f"listener.name.sasl_ssl.plain.sasl.jaas.config={plain}\n"
            f"listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config={scram}\n"
            f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={scram}\n"
            "listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER\n"
            f"listener.name.oauth.oauthbearer.sasl.jaas.config={oauth}\n"
        )

    def _format_args(self) -> list[str]:
        users = [f"{kind}=[name={USER},password={PASSWORD}]"
                 for kind in ("SCRAM-SHA-256", "SCRAM-SHA-512")]  # fmt: skip
        return [arg for user in users for arg in ("--add-scram", user)]


class SecuredKafka(PrivateBroker):
    """One broker (KRaft, combined controller) under ``<workdir>/secured_kafka`` with the
    listeners of the module docs; TLS material under ``<workdir>/tls``."""

    kind = "secured broker"

    def __init__(self, workdir: str | Path) -> None:
        base = Path(workdir).resolve()
        self.tls = make_tls(base / "tls")
        self.node: _SecuredNode = _SecuredNode(base / "secured_kafka", self.tls)
        super().__init__(self.node)

    def config(self, mechanism: str, *, bad: str | None = None) -> dict[str, Any]:
        """The librdkafka settings (a ``kafka`` connection's extra) of ``mechanism`` (one of
        :data:`MECHANISMS`, or ``"pkcs12"``: mutual TLS with a PKCS#12 key store); ``bad``:
        ``"password"`` (a wrong one), ``"ca"`` (a CA that did not sign the broker's
        certificate) or ``"client-cert"`` (mutual TLS without a client certificate)."""
        ca = str(self.tls / ("other-ca.crt" if bad == "ca" else "ca.crt"))
        password = "not-" + PASSWORD if bad == "password" else PASSWORD
        if mechanism in ("mtls", "pkcs12"):
            out: dict[str, Any] = {
                "bootstrap.servers": f"127.0.0.1:{self.node.ssl_port}",
                "security.protocol": "SSL",
                "ssl.ca.location": ca,
            }
            if bad != "client-cert" and mechanism == "mtls":
                out["ssl.certificate.location"] = str(self.tls / "client.crt")
                out["ssl.key.location"] = str(self.tls / "client.key")
            elif bad != "client-cert":
                out["ssl.keystore.location"] = str(self.tls / "client.p12")
                out["ssl.keystore.password"] = PASSWORD
            return out
        if mechanism == "oauthbearer":
            return {
                "bootstrap.servers": f"127.0.0.1:{self.node.oauth_port}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "OAUTHBEARER",
                "enable.sasl.oauthbearer.unsecure.jwt": "true",
                "sasl.oauthbearer.config": f"principal={USER}",
            }
        return {
            "bootstrap.servers": f"127.0.0.1:{self.node.sasl_ssl_port}",
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": ca,
            "sasl.mechanism": mechanism.upper(),
            "sasl.username": USER,
            "sasl.password": password,
        }


def unsecured_token(config: str) -> tuple[str, float]:
    """An ``oauth_cb`` (allow-listed by tests in ``[apache_kafka] callback_allowlist``): an
    unsigned JWT for :data:`USER`, which the broker's unsecured OAUTHBEARER validator takes,
    valid for an hour; ``config`` is librdkafka's ``sasl.oauthbearer.config`` (unused)."""
    import base64
    import json
    import time

    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    now = time.time()
    claims = {"sub": USER, "iat": int(now), "exp": int(now) + 3600}
    token = f"{part({'alg': 'none'})}.{part(claims)}."
    return token, now + 3600
