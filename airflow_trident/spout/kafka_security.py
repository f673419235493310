"""A Kafka connection's librdkafka settings as the Java client's, for Spark's Kafka connector
(``spark.read.format("kafka")``'s ``kafka.*`` options): one place that knows both clients'
names, so a secured cluster is read alike by the in-process client, the Spark driver's read and
Spark's connector -- or refused at begin, naming the setting and the path, never dropped.

What each librdkafka setting becomes (docs/security.md has the table with the tests):

* **TLS**: ``security.protocol`` (upper-cased); ``ssl.ca.location`` / ``ssl.ca.pem`` become a
  PEM trust store *carried in the option* (``kafka.ssl.truststore.certificates``: a Spark
  executor on another machine has no copy of the worker's files); a client certificate
  (``ssl.certificate.location`` / ``.pem`` with ``ssl.key.location`` / ``.pem``, or a PKCS#12
  ``ssl.keystore.location`` with ``ssl.keystore.password``) becomes a PEM key store the same way
  (``kafka.ssl.keystore.certificate.chain`` and ``kafka.ssl.keystore.key``: the key as PKCS#8,
  which Java's PEM key store requires); ``ssl.endpoint.identification.algorithm=none`` becomes
  Java's empty value. ``ssl.ca.location=probe`` means the system's CAs: Java's default trust
  store.
* **SASL**: ``sasl.mechanism`` (or ``sasl.mechanisms``) as given; PLAIN and SCRAM-SHA-256/512
  take ``sasl.username``/``sasl.password`` into the JAAS line of their login module; GSSAPI
  takes ``sasl.kerberos.service.name`` and a ``Krb5LoginModule`` line (``sasl.kerberos.keytab``
  and ``sasl.kerberos.principal``, else the ticket cache); OAUTHBEARER takes OIDC
  (``sasl.oauthbearer.method=oidc``: client id and secret, token endpoint, scope) to Java's
  ``OAuthBearerLoginCallbackHandler``, or the unsecured JWT of ``sasl.oauthbearer.config``
  (``principal=...``) to the unsecured login module's claims.
* **Settings of the in-process client only** (:data:`IN_PROCESS_ONLY`: logging, statistics,
  librdkafka's own reconnect and kinit mechanics, the consumer group we set ourselves) are not
  carried: they change nothing of what a read returns.
* **Settings Spark's connector cannot carry** (:data:`NOT_CARRIED`: a Python callback such as
  ``oauth_cb``, turning certificate verification off, OpenSSL cipher or curve lists, engines,
  CRLs) raise :class:`~airflow_trident.errors.ConfigurationError` naming the key and the path,
  unless the spout's ``spark_kafka_options`` gives the connector's settings itself.
* Every other key is the same name in both clients (``client.id``, ``request.timeout.ms``...)
  and is passed on as ``kafka.<key>``.

>>> java = java_settings({"bootstrap.servers": "b:9093", "security.protocol": "sasl_ssl",
...                        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "etl",
...                        "sasl.password": "s3cret", "debug": "all"})
>>> sorted(java)
['bootstrap.servers', 'sasl.jaas.config', 'sasl.mechanism', 'security.protocol']
>>> java["sasl.jaas.config"].split(" required ")
['org.apache.kafka.common.security.scram.ScramLoginModule', 'username="etl" password="s3cret";']
>>> java_settings({"bootstrap.servers": "b:9093", "oauth_cb": "my.pkg.token"})
Traceback (most recent call last):
...
airflow_trident.errors.ConfigurationError: oauth_cb of the Kafka connection cannot be ...
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_trident.errors import ConfigurationError

__all__ = ["IN_PROCESS_ONLY", "NOT_CARRIED", "java_settings", "not_carried", "spark_settings"]

IN_PROCESS_ONLY = frozenset({
    "debug", "log_level", "log.queue", "log.thread.name", "log.connection.close", "logger",
    "log_cb", "error_cb", "stats_cb", "throttle_cb", "on_commit", "statistics.interval.ms",
    "enable.random.seed", "api.version.request", "api.version.fallback.ms",
    "broker.version.fallback", "socket.keepalive.enable", "socket.nagle.disable",
    "topic.metadata.refresh.interval.ms", "topic.metadata.refresh.sparse",
    "reconnect.backoff.jitter.ms", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.min.time.before.relogin", "group.id", "group.instance.id",
    "enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset",
    "enable.partition.eof", "isolation.level", "queued.min.messages",
    "queued.max.messages.kbytes", "fetch.wait.max.ms", "fetch.error.backoff.ms",
    "enable.sasl.oauthbearer.unsecure.jwt", "sasl.oauthbearer.method",
    "client.dns.lookup",
    # a producer's (the Kafka provider's produce operator shares the connection): not a read's
    "acks", "request.required.acks", "linger.ms", "queue.buffering.max.ms",
    "queue.buffering.max.messages", "queue.buffering.max.kbytes", "batch.size",
    "batch.num.messages", "compression.type", "compression.codec", "compression.level",
    "enable.idempotence", "transactional.id", "transaction.timeout.ms", "message.timeout.ms",
    "delivery.timeout.ms", "retries", "message.send.max.retries", "retry.backoff.ms",
    "max.in.flight", "max.in.flight.requests.per.connection", "partitioner",
    "sticky.partitioning.linger.ms",
})  # fmt: skip
"""librdkafka settings that shape only the in-process client (its logs, its retries, its
group, which our reads never use) or only a producer: not given to Spark's connector."""

NOT_CARRIED = {
    "oauth_cb": "a Python callable; the JVM client cannot call it",
    "enable.ssl.certificate.verification": "the JVM client has no switch to skip verifying "
    "the broker's certificate",
    "ssl.cipher.suites": "OpenSSL's cipher names are not the JVM's",
    "ssl.curves.list": "OpenSSL's curve names are not the JVM's",
    "ssl.sigalgs.list": "OpenSSL's signature algorithm names are not the JVM's",
    "ssl.engine.location": "an OpenSSL engine",
    "ssl.engine.id": "an OpenSSL engine",
    "ssl_engine_callback_data": "an OpenSSL engine",
    "ssl.providers": "OpenSSL providers",
    "ssl.crl.location": "the JVM client has no CRL setting",
    "ssl_key": "an in-memory key object",
    "ssl_certificate": "an in-memory certificate object",
    "ssl.certificate.verify_cb": "a Python callable",
    "sasl.oauthbearer.assertion.algorithm": "JWT-bearer assertions have no JVM equivalent "
    "in the connector's kafka-clients",
}
"""librdkafka settings Spark's connector cannot carry, and why."""

_TRANSLATED = frozenset({
    "security.protocol", "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location",
    "ssl.certificate.pem", "ssl.key.location", "ssl.key.pem", "ssl.key.password",
    "ssl.keystore.location", "ssl.keystore.password", "ssl.endpoint.identification.algorithm",
    "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
    "sasl.kerberos.service.name", "sasl.kerberos.principal", "sasl.kerberos.keytab",
    "sasl.oauthbearer.config", "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.scope",
    "sasl.oauthbearer.extensions",
})  # fmt: skip

_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_OIDC_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
_KRB5 = "com.sun.security.auth.module.Krb5LoginModule"


def _quoted(value: Any) -> str:
    """A JAAS option value: a double-quoted string (JSON's escapes are JAAS's)."""
    return json.dumps(str(value))


def _refuse(key: str, why: str) -> ConfigurationError:
    msg = (
        f"{key} of the Kafka connection cannot be carried to Spark's Kafka connector ({why}), "
        f"which reads a batch whose ranges are larger than [trident] spark_read_here_records; "
        f"hint: give the spout spark_kafka_options with the Java client's settings for it "
        f"(e.g. kafka.sasl.login.callback.handler.class), or read such batches in process"
    )
    return ConfigurationError(msg)


def not_carried(config: Mapping[str, Any]) -> list[str]:
    """The keys of ``config`` that Spark's connector cannot carry (sorted).

    >>> not_carried({"enable.ssl.certificate.verification": "false", "ssl.crl.location": "x"})
    ['enable.ssl.certificate.verification', 'ssl.crl.location']
    >>> not_carried({"enable.ssl.certificate.verification": "true", "debug": "all"})
    []
    """
    out = []
    for key, value in config.items():
        if key == "enable.ssl.certificate.verification":
            if str(value).lower() in ("false", "0"):
                out.append(key)
        elif key in IN_PROCESS_ONLY:
            continue
        elif key in NOT_CARRIED or key.endswith("_cb") or callable(value):
            out.append(key)
    return sorted(out)


def _read(path: str, key: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"{key} of the Kafka connection: cannot read {path!r} ({exc.strerror})"
        raise ConfigurationError(msg) from None


def _pem(config: Mapping[str, Any], name: str) -> str | None:
    """``ssl.<name>.pem``, else the file of ``ssl.<name>.location``, else ``None``."""
    if config.get(f"ssl.{name}.pem"):
        return str(config[f"ssl.{name}.pem"])
    location = config.get(f"ssl.{name}.location")
    if location and not (name == "ca" and str(location) == "probe"):
        return _read(str(location), f"ssl.{name}.location")
    return None


def _pkcs8(key_pem: str, password: str | None) -> str:
    """``key_pem`` as PKCS#8 (Java's PEM key store reads no other form), encrypted again with
    ``password`` when it was encrypted."""
    if "BEGIN PRIVATE KEY" in key_pem or "BEGIN ENCRYPTED PRIVATE KEY" in key_pem:
        return key_pem
    from cryptography.hazmat.primitives import serialization

    secret = None if password is None else password.encode()
    key = serialization.load_pem_private_key(key_pem.encode(), secret)
    encryption: serialization.KeySerializationEncryption = (
        serialization.NoEncryption()
        if secret is None
        else serialization.BestAvailableEncryption(secret)
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    ).decode()


def _pkcs12(path: str, password: str | None) -> tuple[str, str]:
    """The certificate chain and the PKCS#8 key of a PKCS#12 key store file, as PEM."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        msg = (f"ssl.keystore.location of the Kafka connection: cannot read {path!r} "
               f"({exc.strerror})")  # fmt: skip
        raise ConfigurationError(msg) from None
    try:
        key, cert, chain = pkcs12.load_key_and_certificates(
            data, None if password is None else password.encode()
        )
    except ValueError:
        msg = ("ssl.keystore.location of the Kafka connection: not a PKCS#12 key store, or "
               "ssl.keystore.password does not open it")  # fmt: skip
        raise ConfigurationError(msg) from None
    if key is None or cert is None:
        msg = "ssl.keystore.location of the Kafka connection holds no key and certificate"
        raise ConfigurationError(msg)
    pem = serialization.Encoding.PEM
    certs = "".join(c.public_bytes(pem).decode() for c in [cert, *(chain or [])])
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()  # fmt: skip
    return certs, key_pem


def _tls(config: Mapping[str, Any], out: dict[str, str]) -> None:
    ca = _pem(config, "ca")
    if ca is not None:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.certificates"] = ca
    password = config.get("ssl.key.password")
    chain: str | None
    key: str | None
    if config.get("ssl.keystore.location"):
        store_password = config.get("ssl.keystore.password")
        chain, key = _pkcs12(str(config["ssl.keystore.location"]),
                             None if store_password is None else str(store_password))  # fmt: skip
        password = None
    else:
        chain_pem, key_pem = _pem(config, "certificate"), _pem(config, "key")
        if (chain_pem is None) != (key_pem is None):
            msg = ("the Kafka connection gives a client certificate without its key, or a "
                   "key without its certificate (ssl.certificate.* and ssl.key.* go "
                   "together)")  # fmt: skip
            raise ConfigurationError(msg)
        if chain_pem is None or key_pem is None:
            chain = key = None
        else:
            chain = chain_pem
            key = _pkcs8(key_pem, None if password is None else str(password))
    if chain is not None and key is not None:
        out["ssl.keystore.type"] = "PEM"
        out["ssl.keystore.certificate.chain"] = chain
        out["ssl.keystore.key"] = key
        if password is not None:
            out["ssl.key.password"] = str(password)
    algorithm = config.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = (
            "" if str(algorithm).lower() == "none" else str(algorithm)
        )


def _oauth(config: Mapping[str, Any], out: dict[str, str]) -> str:
    """The JAAS line of OAUTHBEARER (and the OIDC handler's settings into ``out``)."""
    if str(config.get("sasl.oauthbearer.method", "default")).lower() == "oidc":
        out["sasl.login.callback.handler.class"] = _OIDC_HANDLER
        if config.get("sasl.oauthbearer.token.endpoint.url"):
            out["sasl.oauthbearer.token.endpoint.url"] = str(
                config["sasl.oauthbearer.token.endpoint.url"]
            )
        client = config.get("sasl.oauthbearer.client.id", "")
        secret = config.get("sasl.oauthbearer.client.secret", "")
        options = [f"clientId={_quoted(client)}", f"clientSecret={_quoted(secret)}"]
        if config.get("sasl.oauthbearer.scope"):
            options.append(f"scope={_quoted(config['sasl.oauthbearer.scope'])}")
        extensions = str(config.get("sasl.oauthbearer.extensions") or "")
        for pair in filter(None, extensions.split(",")):
            name, _, value = pair.partition("=")
            options.append(f"extension_{name.strip()}={_quoted(value.strip())}")
        return f"{_OAUTH} required {' '.join(options)};"
    # librdkafka's unsecured JWT: "principal=<p> [scope=<s>] [lifeSeconds=<n>]"
    claims = dict(
        item.partition("=")[::2] for item in str(config.get("sasl.oauthbearer.config", "")).split()
    )
    options = []
    if claims.get("principal"):
        options.append(f"unsecuredLoginStringClaim_sub={_quoted(claims['principal'])}")
    if claims.get("lifeSeconds"):
        options.append(f"unsecuredLoginLifetimeSeconds={_quoted(claims['lifeSeconds'])}")
    if claims.get("scope"):
        options.append(f"unsecuredLoginListClaim_scope={_quoted(claims['scope'])}")
    return f"{_OAUTH} required{''.join(' ' + o for o in options)};"


def _sasl(config: Mapping[str, Any], out: dict[str, str]) -> None:
    mechanism = config.get("sasl.mechanism") or config.get("sasl.mechanisms")
    if not mechanism:
        if config.get("sasl.username") is not None:
            mechanism = "PLAIN"  # librdkafka's default mechanism
        else:
            return
    mechanism = str(mechanism).upper()
    out["sasl.mechanism"] = mechanism
    if mechanism in _MODULES:
        user = _quoted(config.get("sasl.username", ""))
        password = _quoted(config.get("sasl.password", ""))
        out["sasl.jaas.config"] = (
            f"{_MODULES[mechanism]} required username={user} password={password};"
        )
    elif mechanism == "GSSAPI":
        out["sasl.kerberos.service.name"] = str(config.get("sasl.kerberos.service.name", "kafka"))
        keytab = config.get("sasl.kerberos.keytab")
        principal = config.get("sasl.kerberos.principal")
        options = (
            f"useKeyTab=true storeKey=true keyTab={_quoted(keytab)}"
            if keytab
            else "useTicketCache=true"
        )
        if principal:
            options += f" principal={_quoted(principal)}"
        out["sasl.jaas.config"] = f"{_KRB5} required {options};"
    elif mechanism == "OAUTHBEARER":
        out["sasl.jaas.config"] = _oauth(config, out)
    else:
        msg = (f"sasl.mechanism {mechanism!r} of the Kafka connection is none of PLAIN, "
               f"SCRAM-SHA-256, SCRAM-SHA-512, GSSAPI and OAUTHBEARER")  # fmt: skip
        raise ConfigurationError(msg)


def java_settings(config: Mapping[str, Any]) -> dict[str, str]:
    """The Java client's settings (unprefixed) for librdkafka ``config`` (see the module docs).

    Raises
    ------
    ConfigurationError
        For a setting the JVM client cannot carry, naming it and the path; for TLS files that
        cannot be read; for an unknown SASL mechanism.
    """
    refused = not_carried(config)
    if refused:
        key = refused[0]
        why = NOT_CARRIED.get(key) or "a Python callable; the JVM client cannot call it"
        raise _refuse(key, why)
    out: dict[str, str] = {}
    for key, value in config.items():
        if key in IN_PROCESS_ONLY or key in _TRANSLATED or callable(value):
            continue
        out[key] = str(value)
    protocol = config.get("security.protocol")
    if protocol is not None:
        out["security.protocol"] = str(protocol).upper()
    _tls(config, out)
    _sasl(config, out)
    return dict(sorted(out.items()))


def spark_settings(
    config: Mapping[str, Any], given: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Spark's ``kafka.*`` options for ``config``: :func:`java_settings` prefixed, then the
    spout's own ``spark_kafka_options`` (``given``) over them; with ``given``, settings the
    connector cannot carry are left to it (the user gave the connector's own).

    >>> spark_settings({"bootstrap.servers": "b:1", "oauth_cb": "x.y"},
    ...                {"kafka.sasl.mechanism": "OAUTHBEARER"})
    {'kafka.bootstrap.servers': 'b:1', 'kafka.sasl.mechanism': 'OAUTHBEARER'}
    """
    if given:
        config = {k: v for k, v in config.items() if k not in not_carried(config)}
    out = {f"kafka.{k}": v for k, v in java_settings(config).items()}
    for key, value in (given or {}).items():
        if not key.startswith("kafka."):
            msg = f"spark_kafka_options: {key!r} is not a kafka.* option of Spark's connector"
            raise ConfigurationError(msg)
        out[key] = str(value)
    return out
