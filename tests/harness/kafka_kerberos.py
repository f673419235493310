"""A private single Kafka broker with a Kerberos (``SASL_PLAINTEXT``/``GSSAPI``) listener, its
principal and keytab from a project-local MIT KDC (:class:`tests.harness.kerberos.MitKdc`).

Listeners on free loopback ports: the broker's own ``PLAINTEXT`` (the tests' producer and admin
calls: the wheel's librdkafka has no GSSAPI) and ``KERBEROS`` (``SASL_PLAINTEXT``, mechanism
``GSSAPI``), advertised as ``localhost``: a Kerberos client builds the service principal from
the service name and the host it connects to, and the broker's principal is
:data:`~tests.harness.kerberos.BROKER` (``kafka/localhost@TRIDENT.TEST``). The broker's JVM reads
the KDC's ``krb5.conf`` (``-Djava.security.krb5.conf``).

:meth:`KerberizedKafka.config` gives the librdkafka settings a user writes in a ``kafka``
connection's extra for it (keytab and principal of :data:`~tests.harness.kerberos.CLIENT`).

Example (a KDC, ~0.2 s, then one JVM, ~10 s)::

    with MitKdc(tmp_path) as kdc, KerberizedKafka(tmp_path, kdc) as kafka:
        create_topic(kafka.plaintext, "t")
        spark_options(kafka.config(), "read_committed")  # kafka.sasl.jaas.config: Krb5LoginModule
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.harness.kafka import KafkaClusterNode, PrivateBroker, _cluster_id
from tests.harness.kerberos import BROKER, CLIENT, MitKdc
from tests.harness.ports import free_ports

__all__ = ["KerberizedKafka"]

_KRB5 = "com.sun.security.auth.module.Krb5LoginModule"
_LISTENER = "KERBEROS"


class _KerberosNode(KafkaClusterNode):
    def __init__(self, workdir: Path, kdc: MitKdc) -> None:
        port, controller, self.kerberos_port = free_ports(3)
        super().__init__(workdir, 1, port, controller, f"1@127.0.0.1:{controller}", _cluster_id())
        self.kdc = kdc

    def _java(self) -> list[str]:
        java, *rest = super()._java()
        # the KDC's realm and address (not /etc/krb5.conf); a JVM property, before the class path
        return [java, f"-Djava.security.krb5.conf={self.kdc.krb5_conf}", *rest]

    def _listeners(self) -> dict[str, tuple[str, int]]:
        return {_LISTENER: ("SASL_PLAINTEXT", self.kerberos_port)}

    def _extra_properties(self) -> str:
        name = _LISTENER.lower()
        jaas = (f'{_KRB5} required useKeyTab=true storeKey=true '
                f'keyTab="{self.kdc.keytab(BROKER)}" principal="{BROKER}";')  # fmt: skip
        return (
            f"listener.name.{name}.sasl.enabled.mechanisms=GSSAPI\n"
            f"listener.name.{name}.gssapi.sasl.jaas.config={jaas}\n"
            "sasl.kerberos.service.name=kafka\n"
        )

    def _prepare(self) -> None:
        super()._prepare()
        # Advertise the Kerberos listener as localhost (bound to 127.0.0.1 still): the client's
        # service principal is kafka/<the advertised host>.
        properties = self.workdir / "server.properties"
        text = properties.read_text()
        bound = f"{_LISTENER}://127.0.0.1:{self.kerberos_port}"
        head, _, tail = text.partition("advertised.listeners=")
        line, _, rest = tail.partition("\n")
        line = line.replace(bound, f"{_LISTENER}://localhost:{self.kerberos_port}")
        properties.write_text(f"{head}advertised.listeners={line}\n{rest}")


class KerberizedKafka(PrivateBroker):
    """One broker (KRaft, combined controller) under ``<workdir>/kerberized_kafka`` whose
    ``KERBEROS`` listener authenticates with ``kdc``'s principals (the KDC must run)."""

    kind = "Kerberos broker"

    def __init__(self, workdir: str | Path, kdc: MitKdc) -> None:
        self.kdc = kdc
        node = _KerberosNode(Path(workdir).resolve() / "kerberized_kafka", kdc)
        super().__init__(node)
        self.kerberos = f"localhost:{node.kerberos_port}"

    def config(self, principal: str = CLIENT) -> dict[str, Any]:
        """The librdkafka settings (a ``kafka`` connection's extra) of the Kerberos listener
        for ``principal`` with its keytab."""
        return {
            "bootstrap.servers": self.kerberos,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "GSSAPI",
            "sasl.kerberos.service.name": "kafka",
            "sasl.kerberos.keytab": str(self.kdc.keytab(principal)),
            "sasl.kerberos.principal": principal,
        }
