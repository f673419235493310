"""Kafka spouts: Trident's ``TransactionalTridentKafkaSpout`` (:class:`KafkaSpout`) and
``OpaqueTridentKafkaSpout`` (:class:`OpaqueKafkaSpout`), partitioned by topic partition.

A source partition is one topic partition, named ``"<topic>:<partition>"``. Its batch metadata
is ``{"topic", "partition", "first", "next"}``: the offsets ``[first, next)`` the batch takes
(end exclusive), stored with the txid in ZooKeeper by the partitioned spout machinery
(:mod:`~airflow_trident.spout.partitioned`, :mod:`~airflow_trident.spout.opaque`). A range is
offsets, not a count: under ``read_committed`` (the default) aborted records and transaction
markers occupy offsets that nothing is emitted for, and compaction leaves gaps; a batch emits
what a reader of its isolation level finds in the range.

* :class:`KafkaSpout` (transactional): the range of a txid is fixed the first time it is
  emitted and re-read exactly on every replay. A replay whose offsets the broker no longer holds
  (retention) is refused with an error naming topic, partition and offsets -- never a partial
  replay. A partition whose leader is down makes the spout wait: ``is_ready`` is false and
  :attr:`~KafkaSpout.waiting` names the partitions (a batch begun anyway fails and is retried).
* :class:`OpaqueKafkaSpout`: a batch resumes each partition at the ``next`` of its last
  committed batch and may differ when re-emitted; an unreadable partition takes nothing this
  batch and catches up later (seed 002's outage story); offsets retention removed are skipped
  and the loss recorded (``"lost": [from, to]`` in the partition's metadata, and a warning).

The begin step lists the partitions of ``topics`` (and of every topic matching ``pattern``)
every batch: partitions added to a topic, or topics created, are picked up. Where a partition
starts: ``start`` (``"earliest"``, ``"latest"`` or a timestamp in epoch milliseconds) for the
partitions of the spout's first batch; a partition discovered later starts at its earliest
offset (Spark's rule: nothing produced into it is missed). Limits per batch:
``max_offsets_per_partition`` and ``max_offsets`` (over all partitions, shared in proportion
to each partition's backlog, as Spark's ``maxOffsetsPerTrigger``), counted in offsets.

Records are emitted as ranges (:class:`~airflow_trident.spout.kafka_records.KafkaRange`): the
in-process runtime reads them with a consumer (``assign`` + ``seek``, no group commits), the
Spark runtime with ``spark.read.format("kafka")`` and per-partition offsets; both make tuples
with the same parser (:class:`~airflow_trident.spout.kafka_records.KafkaRecordParser`).

Examples
--------
>>> spout = KafkaSpout("events", config={"bootstrap.servers": "127.0.0.1:9092"})
>>> spout.output_fields
('key', 'value', 'topic', 'partition', 'offset', 'timestamp', 'headers')
>>> KafkaSpout("e", config={"bootstrap.servers": "b:1"}, value_format="json",
...            fields=["n"], types={"n": "bigint"}).output_fields[:2]
('key', 'n')
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_trident import connections
from airflow_trident.attempt import TransactionAttempt
from airflow_trident.errors import ConfigurationError, SpoutUnavailableError
from airflow_trident.names import Dataset, kafka_dataset
from airflow_trident.spout.base import Collector
from airflow_trident.spout.file_records import RESCUED, TYPES
from airflow_trident.spout.kafka_client import (
    DEFAULT_CONN_ID,
    check_client,
    consumer,
    discover,
    no_config,
    offsets_for_time,
    read_range,
    watermarks,
)
from airflow_trident.spout.kafka_offsets import check_commit_group, commit_batch
from airflow_trident.spout.kafka_records import (
    VALUE_FORMATS,
    KafkaRange,
    KafkaRecordParser,
    spark_options,
)
from airflow_trident.spout.lag import Lag
from airflow_trident.spout.ranges import emit_range

__all__ = ["KafkaSpout", "OpaqueKafkaSpout", "partition_id"]

log = logging.getLogger(__name__)

_NEWEST = 1 << 62
"""A txid after every batch: ``progress(partition, _NEWEST)`` is the partition's newest batch."""
ISOLATION = ("read_committed", "read_uncommitted")


def partition_id(topic: str, partition: int) -> str:
    """The source partition of a topic partition: ``"<topic>:<partition>"``.

    >>> partition_id("events", 3), _split("events:3")
    ('events:3', ('events', 3))
    """
    return f"{topic}:{partition}"


def _split(pid: str) -> tuple[str, int]:
    topic, _, number = pid.rpartition(":")
    return topic, int(number)


class _Kafka:
    """What both spouts share: configuration, discovery, start positions, limits, ranges."""

    def __init__(
        self,
        topics: str | Sequence[str] = (),
        *,
        pattern: str | None = None,
        kafka_config_id: str | None = None,
        config: Mapping[str, str] | None = None,
        value_format: str = "str",
        fields: Sequence[str] = (),
        types: Mapping[str, str] | None = None,
        rescue: bool = False,
        dead_letter: str | os.PathLike[str] | None = None,
        start: str | int = "earliest",
        max_offsets_per_partition: int | None = None,
        max_offsets: int | None = None,
        isolation: str = "read_committed",
        timeout_s: float = 30.0,
        commit_group: str | bool | None = True,
        spark_kafka_options: Mapping[str, str] | None = None,
    ) -> None:
        name = type(self).__name__
        topics = (topics,) if isinstance(topics, str) else tuple(topics)
        if not topics and pattern is None:
            msg = f"{name}: give topics (names) or pattern (a regular expression), or both"
            raise ConfigurationError(msg)
        if pattern is not None:
            re.compile(pattern)
        if kafka_config_id is not None and config is not None:
            raise no_config(name)
        if kafka_config_id is None and config is None:
            kafka_config_id = DEFAULT_CONN_ID  # the Kafka provider's default connection
        if config is not None and "bootstrap.servers" not in config:
            raise no_config(name)
        if value_format not in VALUE_FORMATS:
            msg = f"{name}: value_format {value_format!r} is not one of {VALUE_FORMATS}"
            raise ConfigurationError(msg)
        decoded = value_format in ("json", "csv")
        if decoded != bool(fields):
            msg = (f"{name}: fields name the values of a decoded value (value_format 'json' "
                   f"or 'csv'), and such a value needs them")  # fmt: skip
            raise ConfigurationError(msg)
        types = dict(types or {})
        if any(f not in fields or t not in TYPES for f, t in types.items()):
            msg = f"{name}: types {types!r} must map fields {tuple(fields)} to one of {TYPES}"
            raise ConfigurationError(msg)
        if (rescue or dead_letter is not None) and not decoded:
            msg = f"{name}: rescue and dead_letter apply to a decoded value (json, csv)"
            raise ConfigurationError(msg)
        if RESCUED in fields or set(fields) & {"key", "topic", "partition", "offset",
                                               "timestamp", "headers"}:  # fmt: skip
            msg = f"{name}: fields {tuple(fields)} take a name the record's own fields use"
            raise ConfigurationError(msg)
        if not (start in ("earliest", "latest") or (isinstance(start, int) and start >= 0)):
            msg = f"{name}: start must be 'earliest', 'latest' or epoch milliseconds, got {start!r}"
            raise ConfigurationError(msg)
        for label, limit in (("max_offsets_per_partition", max_offsets_per_partition),
                             ("max_offsets", max_offsets)):  # fmt: skip
            if limit is not None and limit < 1:
                msg = f"{name}: {label} must be >= 1 (or None for no limit), got {limit}"
                raise ConfigurationError(msg)
        if isolation not in ISOLATION:
            msg = f"{name}: isolation must be one of {ISOLATION}, got {isolation!r}"
            raise ConfigurationError(msg)
        self.topics, self.pattern = topics, pattern
        self.kafka_config_id = (
            None if kafka_config_id is None else connections.declare_kafka(kafka_config_id)
        )
        self._given = None if config is None else {str(k): str(v) for k, v in config.items()}
        self.value_format = value_format
        self.schema = tuple((f, types.get(f, "string")) for f in fields)
        self.rescue = rescue
        self.dead_letter = None if dead_letter is None else os.fspath(dead_letter)
        self.start = start
        self.max_per_partition, self.max_offsets = max_offsets_per_partition, max_offsets
        self.isolation = isolation
        self.timeout_s = timeout_s
        given = dict(spark_kafka_options or {})
        wrong = sorted(k for k in given if not str(k).startswith("kafka."))
        if wrong:
            msg = f"{name}: spark_kafka_options {wrong} are not kafka.* options (Spark's source)"
            raise ConfigurationError(msg)
        self.spark_kafka_options = {str(k): str(v) for k, v in given.items()}
        self._spark: tuple[str, dict[str, str]] | None = None
        self.commit_group = check_commit_group(name, commit_group)
        self.output_fields = self._parser("").fields
        self.waiting: str | None = None
        """Why the last ``is_ready`` said no although a partition has new records (the
        partitions whose leader does not answer), else ``None``."""
        self._progress: Callable[[str, int], Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_progress"] = None
        state["_spark"] = None  # holds secrets; made again where needed
        return state

    def __repr__(self) -> str:  # never the config: it may hold secrets
        where = self.kafka_config_id or (self._given or {}).get("bootstrap.servers")
        return f"{type(self).__name__}(topics={self.topics!r}, pattern={self.pattern!r}, {where})"

    def config(self) -> dict[str, Any]:
        """The librdkafka settings: ``config``, or the connection resolved now (secrets:
        never log them)."""
        if self._given is not None:
            return dict(self._given)
        assert self.kafka_config_id is not None
        return connections.kafka_config(self.kafka_config_id)

    @property
    def connection(self) -> str:
        """How errors name the settings: the connection id, or ``config=`` with its servers."""
        if self.kafka_config_id is not None:
            return f"Kafka connection {self.kafka_config_id!r}"
        servers = (self._given or {}).get("bootstrap.servers")
        return f"the spout's config (bootstrap.servers {servers})"

    def spark_options(self, config: Mapping[str, Any]) -> dict[str, str]:
        """Spark's Kafka source options for ``config`` (made once per config).

        Raises
        ------
        ConfigurationError
            For a setting Spark's connector cannot carry, naming it, the path and the
            connection.
        """
        key = json.dumps(config, sort_keys=True, default=repr)
        if self._spark is None or self._spark[0] != key:
            try:
                options = spark_options(config, self.isolation, self.spark_kafka_options)
            except ConfigurationError as exc:
                raise ConfigurationError(f"{self}: {self.connection}: {exc}") from None
            self._spark = (key, options)
        return dict(self._spark[1])

    def check_paths(self, config: Mapping[str, Any]) -> None:
        """Refuse, at begin, settings a path of a batch cannot carry: those Spark's connector
        cannot (any batch may take it once its ranges outgrow the driver's read) and those the
        in-process client cannot (:func:`~airflow_trident.spout.kafka_client.check_client`)."""
        check_client(config, self.connection)
        self.spark_options(config)

    def openlineage_datasets(self, state_url: str | None = None) -> list[Dataset]:
        """The topics read, as OpenLineage names them: ``kafka://host:port`` of the first
        bootstrap server (the connection resolved now) and each topic; a ``pattern`` is named
        by the pattern itself (the topics it matches change, as Flink's Kafka source names it).

        >>> KafkaSpout(["a", "b"], pattern="logs-.*", config={"bootstrap.servers": "k:9093"}
        ...            ).openlineage_datasets()
        [('kafka://k:9093', 'a'), ('kafka://k:9093', 'b'), ('kafka://k:9093', 'logs-.*')]
        """
        servers = str(self.config().get("bootstrap.servers", ""))
        named = [*self.topics, *([self.pattern] if self.pattern is not None else [])]
        return [kafka_dataset(servers, topic) for topic in named]

    def _parser(self, where: str) -> KafkaRecordParser:
        drop = self.dead_letter is not None
        return KafkaRecordParser(self.value_format, self.schema, self.rescue, drop, where)

    # -- coordinator (both spouts) ---------------------------------------------------------------

    def use_progress(self, progress: Callable[[str, int], Any]) -> None:
        """Called by the executor: a partition's newest batch (where its next one starts)."""
        self._progress = progress

    def _last(self, pid: str) -> Any:
        return None if self._progress is None else self._progress(pid, _NEWEST)

    def _discover(self, config: Mapping[str, Any]) -> dict[str, bool]:
        found = discover(config, self.topics, self.pattern, self.timeout_s,
                         self.connection)  # fmt: skip
        return {partition_id(t, p): led for t, parts in found.items() for p, led in parts.items()}

    def get_partitions_for_batch(self) -> Any:
        """The partitions now, each one's end (its high watermark, the last stable offset
        under ``read_committed``; ``None``: unreadable), where new ones start, and each
        one's share of ``max_offsets``."""
        config = self.config()  # resolved once: the connection may be a secrets backend's
        self.check_paths(config)
        led = self._discover(config)
        reader = consumer(config, self.isolation, self.connection)
        try:
            ends: dict[str, int | None] = {}
            lows: dict[str, int] = {}
            for pid in led:
                topic, number = _split(pid)
                found = watermarks(reader, topic, [number], self.timeout_s)[number]
                ends[pid] = None if found is None else found[1]
                if found is not None:
                    lows[pid] = found[0]
            lasts = {pid: self._last(pid) for pid in led}
            starts = self._starts(reader, lasts, lows, ends)
        finally:
            reader.close()
        meta: dict[str, Any] = {"partitions": sorted(led, key=_split), "ends": ends}
        if starts:
            meta["starts"] = starts
        if self.max_offsets is not None:
            meta["caps"] = self._caps(ends, lasts, starts)
        return meta

    def _starts(
        self, reader: Any, lasts: dict[str, Any], lows: dict[str, int], ends: dict[str, int | None]
    ) -> dict[str, int]:
        """Where the partitions without a batch start: ``start`` on the spout's first batch,
        else their earliest offset."""
        new = [pid for pid, last in lasts.items() if _next(last) is None and pid in lows]
        if not new:
            return {}
        started = any(_next(last) is not None for last in lasts.values())
        if started or self.start == "earliest":
            return {pid: lows[pid] for pid in new}
        if self.start == "latest":
            return {pid: int(ends[pid] or lows[pid]) for pid in new}
        out: dict[str, int] = {}
        assert isinstance(self.start, int)
        for pid in new:
            topic, number = _split(pid)
            found = offsets_for_time(reader, topic, [number], self.start, self.timeout_s)[number]
            out[pid] = int(ends[pid] or lows[pid]) if found < 0 else max(found, lows[pid])
        return out

    def _caps(
        self, ends: dict[str, int | None], lasts: dict[str, Any], starts: dict[str, int]
    ) -> dict[str, int]:
        """Each partition's share of ``max_offsets``, in proportion to its backlog."""
        assert self.max_offsets is not None
        backlog = {}
        for pid, end in ends.items():
            first = _next(lasts.get(pid))
            first = starts.get(pid, 0) if first is None else first
            backlog[pid] = max(0, (end or 0) - first)
        total = sum(backlog.values())
        if total <= self.max_offsets:
            return {pid: self.max_offsets for pid in ends}
        return {pid: max(1, math.floor(self.max_offsets * b / total)) if b else 0
                for pid, b in backlog.items()}  # fmt: skip

    def is_ready(self, txid: int) -> bool:
        """True when a partition has records after its newest batch; the transactional spout
        says no while a partition's leader does not answer (see :attr:`waiting`)."""
        self.waiting = None
        config = self.config()
        self.check_paths(config)
        try:
            led = self._discover(config)
        except SpoutUnavailableError as exc:
            self.waiting = str(exc)
            return False
        reader = consumer(config, self.isolation, self.connection)
        new, down = False, []
        try:
            for pid, has_leader in sorted(led.items()):
                topic, number = _split(pid)
                found = None
                if has_leader:
                    found = watermarks(reader, topic, [number], self.timeout_s)[number]
                if found is None:
                    down.append(pid)
                    continue
                last = _next(self._last(pid))
                new = new or found[1] > (found[0] if last is None else last)
        finally:
            reader.close()
        if not led and self.pattern is not None:
            self.waiting = (
                f"pattern {self.pattern!r} matches no topic on the cluster yet: the spout "
                f"waits for one"
            )
            log.info("%s: %s", self, self.waiting)
        if down and self._waits_for_all:
            self.waiting = (
                f"partitions {down} do not answer (no leader, or it is down): a transactional "
                f"Kafka batch waits until every partition can be read"
            )
            log.warning("%s: %s", self, self.waiting)
            return False
        return new

    _waits_for_all = True

    def lag(self, partition: str, partition_meta: Any) -> Lag | None:
        """The offsets of ``partition`` after its batch ``partition_meta`` (its high watermark
        minus the batch's ``next``; every offset it holds before its first batch)."""
        topic, number = _split(partition)
        reader = consumer(self.config(), self.isolation, self.connection)
        try:
            found = watermarks(reader, topic, [number], self.timeout_s)[number]
        finally:
            reader.close()
        if found is None:
            return None
        low, high = found
        after = _next(partition_meta)
        return Lag(max(0, high - (low if after is None else max(after, low))), "offsets")

    def get_ordered_partitions(self, all_partition_info: Any) -> Sequence[str]:
        return list(all_partition_info["partitions"])

    def batch_committed(self, topology: str, spout: str, txid: int, partitions: Any) -> None:
        """After ``txid`` committed: its end offsets to the consumer group ``commit_group``
        (monitoring only; never raises: :mod:`~airflow_trident.spout.kafka_offsets`)."""
        commit_batch(self, topology, spout, txid, partitions)

    def close(self) -> None:
        return None

    # -- planning a batch ------------------------------------------------------------------------

    def plan(
        self,
        attempt: TransactionAttempt,
        pid: str,
        batch: Mapping[str, Any],
        first: int,
        end: int,
    ) -> dict[str, Any]:
        """The metadata of a new batch of ``pid`` from ``first``, within the limits; with
        ``dead_letter``, the range is read here and its malformed records written there."""
        topic, number = _split(pid)
        cap = self.max_per_partition
        share = (batch.get("caps") or {}).get(pid)
        if share is not None:
            cap = share if cap is None else min(cap, share)
        nxt = max(first, end if cap is None else min(end, first + cap))
        meta: dict[str, Any] = {"topic": topic, "partition": number, "first": first, "next": nxt}
        if self.dead_letter is not None and nxt > first:
            good, bad = self._dead_letters(attempt, meta)
            meta["records"] = good
            if bad:
                meta["dead_letters"] = bad
        return meta

    def _where(self, attempt: TransactionAttempt, pid: str) -> str:
        return (f"{type(self).__name__} txid {attempt.txid} (attempt {attempt.attempt_id}), "
                f"partition {pid!r}")  # fmt: skip

    def _dead_letters(
        self, attempt: TransactionAttempt, meta: Mapping[str, Any]
    ) -> tuple[int, int]:
        topic, number = meta["topic"], meta["partition"]
        where = self._where(attempt, partition_id(topic, number))
        raws = read_range(self.config(), topic, number, meta["first"], meta["next"],
                          self.timeout_s, where, self.isolation)  # fmt: skip
        parser = self._parser(where)
        good, letters = 0, []
        for raw in raws:
            try:
                parser.decode(raw)
            except ValueError as exc:
                value = raw[1]
                letters.append({"topic": topic, "partition": number, "offset": raw[4],
                                "error": str(exc), "txid": attempt.txid,
                                "record": None if value is None else
                                bytes(value).decode("utf-8", "backslashreplace")})  # fmt: skip
                continue
            good += 1
        if letters:
            assert self.dead_letter is not None
            target = Path(self.dead_letter) / topic / str(number)
            target.mkdir(parents=True, exist_ok=True)
            name = f"txid={attempt.txid:012d}-{meta['first']}-{meta['next']}.jsonl"
            tmp = target / f"_{name}"
            tmp.write_text("".join(json.dumps(x) + "\n" for x in letters), encoding="utf-8")
            tmp.replace(target / name)  # a replay writes the same file again
            log.warning("txid %d: %d malformed records of topic %r partition %d went to %s",
                        attempt.txid, len(letters), topic, number, target / name)  # fmt: skip
        return good, len(letters)

    def range_of(self, attempt: TransactionAttempt, meta: Mapping[str, Any]) -> KafkaRange:
        """The :class:`KafkaRange` of a partition's batch ``meta``."""
        config = self.config()
        pid = partition_id(meta["topic"], meta["partition"])
        records = meta.get("records")
        return KafkaRange(
            meta["topic"], int(meta["partition"]), int(meta["first"]), int(meta["next"]),
            self._parser(self._where(attempt, pid)), config,
            self.spark_options(config),
            None if records is None else int(records), self.timeout_s, self.isolation,
        )  # fmt: skip

    def _emit(self, attempt: TransactionAttempt, collector: Collector, meta: Any) -> None:
        if meta["next"] > meta["first"]:
            emit_range(collector, self.range_of(attempt, meta))


def _next(meta: Any) -> int | None:
    return int(meta["next"]) if isinstance(meta, dict) and meta.get("next") is not None else None


class _TransactionalEmitter:
    """One batch's emitter: remembers the batch's coordinator metadata (``ends``, ``starts``,
    ``caps``) from ``get_ordered_partitions``, which the executor calls first."""

    def __init__(self, spout: KafkaSpout) -> None:
        self._spout = spout
        self._batch: Mapping[str, Any] = {}

    def get_ordered_partitions(self, all_partition_info: Any) -> Sequence[str]:
        self._batch = all_partition_info
        return self._spout.get_ordered_partitions(all_partition_info)

    def emit_partition_batch_new(
        self, attempt: TransactionAttempt, collector: Collector, partition: str,
        last_partition_meta: Any,
    ) -> Any:  # fmt: skip
        spout = self._spout
        topic, number = _split(partition)
        first = _next(last_partition_meta)
        end = (self._batch.get("ends") or {}).get(partition)
        if first is None or end is None:
            found = _watermarks_now(spout, topic, number, spout._where(attempt, partition))
            if first is None:
                start = (self._batch.get("starts") or {}).get(partition)
                first = found[0] if start is None else start
            if end is None:
                end = found[1]
        meta = spout.plan(attempt, partition, self._batch, first, end)
        spout._emit(attempt, collector, meta)
        return meta

    def emit_partition_batch(
        self, attempt: TransactionAttempt, collector: Collector, partition: str, partition_meta: Any
    ) -> None:
        self._spout._emit(attempt, collector, partition_meta)

    def close(self) -> None:
        return None


def _watermarks_now(spout: _Kafka, topic: str, number: int, where: str) -> tuple[int, int]:
    reader = consumer(spout.config(), spout.isolation, spout.connection)
    try:
        found = watermarks(reader, topic, [number], spout.timeout_s)[number]
    finally:
        reader.close()
    if found is None:
        then = (
            "a transactional Kafka batch waits for every partition and is retried"
            if spout._waits_for_all
            else "an opaque Kafka batch skips it and catches up later"
        )
        msg = (
            f"{where}: topic {topic!r} partition {number} does not answer (no leader, or it "
            f"is down); {then}"
        )
        raise SpoutUnavailableError(msg)
    return found


class KafkaSpout(_Kafka):
    """A transactional partitioned Kafka spout (see the module docs).

    Parameters
    ----------
    topics
        A topic name, or names.
    pattern
        A regular expression: every topic whose whole name matches (checked every batch).
    kafka_config_id
        An Airflow ``kafka`` connection (the Kafka provider's: librdkafka settings in its
        extra, read through its hook where it is installed), resolved when a batch runs;
        ``kafka_default`` (the provider's default) when neither this nor ``config`` is given;
        or ``config``: the settings themselves. TLS and SASL reach every path of a batch
        (docs/security.md).
    value_format
        ``"str"`` (UTF-8 text), ``"bytes"``, ``"json"`` (one JSON object per record) or
        ``"csv"`` (one CSV line per record, the fields in order).
    fields, types, rescue, dead_letter
        For ``"json"`` and ``"csv"``: the file log's record rules
        (:class:`~airflow_trident.spout.file_log.FileLogSpout`); ``dead_letter``: a local
        directory where malformed records go (``<topic>/<partition>/txid=...jsonl``, one JSON
        line each naming the offset) instead of failing the batch.
    start
        Where the partitions of the first batch start: ``"earliest"``, ``"latest"`` or an
        epoch-milliseconds timestamp (the first offset at or after it).
    max_offsets_per_partition, max_offsets
        Limits per batch, in offsets: per partition, and over all of them.
    isolation
        ``"read_committed"`` (aborted transactions are never emitted) or
        ``"read_uncommitted"``.
    timeout_s
        How long a broker call may take.
    spark_kafka_options
        ``kafka.*`` options of Spark's Kafka source over those made from the connection, for
        what the connection's librdkafka settings cannot say to the JVM client (a Python
        ``oauth_cb``: e.g. ``kafka.sasl.login.callback.handler.class``); with them, such a
        setting is not refused at begin (docs/security.md).
    commit_group
        The consumer group each committed batch's end offsets go to, for Kafka's lag tools
        only (never read back): ``True`` is ``trident-<topology>-<spout>``; ``False``/``None``:
        none (:mod:`~airflow_trident.spout.kafka_offsets`).
    """

    def get_partitioned_coordinator(self) -> KafkaSpout:
        return self

    def get_partitioned_emitter(self) -> _TransactionalEmitter:
        return _TransactionalEmitter(self)


class _OpaqueEmitter:
    def __init__(self, spout: OpaqueKafkaSpout) -> None:
        self._spout = spout
        self._batch: Mapping[str, Any] = {}

    def get_ordered_partitions(self, all_partition_info: Any) -> Sequence[str]:
        self._batch = all_partition_info
        return self._spout.get_ordered_partitions(all_partition_info)

    def emit_partition_batch(
        self, attempt: TransactionAttempt, collector: Collector, partition: str,
        last_partition_meta: Any,
    ) -> Any:  # fmt: skip
        spout = self._spout
        topic, number = _split(partition)
        where = spout._where(attempt, partition)
        try:
            low, high = _watermarks_now(spout, topic, number, where)
        except SpoutUnavailableError as exc:
            log.warning("%s", exc)  # names where, and that it is caught up later
            return last_partition_meta
        first = _next(last_partition_meta)
        if first is None:
            start = (self._batch.get("starts") or {}).get(partition)
            first = low if start is None else start
        lost = None
        if low > first:
            lost = [first, low]
            log.warning("%s: offsets [%d, %d) of topic %r partition %d are gone (retention) "
                        "and are skipped: %d offsets lost", where, first, low, topic, number,
                        low - first)  # fmt: skip
            first = low
        # the end is the watermark now, not the begin's: a re-emit (a retried process step)
        # takes what arrived since, and a partition unreadable at the begin catches up
        meta = spout.plan(attempt, partition, self._batch, first, max(first, high))
        if lost is not None:
            meta["lost"] = lost
        spout._emit(attempt, collector, meta)
        return meta

    def close(self) -> None:
        return None


class OpaqueKafkaSpout(_Kafka):
    """An opaque partitioned Kafka spout: :class:`KafkaSpout`'s parameters; a batch resumes
    after the last committed one, skips unreadable partitions (they catch up later) and
    offsets gone by retention (recorded as ``"lost"``)."""

    _waits_for_all = False

    def get_opaque_coordinator(self) -> OpaqueKafkaSpout:
        return self

    def get_opaque_emitter(self) -> _OpaqueEmitter:
        return _OpaqueEmitter(self)
