"""A private ZooKeeper that only speaks TLS and SASL (DIGEST-MD5), for the security tests.

Certificates come from a throwaway CA made with ``cryptography``; the server reads PEM files
(ZooKeeper >= 3.6) and serves TLS on ``secure_port`` through Netty, keeps a plain port only for
``ruok`` (readiness), and closes every session that does not authenticate with SASL.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.harness.servers import PrivateZooKeeper, free_port

SASL_USER = "etl"
SASL_PASSWORD = "Sasl-Pa55-never-shown"
_NETTY = [f"/usr/share/java/netty-{name}.jar" for name in (
    "buffer", "codec", "common", "handler", "resolver", "transport",
    "transport-native-epoll", "transport-native-unix-common",
)]  # fmt: skip


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_certificates(directory: Path) -> dict[str, Path]:
    """A CA (``ca.pem``) and a server certificate for 127.0.0.1/localhost it signed
    (``server.pem``: key then certificate)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("trident test CA"))
        .issuer_name(_name("trident test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    paths = {"ca": directory / "ca.pem", "server": directory / "server.pem"}
    paths["ca"].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths["server"].write_bytes(_key_pem(key) + cert.public_bytes(serialization.Encoding.PEM))
    return paths


class SecureZooKeeper(PrivateZooKeeper):
    """TLS on ``secure_port`` and SASL DIGEST-MD5 (user :data:`SASL_USER`) required."""

    kind = "ZooKeeper (TLS, SASL)"

    def __init__(self, workdir: str | Path) -> None:
        super().__init__(workdir)
        self.secure_port = free_port()
        self.secure_hosts = f"127.0.0.1:{self.secure_port}"
        self.certificates: dict[str, Path] = {}

    def _prepare(self) -> None:
        super()._prepare()
        self.certificates = make_certificates(self.workdir / "tls")
        (self.workdir / "jaas.conf").write_text(
            "Server {\n"
            "  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
            f'  user_{SASL_USER}="{SASL_PASSWORD}";\n'
            "};\n"
        )
        with (self.workdir / "zoo.cfg").open("a") as cfg:
            cfg.write(
                "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n"
                f"secureClientPort={self.secure_port}\n"
                f"ssl.keyStore.location={self.certificates['server']}\n"
                "ssl.keyStore.type=PEM\n"
                f"ssl.trustStore.location={self.certificates['ca']}\n"
                "ssl.trustStore.type=PEM\n"
                "ssl.clientAuth=none\n"
                "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n"
                "sessionRequireClientSASLAuth=true\n"
            )

    def _command(self) -> tuple[list[str], dict[str, Any]]:
        args, options = super()._command()
        classpath_at = args.index("-cp") + 1
        extra = [jar for jar in _NETTY if Path(jar).exists()]
        args[classpath_at] = os.pathsep.join([args[classpath_at], *extra])
        args[classpath_at:classpath_at] = []
        args.insert(1, f"-Djava.security.auth.login.config={self.workdir / 'jaas.conf'}")
        args.insert(1, "-Dzookeeper.sessionRequireClientSASLAuth=true")
        return args, options


def available() -> bool:
    return shutil.which("java") is not None and Path("/usr/share/java/netty-handler.jar").exists()
