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
from typing import Any

from airflow_trident.errors import ConfigurationError, SpoutEmitError, SpoutUnavailableError

__all__ = [
    "Watermarks",
    "consumer",
    "discover",
    "offsets_for_time",
    "read_range",
    "watermarks",
]

Watermarks = tuple[int, int]
"""``(low, high)``: the first offset the broker holds and the end of what a reader of the
spout's isolation level may read (``read_committed``: the last stable offset)."""


def _client_config(config: Mapping[str, str], isolation: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {str(k): v for k, v in config.items()}
    out.setdefault("group.id", f"trident-{uuid.uuid4().hex[:12]}")  # librdkafka needs one
    out["enable.auto.commit"] = False
    out["enable.partition.eof"] = True
    out["auto.offset.reset"] = "error"
    if isolation is not None:
        out["isolation.level"] = isolation
    return out


def _servers(config: Mapping[str, str]) -> str:
    return str(config.get("bootstrap.servers", "?"))


def consumer(config: Mapping[str, str], isolation: str = "read_committed") -> Any:
    """A consumer that never commits offsets (a fresh ``group.id`` unless the config names
    one): its positions are the batch metadata's, in ZooKeeper."""
    from confluent_kafka import Consumer

    return Consumer(_client_config(config, isolation))


def discover(
    config: Mapping[str, str],
    topics: Sequence[str],
    pattern: str | None,
    timeout_s: float,
) -> dict[str, dict[int, bool]]:
    """Topic -> partition -> whether it has a leader now, for ``topics`` and every topic
    matching ``pattern`` (a full match; topics starting with ``_`` only when named).

    Raises
    ------
    SpoutUnavailableError
        When no broker answers (nothing can be planned).
    """
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({k: v for k, v in config.items() if k != "group.id"})
    try:
        meta = admin.list_topics(timeout=timeout_s)
    except Exception as exc:  # KafkaException: no broker answered
        msg = (
            f"Kafka at {_servers(config)} did not answer a metadata request in {timeout_s:g}s "
            f"({type(exc).__name__}: {exc}); no batch can be planned and nothing is committed. "
            f"Hint: check that the brokers run and the connection's bootstrap.servers"
        )
        raise SpoutUnavailableError(msg) from exc
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
    of ``isolation`` gets (see :mod:`~airflow_trident.spout.kafka_records`), in offset order.

    Raises
    ------
    SpoutEmitError
        When offsets of the range are no longer held (retention): naming topic, partition
        and offsets (a transactional replay is never partial).
    SpoutUnavailableError
        When the partition's leader does not answer within ``timeout_s``.
    """
    if end <= first:
        return []
    from confluent_kafka import KafkaError, TopicPartition

    reader = consumer(config, isolation)
    try:
        low = watermarks(reader, topic, [partition], timeout_s)[partition]
        if low is None:
            msg = (f"{where}: topic {topic!r} partition {partition} did not answer in "
                   f"{timeout_s:g}s (its leader is down?)")  # fmt: skip
            raise SpoutUnavailableError(msg)
        gone = range_gone(low, where, topic, partition, first, end)
        if gone is not None:
            raise gone
        reader.assign([TopicPartition(topic, partition, first)])
        records: list[tuple[Any, ...]] = []
        deadline = time.monotonic() + timeout_s
        while True:
            if time.monotonic() > deadline:
                msg = (
                    f"{where}: topic {topic!r} partition {partition} offsets [{first}, {end}) "
                    f"not read to their end in {timeout_s:g}s (read up to "
                    f"{records[-1][4] if records else first}; the leader is down, or a "
                    f"transaction in the range is still open?)"
                )
                raise SpoutUnavailableError(msg)
            message = reader.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    if (message.offset() or 0) >= end:
                        return records
                    continue
                if error.code() == KafkaError.OFFSET_OUT_OF_RANGE:
                    raise SpoutEmitError(aged_out(where, topic, partition, first, end, None))
                if error.fatal() or not error.retriable():
                    msg = f"{where}: topic {topic!r} partition {partition}: {error.str()}"
                    raise SpoutEmitError(msg)
                continue
            offset = int(message.offset())
            if offset >= end:
                return records
            if offset >= first:
                headers = message.headers()
                timestamp = message.timestamp()[1]
                records.append((message.key(), message.value(), topic, partition, offset,
                                timestamp, list(headers) if headers else None))  # fmt: skip
            if offset + 1 >= end:
                return records
    finally:
        reader.close()


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
        f"raise the topic's retention above the longest replay window; to go on without "
        f"these records use OpaqueKafkaSpout (it skips what is gone and records the loss)"
    )


def no_config(name: str) -> ConfigurationError:
    """The error of a spout given neither a config nor a connection id."""
    msg = (f"{name}: give kafka_config_id (an Airflow `kafka` connection) or config "
           f"(librdkafka settings with bootstrap.servers), exactly one")  # fmt: skip
    return ConfigurationError(msg)
