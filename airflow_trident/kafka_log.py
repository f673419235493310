"""librdkafka's log and errors through Python, at a sane rate: every client of ours (the spouts'
consumers and admin clients, the sink's producer and reader) gets a :class:`ClientLog` as its
``logger`` and ``error_cb`` (:func:`watched`).

* **Log**: librdkafka writes a line per retry to stderr while a broker is unreachable or refuses
  the client (hundreds a second with a short reconnect backoff). Here each kind of line (its
  text with numbers taken out: ``after 301ms``, ports, counts) goes to the logger
  ``airflow_trident.kafka`` once per client; a repeat is counted, and the count is logged when
  the client is closed (:meth:`ClientLog.close`).
* **Errors**: the client's errors are kept (:attr:`ClientLog.errors`), so a call that failed can
  say why -- an authentication or TLS failure (:func:`security_failure`) instead of "did not
  answer".

>>> log = ClientLog("Kafka connection 'k'")
>>> log.log(3, "%s [%s] %s", "FAIL", "rdkafka#consumer-1",
...         "b:9093/bootstrap: SASL authentication error: Invalid password (after 301ms)")
>>> log.log(3, "%s [%s] %s", "FAIL", "rdkafka#consumer-1",
...         "b:9093/bootstrap: SASL authentication error: Invalid password (after 299ms)")
>>> log.repeats
{'FAIL b:#/bootstrap: SASL authentication error: Invalid password (after #ms)': 1}
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["ClientLog", "security_failure", "watched"]

LOGGER = logging.getLogger("airflow_trident.kafka")
_NUMBERS = re.compile(r"\d+")
_SYSLOG = {0: logging.CRITICAL, 1: logging.CRITICAL, 2: logging.CRITICAL, 3: logging.ERROR,
           4: logging.WARNING, 5: logging.INFO, 6: logging.INFO, 7: logging.DEBUG}  # fmt: skip


class ClientLog:
    """A librdkafka client's ``logger`` (an object with ``log(level, fmt, *args)``, as
    confluent-kafka calls it) and ``error_cb``, for one client named ``connection`` in lines."""

    def __init__(self, connection: str) -> None:
        self.connection = connection
        self.errors: list[Any] = []
        """The client's ``KafkaError`` s, oldest first (at most 50)."""
        self.repeats: dict[str, int] = {}
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def log(self, level: int, msg: str, *args: Any) -> None:
        """A librdkafka log line (syslog ``level``): logged once per kind, repeats counted."""
        text = msg % args if args else msg
        fac, _, rest = text.partition(" ")
        _, _, line = rest.partition("] ")
        kind = f"{fac} {_NUMBERS.sub('#', line or rest)}"
        with self._lock:
            if kind in self._seen:
                self.repeats[kind] = self.repeats.get(kind, 0) + 1
                return
            self._seen.add(kind)
        LOGGER.log(_SYSLOG.get(level, logging.INFO), "%s: librdkafka %s %s", self.connection,
                   fac, line or rest)  # fmt: skip

    def error(self, error: Any) -> None:
        """``error_cb``: keep the error (lines come through :meth:`log`)."""
        with self._lock:
            if len(self.errors) < 50:
                self.errors.append(error)

    def close(self) -> None:
        """Log how often each kind of line repeated (once), then forget them."""
        with self._lock:
            repeats, self.repeats = self.repeats, {}
        for kind, count in repeats.items():
            LOGGER.info("%s: librdkafka repeated %d more times: %s", self.connection, count, kind)


def watched(config: Mapping[str, Any], connection: str) -> tuple[dict[str, Any], ClientLog]:
    """``config`` with a :class:`ClientLog` as its ``logger`` and ``error_cb`` (a user's own
    ``logger``/``error_cb`` is kept: then errors are not classified), and that log."""
    log = ClientLog(connection)
    out = dict(config)
    out.setdefault("logger", log)
    out.setdefault("error_cb", log.error)
    return out, log


def security_failure(errors: list[Any], config: Mapping[str, Any], connection: str) -> str | None:
    """The message of an authentication or TLS failure among a client's ``errors`` (naming
    ``connection``, the security protocol and the SASL mechanism, never a secret), else
    ``None``.

    >>> class E:
    ...     def __init__(self, name, text): self._n, self._t = name, text
    ...     def name(self): return self._n
    ...     def str(self): return self._t
    >>> security_failure([E("_ALL_BROKERS_DOWN", "1/1 brokers are down")], {}, "c") is None
    True
    >>> said = security_failure([E("_AUTHENTICATION", "SASL authentication error: bad")],
    ...     {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}, "conn 'k'")
    >>> said.split(": ")[:2]
    ["conn 'k'", "Kafka refused the client's SASL authentication (security.protocol SASL_SSL, ..."]
    """
    protocol = str(config.get("security.protocol", "PLAINTEXT")).upper()
    mechanism = config.get("sasl.mechanism") or config.get("sasl.mechanisms")
    said = f"security.protocol {protocol}" + (f", sasl.mechanism {mechanism}" if mechanism else "")
    for error in errors:
        name, text = error.name(), error.str()
        if name == "_AUTHENTICATION" or "SASL" in text:
            return (
                f"{connection}: Kafka refused the client's SASL authentication ({said}): "
                f"{text}. Hint: check the connection's sasl.username and sasl.password (and "
                f"that the user exists for this mechanism)"
            )
        if name == "_SSL" or "SSL" in text or "certificate" in text:
            return (
                f"{connection}: the TLS handshake with Kafka failed ({said}): {text}. Hint: "
                f"ssl.ca.location must name the CA that signed the brokers' certificates, and "
                f"a listener that requires client certificates needs ssl.certificate.location "
                f"and ssl.key.location (or ssl.keystore.location)"
            )
    return None
