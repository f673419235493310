"""Consumer-group offsets for Kafka's own tools: after each txid commits, the Kafka spouts commit
the batch's end offsets (each partition's ``next``) to a consumer group, so that
``kafka-consumer-groups.sh --describe``, Burrow and every lag monitor built on consumer groups
see the topology's position and lag.

For monitoring only. ZooKeeper's batch metadata stays the truth: nothing reads these offsets back
to plan a batch, and a failed offset commit never fails, delays or reorders a batch (a warning
naming the group and the bootstrap servers, never the settings; the next txid's commit catches
up). The group's offsets only move forward: a partition whose group offset is already at or
after the batch's end is left alone (a replay of an old txid, or two success steps racing).

The group: ``commit_group`` of the spout, ``True`` by default: ``trident-<topology>-<spout>``
(the topology's name and the spout's stream name, as ``new_stream(name, spout)`` gives it); a
string: that group; ``False`` or ``None``: no offsets are committed.

>>> group_name(True, "orders", "events"), group_name("ops-lag", "orders", "events")
('trident-orders-events', 'ops-lag')
>>> group_name(False, "orders", "events") is None
True
>>> end_offsets({"orders:0": {"topic": "orders", "partition": 0, "first": 3, "next": 9},
...              "orders:1": None})
{('orders', 0): 9}
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from airflow_trident.connections import kafka_client_settings
from airflow_trident.errors import ConfigurationError

__all__ = [
    "check_commit_group",
    "commit_batch",
    "commit_ends",
    "end_offsets",
    "group_name",
]

log = logging.getLogger(__name__)

COMMIT_TIMEOUT_S = 10.0
"""The longest a success step waits for the group's offsets (the spout's ``timeout_s`` if
shorter): with the brokers down, the success step goes on after a warning."""

CommitGroup = str | bool | None
"""A spout's ``commit_group``: ``True`` (the rule), a group id, or ``False``/``None`` (off)."""


def check_commit_group(owner: str, value: Any) -> CommitGroup:
    """``value`` if it is a valid ``commit_group``.

    >>> check_commit_group("KafkaSpout", "")
    Traceback (most recent call last):
    ...
    airflow_trident.errors.ConfigurationError: KafkaSpout: commit_group must be True (the group \
trident-<topology>-<spout>), a non-empty group id, or False/None (no offsets committed), got ''
    """
    if value is None or isinstance(value, bool) or (isinstance(value, str) and value.strip()):
        return value
    msg = (
        f"{owner}: commit_group must be True (the group trident-<topology>-<spout>), a "
        f"non-empty group id, or False/None (no offsets committed), got {value!r}"
    )
    raise ConfigurationError(msg)


def group_name(commit_group: CommitGroup, topology: str, spout: str) -> str | None:
    """The consumer group a spout commits its offsets to (see the module docs); ``None``: none."""
    if commit_group is None or commit_group is False:
        return None
    if commit_group is True:
        return f"trident-{topology}-{spout}"
    return str(commit_group)


def end_offsets(partitions: Mapping[str, Any]) -> dict[tuple[str, int], int]:
    """``(topic, partition) -> next`` of each partition's batch metadata (partitions without a
    batch yet are left out)."""
    out: dict[tuple[str, int], int] = {}
    for meta in partitions.values():
        if isinstance(meta, dict) and meta.get("next") is not None and "topic" in meta:
            out[(str(meta["topic"]), int(meta["partition"]))] = int(meta["next"])
    return out


def commit_batch(
    spout: Any, topology: str, name: str, txid: int, partitions: Mapping[str, Any]
) -> dict[tuple[str, int], int] | None:
    """After ``txid`` committed: commit the ends of its ``partitions`` (each partition's
    metadata once the txid committed) to the group of Kafka spout ``spout`` (stream ``name`` of
    ``topology``); what :func:`commit_ends` returns, ``None`` without a group. Never raises."""
    group = group_name(getattr(spout, "commit_group", True), topology, name)
    if group is None:
        return None
    where = f"Kafka spout {name!r} of topology {topology!r}, txid {txid}"
    timeout_s = min(float(spout.timeout_s), COMMIT_TIMEOUT_S)
    return commit_ends(spout.config, group, end_offsets(partitions),
                       timeout_s=timeout_s, where=where)  # fmt: skip


def commit_ends(
    config: Callable[[], Mapping[str, str]],
    group: str,
    ends: Mapping[tuple[str, int], int],
    *,
    timeout_s: float,
    where: str,
) -> dict[tuple[str, int], int] | None:
    """Commit ``ends`` to consumer group ``group`` where they are ahead of the group's offsets,
    with a consumer that never joins the group (no subscription); ``config`` gives the
    librdkafka settings (the spout's, resolved now). The offsets committed, or ``None`` when
    the commit failed (logged as a warning naming ``where``, the group and the bootstrap
    servers: the batch stays committed). Never raises."""
    if not ends:
        return {}
    servers = "?"
    try:
        settings = config()
        servers = str(settings.get("bootstrap.servers", "?"))
        return _commit(settings, group, ends, timeout_s)
    except Exception as exc:  # monitoring only: any failure is a warning
        text = " ".join(str(exc).split())[:300]
        log.warning(
            "%s: committing its end offsets to consumer group %r at %s failed (%s: %s); these "
            "offsets are for monitoring only (Kafka's consumer-group tools show a stale lag "
            "until a later batch's commit succeeds): the batch stays committed. Hint: the group "
            "must have no active members (choose another with commit_group=, or "
            "commit_group=False) and the connection's principal needs Read on it",
            where, group, servers, type(exc).__name__, text,
        )  # fmt: skip
        return None


def _commit(
    config: Mapping[str, str], group: str, ends: Mapping[tuple[str, int], int], timeout_s: float
) -> dict[tuple[str, int], int]:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    settings = kafka_client_settings(config)
    settings.update({"group.id": group, "enable.auto.commit": False,
                     "enable.auto.offset.store": False})  # fmt: skip
    client = Consumer(settings)
    try:
        wanted = [TopicPartition(topic, number) for topic, number in sorted(ends)]
        have = {}
        for found in client.committed(wanted, timeout=timeout_s):
            if found.error is not None:
                raise KafkaException(found.error)
            have[(found.topic, found.partition)] = int(found.offset)  # < 0: none committed
        forward = {key: end for key, end in ends.items() if end > have.get(key, -1)}
        if not forward:
            return {}
        done = client.commit(
            offsets=[TopicPartition(t, p, end) for (t, p), end in sorted(forward.items())],
            asynchronous=False,
        )
        for part in done or ():
            if part.error is not None:
                raise KafkaException(part.error)
        return forward
    finally:
        client.close()
