"""The Kafka spouts' broker calls, with confluent-kafka (the Airflow Kafka provider's client):
partition discovery, watermarks, offsets by timestamp and the in-process read of an offset
range (``assign`` + ``seek``, ``read_committed``, no consumer group commits).

Every call takes the librdkafka ``config`` (the ``kafka`` connection's extra): it holds SASL/SSL
secrets, so it is never logged and errors name only ``bootstrap.servers``.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_trident.connections import kafka_client_settings
from airflow_trident.errors import (
    ConfigurationError,
    KafkaSecurityError,
    SpoutEmitError,
    SpoutUnavailableError,
)
from airflow_trident.kafka_log import security_failure, watched

__all__ = [
    "Span",
    "SpansRead",
    "Watermarks",
    "consumer",
    "discover",
    "offsets_for_time",
    "read_range",
    "watermarks",
]

DEFAULT_CONN_ID = "kafka_default"
"""The connection a spout or sink without ``kafka_config_id`` or ``config`` uses: the Kafka
provider's default (``KafkaBaseHook.default_conn_name``)."""

Watermarks = tuple[int, int]
"""``(low, high)``: the first offset the broker holds and the end of what a reader of the
spout's isolation level may read (``read_committed``: the last stable offset)."""


def _client_config(config: Mapping[str, str], isolation: str | None = None) -> dict[str, Any]:
    out = kafka_client_settings(config)
    out.setdefault("group.id", f"trident-{uuid.uuid4().hex[:12]}")  # librdkafka needs one
    out["enable.auto.commit"] = False
    out["enable.partition.eof"] = True
    out["auto.offset.reset"] = "error"
    if isolation is not None:
        out["isolation.level"] = isolation
    return out


_MECHANISMS_HERE: dict[str, str | None] = {}
"""SASL mechanism -> why this process's librdkafka cannot use it (``None``: it can)."""


def check_client(config: Mapping[str, Any], connection: str) -> None:
    """Refuse settings the in-process client (confluent-kafka's librdkafka) cannot carry, at
    begin, naming ``connection`` and the path: a SASL mechanism this build lacks (the wheel's
    librdkafka has no GSSAPI: it is built without libsasl2).

    Raises
    ------
    ConfigurationError
        Naming the setting, the path and the librdkafka message.
    """
    mechanism = str(config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "").upper()
    if not mechanism or mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"):
        return
    if mechanism not in _MECHANISMS_HERE:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        probe: dict[str, str | int | float | bool] = {
            "bootstrap.servers": "127.0.0.1:9", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
        }  # fmt: skip
        try:
            AdminClient(probe)
            _MECHANISMS_HERE[mechanism] = None
        except KafkaException as exc:
            _MECHANISMS_HERE[mechanism] = str(exc.args[0].str() if exc.args else exc)
    why = _MECHANISMS_HERE[mechanism]
    if why is not None:
        msg = (
            f"{connection}: sasl.mechanism {mechanism} cannot be used by the in-process Kafka "
            f"client (confluent-kafka's librdkafka, which plans every batch and reads small "
            f"ones): {why}. Hint: install confluent-kafka built against a librdkafka with "
            f"libsasl2 (docs/security.md, \"Kerberos\")"
        )
        raise ConfigurationError(msg)


def _servers(config: Mapping[str, str]) -> str:
    return str(config.get("bootstrap.servers", "?"))


def consumer(
    config: Mapping[str, Any], isolation: str = "read_committed", connection: str | None = None
) -> Any:
    """A consumer that never commits offsets (a fresh ``group.id`` unless the config names
    one): its positions are the batch metadata's, in ZooKeeper. Its librdkafka log goes
    through Python logging (:mod:`~airflow_trident.kafka_log`)."""
    from confluent_kafka import Consumer

    settings, _ = watched(_client_config(config, isolation), connection or _named(config))
    return Consumer(settings)


def _named(config: Mapping[str, Any]) -> str:
    return f"Kafka at {_servers(config)}"


def _metadata(
    config: Mapping[str, Any], timeout_s: float, connection: str
) -> tuple[Any, str | None]:
    """The cluster's metadata, or ``None`` and why not: an authentication or TLS failure as
    soon as the client meets it, else that no broker answered in ``timeout_s``. The admin
    client is gone when this returns (a failed batch's client does not retry on)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    settings, log = watched(
        {k: v for k, v in kafka_client_settings(config).items() if k != "group.id"}, connection
    )
    try:
        admin = AdminClient(settings)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        text = error.str() if hasattr(error, "str") else str(error)
        msg = (f"{connection}: the Kafka client refuses the connection's settings: {text}; "
               f"nothing is committed. Hint: the extra holds librdkafka settings "
               f"(docs/security.md)")  # fmt: skip
        raise ConfigurationError(msg) from None
    deadline = time.monotonic() + timeout_s
    meta, why = None, None
    try:
        while meta is None:
            left = deadline - time.monotonic()
            try:
                meta = admin.list_topics(timeout=max(0.05, min(1.0, left)))
            except KafkaException as exc:
                admin.poll(0)  # serves the error and log callbacks
                why = security_failure(log.errors, config, connection)
                if why is not None or left <= 0:
                    why = why or (
                        f"{connection}: Kafka at {_servers(config)} did not answer a metadata "
                        f"request in {timeout_s:g}s ({exc.args[0].str() if exc.args else exc}); "
                        f"no batch can be planned and nothing is committed. Hint: check that "
                        f"the brokers run and the connection's bootstrap.servers"
                    )
                    break
    finally:
        del admin  # the client closes now, not when an exception's traceback goes
        log.close()
    return meta, why


def discover(
    config: Mapping[str, Any],
    topics: Sequence[str],
    pattern: str | None,
    timeout_s: float,
    connection: str | None = None,
) -> dict[str, dict[int, bool]]:
    """Topic -> partition -> whether it has a leader now, for ``topics`` and every topic
    matching ``pattern`` (a full match; topics starting with ``_`` only when named).
    ``connection`` names the settings in errors (default: the bootstrap servers).

    Raises
    ------
    KafkaSecurityError
        When the brokers refuse the client's authentication or TLS handshake.
    SpoutUnavailableError
        When no broker answers (nothing can be planned).
    ConfigurationError
        When a topic of ``topics`` does not exist (a typo is not an empty batch).
    """
    connection = connection or _named(config)
    meta, why = _metadata(config, timeout_s, connection)
    if meta is None:
        assert why is not None
        if "did not answer" in why:
            raise SpoutUnavailableError(why)
        raise KafkaSecurityError(why)
    wanted = set(topics)
    regex = re.compile(pattern) if pattern else None
    found: dict[str, dict[int, bool]] = {}
    for name, topic in meta.topics.items():
        if name not in wanted and not (
            regex is not None and not name.startswith("_") and regex.fullmatch(name)
        ):
            continue
        if topic.error is not None and not topic.partitions:
            continue  # being created or deleted
        found[name] = {int(p): int(info.leader) >= 0 for p, info in topic.partitions.items()}
    missing = sorted(wanted - set(meta.topics))
    if missing:
        import difflib

        names = [n for n in meta.topics if not n.startswith("_")]
        near = sorted({m for name in missing for m in difflib.get_close_matches(name, names, 3)})
        msg = (
            f"{connection}: topic{'s' if len(missing) > 1 else ''} "
            f"{', '.join(repr(m) for m in missing)} not on the cluster at {_servers(config)}; "
            f"no batch is begun and nothing is committed. Hint: check the name"
            f"{' (topics with a similar name: ' + ', '.join(near) + ')' if near else ''}, "
            f"create the topic, or give pattern= to wait for topics that do not exist yet"
        )
        raise ConfigurationError(msg)
    return found


def watermarks(
    reader: Any, topic: str, partitions: Iterable[int], timeout_s: float
) -> dict[int, Watermarks | None]:
    """``(low, high)`` of each partition (``high``: the last stable offset under
    ``read_committed``, as the consumer's isolation level says), or ``None`` when its leader
    does not answer in time."""
    from confluent_kafka import TopicPartition

    out: dict[int, Watermarks | None] = {}
    for partition in partitions:
        try:
            low, high = reader.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s, cached=False
            )
        except Exception:  # KafkaException: leader down, timed out
            out[partition] = None
            continue
        out[partition] = (int(low), int(high))
    return out


def offsets_for_time(
    reader: Any, topic: str, partitions: Iterable[int], timestamp_ms: int, timeout_s: float
) -> dict[int, int]:
    """The first offset at or after ``timestamp_ms`` of each partition (``-1``: none yet)."""
    from confluent_kafka import TopicPartition

    asked = [TopicPartition(topic, p, timestamp_ms) for p in partitions]
    found = reader.offsets_for_times(asked, timeout=timeout_s)
    return {int(tp.partition): int(tp.offset) for tp in found}


_FETCHED = 5000
"""Messages one ``consume`` call takes at most."""

Span = tuple[str, int, int, int]
"""``(topic, partition, first, end)``: offsets ``[first, end)`` of one topic partition."""


def read_range(
    config: Mapping[str, str],
    topic: str,
    partition: int,
    first: int,
    end: int,
    timeout_s: float,
    where: str,
    isolation: str = "read_committed",
) -> list[tuple[Any, ...]]:
    """The raw records of ``topic``'s ``partition`` at offsets ``[first, end)`` that a reader
    of ``isolation`` gets (see :mod:`~airflow_trident.spout.kafka_records`), in offset order:
    :func:`read_spans` of one range.

    Raises
    ------
    SpoutEmitError
        When offsets of the range are no longer held (retention): naming topic, partition
        and offsets (a transactional replay is never partial).
    SpoutUnavailableError
        When the partition's leader does not answer within ``timeout_s``.
    """
    span = (topic, partition, first, end)
    read = read_spans(config, [span], timeout_s, {span: where}, isolation)
    if read.error is not None:
        raise read.error
    return read.records[span]


@dataclass
class SpansRead:
    """What :func:`read_spans` read: the records of each range read to its end and, when one
    failed, that range (``failed``) and its error; ranges after it may be missing."""

    records: dict[Span, list[tuple[Any, ...]]]
    failed: Span | None = None
    error: SpoutEmitError | SpoutUnavailableError | None = None


def read_spans(
    config: Mapping[str, str],
    spans: Sequence[Span],
    timeout_s: float,
    where: Mapping[Span, str],
    isolation: str = "read_committed",
) -> SpansRead:
    """The raw records of each ``(topic, partition, first, end)`` of ``spans`` (at most one
    per partition), in offset order, read by one consumer assigned to all of them: one
    connection and fetches that carry every partition, where a consumer per range pays its
    connection each. ``where`` names each range in errors. An error is returned with the
    range it belongs to (the first range, in ``spans``' order, that could not be read), not
    raised: :func:`read_range`'s errors."""
    records: dict[Span, list[tuple[Any, ...]]] = {span: [] for span in spans}
    todo = {(t, p): (t, p, first, end) for t, p, first, end in spans if end > first}
    if len(todo) < len([s for s in spans if s[3] > s[2]]):
        msg = f"read_spans: at most one range per partition, got {list(spans)}"
        raise ValueError(msg)
    if not todo:
        return SpansRead(records)
    from confluent_kafka import TopicPartition

    reader = consumer(config, isolation)
    try:
        for (topic, partition), span in todo.items():
            low = watermarks(reader, topic, [partition], timeout_s)[partition]
            if low is None:
                msg = (f"{where[span]}: topic {topic!r} partition {partition} did not answer "
                       f"in {timeout_s:g}s (its leader is down?)")  # fmt: skip
                return _failed(records, todo, span, SpoutUnavailableError(msg))
            gone = range_gone(low, where[span], topic, partition, span[2], span[3])
            if gone is not None:
                return _failed(records, todo, span, gone)
        reader.assign([TopicPartition(t, p, span[2]) for (t, p), span in todo.items()])
        deadline = time.monotonic() + timeout_s
        while todo:
            if time.monotonic() > deadline:
                span = next(iter(todo.values()))
                error = _not_read(span, records[span], where, timeout_s)
                return _failed(records, todo, span, error)
            for message in _next_messages(reader):
                failure = _take(message, todo, records, where)
                if failure is not None:
                    return _failed(records, todo, *failure)
                if not todo:
                    break
    finally:
        reader.close()
    return SpansRead(records)


def _next_messages(reader: Any) -> list[Any]:
    """The messages the consumer holds now (one ``consume`` call, not one ``poll`` each), or
    else the next one within 0.5 s (``consume`` with a timeout waits for a full list)."""
    messages: list[Any] = reader.consume(_FETCHED, 0)
    if not messages:
        message = reader.poll(0.5)
        messages = [] if message is None else [message]
    return messages


def _failed(
    records: dict[Span, list[tuple[Any, ...]]],
    todo: Mapping[tuple[str, int], Span],
    span: Span,
    error: SpoutEmitError | SpoutUnavailableError,
) -> SpansRead:
    """The ranges read to their end, and ``span``'s ``error``."""
    unread = set(todo.values()) | {span}
    return SpansRead({s: r for s, r in records.items() if s not in unread}, span, error)


def _take(
    message: Any,
    todo: dict[tuple[str, int], Span],
    out: dict[Span, list[tuple[Any, ...]]],
    where: Mapping[Span, str],
) -> tuple[Span, SpoutEmitError] | None:
    """Add ``message`` to its range's records (a range read to its end leaves ``todo``), or
    the range it fails and why."""
    from confluent_kafka import KafkaError

    span = todo.get((message.topic(), message.partition()))
    error = message.error()
    if span is None:  # a partition already read to its end, or an error of the consumer's
        unpartitioned = message.partition() is None
        if error is not None and (error.fatal() or (unpartitioned and not error.retriable())):
            first_span = next(iter(todo.values()))
            return first_span, SpoutEmitError(f"{where[first_span]}: {error.str()}")
        return None
    topic, partition, first, end = span
    if error is not None:
        if error.code() == KafkaError._PARTITION_EOF:
            if (message.offset() or 0) >= end:
                del todo[(topic, partition)]
            return None
        if error.code() == KafkaError.OFFSET_OUT_OF_RANGE:
            return span, SpoutEmitError(aged_out(where[span], topic, partition, first, end, None))
        if error.fatal() or not error.retriable():
            msg = f"{where[span]}: topic {topic!r} partition {partition}: {error.str()}"
            return span, SpoutEmitError(msg)
        return None
    offset = int(message.offset())
    if first <= offset < end:
        headers = message.headers()
        out[span].append((message.key(), message.value(), topic, partition, offset,
                          message.timestamp()[1], list(headers) if headers else None))  # fmt: skip
    if offset + 1 >= end:
        del todo[(topic, partition)]
    return None


def _not_read(
    span: Span, records: list[tuple[Any, ...]], where: Mapping[Span, str], timeout_s: float
) -> SpoutUnavailableError:
    """The error of a range not read to its end in time."""
    topic, partition, first, end = span
    msg = (
        f"{where[span]}: topic {topic!r} partition {partition} offsets [{first}, {end}) "
        f"not read to their end in {timeout_s:g}s (read up to "
        f"{records[-1][4] if records else first}; the leader is down, or a "
        f"transaction in the range is still open?)"
    )
    return SpoutUnavailableError(msg)


def range_gone(
    low: Watermarks | None, where: str, topic: str, partition: int, first: int, end: int
) -> SpoutEmitError | None:
    """The refusal of a replay of ``[first, end)`` when the partition's low watermark ``low``
    is past ``first`` (the broker no longer holds the range), else ``None``."""
    if end <= first or low is None or low[0] <= first:
        return None
    return SpoutEmitError(aged_out(where, topic, partition, first, end, low[0]))


def aged_out(where: str, topic: str, partition: int, first: int, end: int, low: int | None) -> str:
    """The error text of a replay whose offsets the broker no longer holds."""
    held = f"the broker holds offsets from {low} on" if low is not None else "out of range"
    return (
        f"{where}: topic {topic!r} partition {partition} offsets [{first}, {end}) of this "
        f"batch are gone ({held}: retention or deletion removed them); a transactional batch "
        f"replays exactly its range and is never replayed in part, so it is refused. Hint: "
        f"raise the topic's retention above the longest replay window (it does not bring "
        f"these records back); to go on without them, move this txid's range past the gone "
        f"offsets and clear the run (docs/runbook.md, \"A transactional Kafka batch whose "
        f"records are gone\"); a new topology may use OpaqueKafkaSpout, which skips what is "
        f"gone and records the loss"
    )


def no_config(name: str) -> ConfigurationError:
    """The error of a spout given neither a config nor a connection id."""
    msg = (f"{name}: give kafka_config_id (an Airflow `kafka` connection) or config "
           f"(librdkafka settings with bootstrap.servers), exactly one")  # fmt: skip
    return ConfigurationError(msg)
