"""Exactly-once into a Kafka topic, with Kafka transactions (confluent-kafka).

``stream.partition_persist(kafka_sink("events", "kafka_prod", topology="words"), fields,
KafkaWriter(key="word"))`` produces each batch's tuples to the topic ``events``; a state's
committed updates become a changelog the same way, through its new values:
``counts.new_values_stream().partition_persist(kafka_sink(...), ["word", "count"],
KafkaWriter(key="word", value="count"))`` (key, new value; the txid in a header).

Each commit partition ``i`` of ``n`` writes its records of batch ``txid`` in **one Kafka
transaction** of a producer whose ``transactional.id`` is ``trident.<topology>.<sink>.p<i>of<n>``,
and records the txid **inside the same transaction**, as Beam's exactly-once Kafka sink does:
``send_offsets_to_transaction`` commits, for two consumer groups that nothing consumes with,

* ``trident.<topology>.<sink>.p<i>of<n>``: offset ``txid`` on the topic's partition 0 with the
  metadata ``{"txid": ..., "partition": i, "partitions": n, ...}`` — what this partition wrote
  last;
* ``trident.<topology>.<sink>``: the same for the sink — the last txid written and its partition
  count.

So the records and the txid's record become visible together, or neither does. Before writing,
the partition's producer calls ``init_transactions``, which fences every older producer of the
same ``transactional.id`` (a zombie: an attempt that hung or was taken for dead) and aborts the
transaction such a producer left open (a crash before its commit), or waits until one it was
committing is complete. Only then does it read both groups' committed offsets (stable:
``isolation.level=read_committed``). It writes nothing when

* the sink's last txid is above ``txid``: ``txid`` is complete in the topic (txids commit in
  order: every partition of it committed before any later txid wrote anything);
* the partition's own last txid is ``txid`` (or above): a retry after Kafka's commit and before
  ZooKeeper's compare-and-set, a cleared run, a backfill of committed txids.

The sink's last txid replayed with another partition count is refused with
:class:`~airflow_trident.errors.StateError` (which rows landed cannot be told). It is a
*transactional* state: a replay of a txid must carry the same records, as transactional
spouts guarantee; an opaque spout is refused unless ``at_least_once=True``.

Every record carries the headers ``trident.topology``, ``trident.sink``, ``trident.txid`` and
``trident.partition`` (``i/n``). Consumers must read with ``isolation.level=read_committed``
(``docs/sinks/kafka.md``).
"""

from __future__ import annotations

import json
import logging
import operator
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from airflow_trident import connections
from airflow_trident.errors import ConfigurationError, StateError
from airflow_trident.kafka_log import watched
from airflow_trident.names import Dataset, kafka_dataset, validate_name
from airflow_trident.operation.base import StateUpdater
from airflow_trident.state.base import StateType
from airflow_trident.tuple import TridentCollector, TridentTuple

__all__ = [
    "FORMATS",
    "KafkaSinkFactory",
    "KafkaSinkState",
    "KafkaWriter",
    "kafka_sink",
]

log = logging.getLogger(__name__)

FORMATS = ("json", "str", "bytes")
"""How a record's key and value are serialised: JSON (UTF-8), ``str()`` in UTF-8, or bytes as
they are; ``None`` is always a null key or value (a tombstone on a compacted topic)."""
RECORD_PARTITION = 0
"""The topic partition the txid records are committed on (it exists while the topic does)."""
_OWNED = ("transactional.id", "group.id", "isolation.level", "enable.auto.commit")
"""Settings the sink sets itself; a config naming one is refused."""
_PRODUCER_ONLY = (
    "acks", "request.required.acks", "partitioner", "compression", "linger.ms", "batch.",
    "queue.buffering", "message.timeout.ms", "delivery.timeout.ms", "transaction",
    "enable.idempotence", "max.in.flight", "retries", "sticky.",
)  # fmt: skip
"""librdkafka producer settings, left out of the record reader's (a consumer's) config."""
_COMMIT_TRIES = 5
_POLL_EVERY = 1000
"""Records produced between two ``poll(0)`` calls (which serve the client's delivery reports;
the sink sets no callback: a failed delivery fails ``commit_transaction``)."""


def kafka_sink(
    topic: str,
    kafka_config_id: str | None = None,
    *,
    topology: str,
    name: str | None = None,
    config: Mapping[str, Any] | None = None,
    key_format: str = "json",
    value_format: str = "json",
    timeout_s: float = 60.0,
) -> KafkaSinkFactory:
    """A transactional state producing each batch's records to ``topic``, exactly once per txid.

    Parameters
    ----------
    topic:
        The topic (it must exist: the sink creates none).
    kafka_config_id:
        An Airflow ``kafka`` connection whose extra holds the librdkafka settings
        (``bootstrap.servers``, ``security.protocol``, ``sasl.*``...), resolved when the batch
        commits, never when the DAG file is parsed.
    topology:
        The topology's name: with ``name``, it names the transactional ids and the consumer
        groups holding the txids (``trident.<topology>.<name>...``).
    name:
        The sink's name within the topology (default: the topic); two sinks of one topology
        writing one topic need two names.
    config:
        The librdkafka settings themselves, instead of ``kafka_config_id`` (no secrets in a DAG
        file: prefer the connection).
    key_format, value_format:
        ``"json"``, ``"str"`` or ``"bytes"`` (:data:`FORMATS`).
    timeout_s:
        The longest wait of one Kafka call (``init_transactions``, the commit, reading the txids).
    """
    return KafkaSinkFactory(
        topic,
        kafka_config_id,
        topology=topology,
        name=name,
        config=config,
        key_format=key_format,
        value_format=value_format,
        timeout_s=timeout_s,
    )


class KafkaSinkFactory:
    """Makes the :class:`KafkaSinkState` of each commit partition (see :func:`kafka_sink`)."""

    state_type = StateType.TRANSACTIONAL
    txids_by_partition = True
    """The consumer groups record the txid each commit partition wrote, not a txid per key: a
    txid's replay must spread its records over the partitions as its first commit did
    (:mod:`airflow_trident.runtime.shape`)."""

    def __init__(
        self,
        topic: str,
        kafka_config_id: str | None = None,
        *,
        topology: str,
        name: str | None = None,
        config: Mapping[str, Any] | None = None,
        key_format: str = "json",
        value_format: str = "json",
        timeout_s: float = 60.0,
    ) -> None:
        if not isinstance(topic, str) or not topic.strip():
            msg = f"kafka_sink: topic must be a non-empty string, got {topic!r}"
            raise ConfigurationError(msg)
        where = f"kafka_sink({topic!r})"
        if kafka_config_id is not None and config is not None:
            msg = (
                f"{where}: give kafka_config_id (an Airflow kafka connection) or config "
                f"(librdkafka settings with bootstrap.servers), one of them"
            )
            raise ConfigurationError(msg)
        if kafka_config_id is None and config is None:
            kafka_config_id = "kafka_default"  # the Kafka provider's default connection
        if config is not None:
            if "bootstrap.servers" not in config:
                msg = f"{where}: config has no bootstrap.servers"
                raise ConfigurationError(msg)
            owned = sorted(k for k in config if k in _OWNED)
            if owned:
                msg = f"{where}: config sets {owned}, which the sink sets itself; leave them out"
                raise ConfigurationError(msg)
        for label, value in (("key_format", key_format), ("value_format", value_format)):
            if value not in FORMATS:
                msg = f"{where}: {label} {value!r} is not one of {FORMATS}"
                raise ConfigurationError(msg)
        if not timeout_s > 0:
            msg = f"{where}: timeout_s must be positive, got {timeout_s!r}"
            raise ConfigurationError(msg)
        self.topic = topic
        self.topology = validate_name(topology, kind="topology")
        self.name = topic if name is None else validate_name(name, kind="sink")
        self.kafka_config_id = (
            None if kafka_config_id is None else connections.declare_kafka(kafka_config_id)
        )
        self._given = None if config is None else {str(k): str(v) for k, v in config.items()}
        self.key_format = key_format
        self.value_format = value_format
        self.timeout_s = float(timeout_s)

    def __repr__(self) -> str:  # never the config: it may hold secrets
        where = self.kafka_config_id or (self._given or {}).get("bootstrap.servers")
        return f"KafkaSinkFactory({self.topic!r}, {where!r}, sink {self.prefix!r})"

    @property
    def prefix(self) -> str:
        """``trident.<topology>.<sink>``: the sink's consumer group and its partitions' prefix."""
        return f"trident.{self.topology}.{self.name}"

    def config(self) -> dict[str, str]:
        """The librdkafka settings: ``config``, or the connection resolved now (secrets: never
        log them)."""
        if self._given is not None:
            return dict(self._given)
        assert self.kafka_config_id is not None
        found = connections.kafka_config(self.kafka_config_id)
        owned = sorted(k for k in found if k in _OWNED)
        if owned:
            msg = (
                f"Kafka connection {self.kafka_config_id!r} sets {owned}, which kafka_sink "
                f"{self.prefix!r} sets itself; hint: leave them out of the connection's extra"
            )
            raise ConfigurationError(msg)
        return found

    def openlineage_datasets(self, state_url: str | None = None) -> list[Dataset]:
        """The topic written, as OpenLineage names it: ``kafka://host:port`` of the first
        bootstrap server (the connection resolved now) and the topic.

        >>> kafka_sink("counts", config={"bootstrap.servers": "k1:9092,k2:9092"},
        ...            topology="wc").openlineage_datasets()
        [('kafka://k1:9092', 'counts')]
        """
        return [kafka_dataset(str(self.config().get("bootstrap.servers", "")), self.topic)]

    def make_state(self, partition_index: int = 0, num_partitions: int = 1) -> KafkaSinkState:
        """The Kafka sink state of commit partition ``partition_index`` of ``num_partitions``."""
        if not 0 <= partition_index < num_partitions:
            msg = (
                f"kafka sink {self.prefix!r}: partition {partition_index} of {num_partitions} "
                f"does not exist"
            )
            raise ConfigurationError(msg)
        return KafkaSinkState(self, partition_index, num_partitions)

    def records(self, txid_group: str | None = None) -> dict[str, Any] | None:
        """The txid record a consumer group holds (default: the sink's: its last txid and
        partition count), or ``None``: none yet. For operators and tests."""
        reader = _reader(self.config(), txid_group or self.prefix)
        try:
            return _committed_record(reader, self.topic, self.timeout_s, txid_group or self.prefix)
        finally:
            reader.close()


def _reader(config: Mapping[str, str], group: str, *, stable: bool = True) -> Any:
    """A consumer of ``group`` that never subscribes: it reads the group's committed offsets
    and gives its metadata to a transaction. ``stable``: the read waits until no transaction
    holds an offset of the group pending (librdkafka asks for stable offsets under
    ``read_committed``); else it returns the last committed offsets at once."""
    from confluent_kafka import Consumer

    settings = {k: v for k, v in connections.kafka_client_settings(config).items()
                if not k.startswith(_PRODUCER_ONLY)}  # fmt: skip
    isolation = "read_committed" if stable else "read_uncommitted"
    settings.update(
        {"group.id": group, "enable.auto.commit": "false", "isolation.level": isolation}
    )
    watched_settings, _ = watched(settings, f"kafka_sink group {group!r}")
    return Consumer(watched_settings)


def _retriable(error: Any) -> bool:
    """Whether a group request's error passes when asked again: librdkafka's own flag, or the
    coordinator being found, loaded or moved (which ``committed`` does not flag).

    >>> from confluent_kafka import KafkaError
    >>> _retriable(KafkaError(KafkaError.NOT_COORDINATOR))
    True
    >>> _retriable(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))
    False
    """
    from confluent_kafka import KafkaError

    codes = {
        KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._WAIT_COORD,
    }  # fmt: skip
    return (
        bool(getattr(error, "retriable", lambda: False)())
        or getattr(error, "code", lambda: None)() in codes
    )


def _ask_committed(reader: Any, topic: str, timeout_s: float, group: str) -> Any:
    """The group's committed offset of the record partition. A retriable error
    (``NOT_COORDINATOR``, ``COORDINATOR_LOAD_IN_PROGRESS``: a new broker's offsets topic still
    loading, a coordinator moving) is asked again, with backoff, until ``timeout_s``."""
    from confluent_kafka import KafkaException, TopicPartition

    deadline, pause = time.monotonic() + timeout_s, 0.1
    while True:
        left = max(deadline - time.monotonic(), 0.1)
        try:
            (found,) = reader.committed([TopicPartition(topic, RECORD_PARTITION)], timeout=left)
            return found
        except Exception as exc:  # KafkaException: the group coordinator did not answer
            retriable = isinstance(exc, KafkaException) and _retriable(exc.args[0])
            if not retriable or time.monotonic() + pause > deadline:
                msg = (
                    f"kafka topic {topic!r}: reading the txid record of consumer group "
                    f"{group!r} failed ({exc}); nothing was written; hint: check the broker, "
                    f"then retry the commit"
                )
                raise StateError(msg) from exc
            log.info("kafka group %r: %s; asking again in %.1f s", group, exc, pause)
            time.sleep(pause)
            pause = min(pause * 2, 2.0)


def _committed_record(
    reader: Any, topic: str, timeout_s: float, group: str
) -> dict[str, Any] | None:
    found = _ask_committed(reader, topic, timeout_s, group)
    if found.error is not None:
        msg = f"kafka topic {topic!r}: the txid record of group {group!r}: {found.error}"
        raise StateError(msg)
    if found.offset < 0 or not found.metadata:
        return None
    try:
        record: dict[str, Any] = json.loads(found.metadata)
        int(record["txid"])
    except (ValueError, KeyError, TypeError) as exc:
        msg = (
            f"kafka topic {topic!r}: consumer group {group!r} holds offsets that are no txid "
            f"record (metadata {found.metadata!r}); it is the sink's own group: do not consume "
            f"with it"
        )
        raise StateError(msg) from exc
    return record


def _close(producer: Any) -> None:
    """Close a producer; a fenced one raises its fatal error again, already reported."""
    try:
        producer.close()
    except Exception as exc:  # KafkaException of a fenced or failed producer
        log.debug("closing a Kafka producer: %s", exc)


_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
"""``json.dumps(value, separators=(",", ":"), ensure_ascii=False)``, without making an encoder
per record (``dumps`` with any argument makes a new one each call)."""


def _serialiser(fmt: str, what: str) -> Callable[[Any], bytes | None]:
    """The serialiser of format ``fmt`` (:data:`FORMATS`), chosen once per batch, not per record.

    >>> _serialiser("json", "key")({"a": [1, "é"]}), _serialiser("str", "key")(3)
    (b'{"a":[1,"\\xc3\\xa9"]}', b'3')
    >>> _serialiser("bytes", "key")(None) is None
    True
    """
    if fmt == "json":

        def as_json(value: Any) -> bytes | None:
            if value is None:
                return None
            try:
                return _JSON(value).encode()
            except (TypeError, ValueError) as exc:
                msg = f"{what} {value!r} is not JSON ({exc}); hint: convert it, or use format 'str'"
                raise StateError(msg) from exc

        return as_json
    if fmt == "str":
        return lambda value: None if value is None else str(value).encode()

    def as_bytes(value: Any) -> bytes | None:
        if value is None:
            return None
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value)
        msg = f"{what} {value!r} is {type(value).__name__}, not bytes (format 'bytes')"
        raise StateError(msg)

    return as_bytes


_Pick = Callable[[Any], Any]
_Chunk = tuple[Sequence[Any], _Pick, _Pick]
"""Records of a commit: items, and how each gives its key and its value."""


def _serialised(
    key_format: str, value_format: str, chunks: Iterable[_Chunk]
) -> tuple[list[bytes | None], list[bytes | None]]:
    """The keys and the values of ``chunks``' records as bytes (:func:`_serialiser`), in order:
    a column of keys and one of values per chunk, so no object per record outlives its
    encoding (a commit's million pairs would cost Python's collector seconds). When one does
    not encode, the record-by-record pass names the first record that fails.

    >>> pairs = [("a", {"n": 1}), (None, None)]
    >>> first, second = operator.itemgetter(0), operator.itemgetter(1)
    >>> _serialised("json", "json", [(pairs, first, second)])
    ([b'"a"', None], [b'{"n":1}', None])
    >>> _serialised("json", "json", [([("a", 1), ("b", {1, 2})], first, second)])
    Traceback (most recent call last):
    ...
    airflow_trident.errors.StateError: record value {1, 2} is not JSON ...
    """
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    key_bytes = _serialiser(key_format, "record key")
    value_bytes = _serialiser(value_format, "record value")
    for items, key_of, value_of in chunks:
        try:
            if key_format == value_format == "json":
                enc = _JSON
                ks = [None if (k := key_of(t)) is None else enc(k).encode() for t in items]
                vs = [None if (v := value_of(t)) is None else enc(v).encode() for t in items]
            else:
                ks = [key_bytes(key_of(t)) for t in items]
                vs = [value_bytes(value_of(t)) for t in items]
        except (TypeError, ValueError, StateError):
            for t in items:  # raises the error that names the first record that fails
                key_bytes(key_of(t))
                value_bytes(value_of(t))
            raise
        keys += ks
        values += vs
    return keys, values


class KafkaSinkState:
    """One commit partition's writer: records collected between ``begin_commit(txid)`` and
    ``commit(txid)`` go in one Kafka transaction that also records the txid."""

    def __init__(self, factory: KafkaSinkFactory, index: int, count: int) -> None:
        self.factory = factory
        self.index = index
        self.count = count
        self.transactional_id = f"{factory.prefix}.p{index}of{count}"
        self.partition_group = self.transactional_id
        self._txid: int | None = None
        self._chunks: list[_Chunk] = []

    def __repr__(self) -> str:
        return f"KafkaSinkState({self.transactional_id!r}, topic {self.factory.topic!r})"

    def begin_commit(self, txid: int) -> None:
        """Start collecting batch ``txid``'s records (records of an unfinished commit are
        dropped)."""
        self._txid, self._chunks = txid, []

    def write(self, records: Iterable[tuple[Any, Any]]) -> None:
        """Add ``(key, value)`` records to the commit in progress (serialised as the commit
        produces them: Python's serialising then overlaps the client's sending; a value that
        does not serialise fails the commit, its transaction aborted)."""
        self._add((list(records), _FIRST, _SECOND))

    def write_tuples(self, tuples: Sequence[Any], key: _Pick, value: _Pick) -> None:
        """Add a record per tuple, its key ``key(tuple)`` and its value ``value(tuple)``, to the
        commit in progress (picked and serialised as the commit produces them)."""
        self._add((tuples, key, value))

    def _add(self, chunk: _Chunk) -> None:
        if self._txid is None:
            msg = f"kafka sink {self.factory.prefix!r}: write outside a commit; call begin_commit"
            raise StateError(msg)
        self._chunks.append(chunk)

    def rollback(self) -> None:
        """Drop the records of the commit in progress (nothing of them was committed)."""
        self._txid, self._chunks = None, []

    def written_txid(self) -> int | None:
        """The last txid this partition committed to the topic (``None``: none yet)."""
        found = self.factory.records(self.partition_group)
        return None if found is None else int(found["txid"])

    def headers(self, txid: int) -> list[tuple[str, bytes]]:
        """The headers of every record of ``txid`` from this partition."""
        return [
            ("trident.topology", self.factory.topology.encode()),
            ("trident.sink", self.factory.name.encode()),
            ("trident.txid", str(txid).encode()),
            ("trident.partition", f"{self.index}/{self.count}".encode()),
        ]

    def commit(self, txid: int) -> None:
        """Produce the records and the txid's record in one Kafka transaction, unless the
        groups' records show ``txid`` written (a replay): then nothing is written.

        Raises
        ------
        StateError
            If no commit of ``txid`` is open, the topic does not exist, the txid was written
            with another partition count, this producer was fenced (a newer attempt of the
            partition started), or Kafka refused the transaction. Nothing of the records is
            visible to ``read_committed`` consumers then, except when the commit's outcome was
            lost: the retry's ``init_transactions`` completes or aborts it, and its check
            recognises a committed one.
        """
        if self._txid != txid:
            msg = (
                f"kafka sink {self.factory.prefix!r}: commit({txid}) but the open commit is "
                f"{self._txid}; hint: call begin_commit({txid}) first"
            )
            raise StateError(msg)
        chunks, self._txid, self._chunks = self._chunks, None, []
        config = self.factory.config()
        producer = self._producer(config, txid)
        # The partition's group: stable (only this partition's transactions write it, and
        # init_transactions has completed or aborted the last one). The sink's group: the last
        # committed record, not waiting for the transactions of the txid's other partitions (a
        # partition whose worker died holds one open until its retry or its timeout); they
        # write the same txid and count, so they cannot change what the check decides.
        readers = (
            _reader(config, self.partition_group),
            _reader(config, self.factory.prefix, stable=False),
        )
        try:
            payload = self._checked_payload(readers, chunks, txid)
            if payload is not None and payload[0]:
                self._transaction(producer, readers, payload, txid)
        finally:
            for reader in readers:
                reader.close()
            _close(producer)

    def _checked_payload(
        self, readers: tuple[Any, Any], chunks: Sequence[_Chunk], txid: int
    ) -> tuple[list[bytes | None], list[bytes | None]] | None:
        """The serialised records to write, or ``None`` when the txid check says this
        partition writes nothing. The check (two round trips to the group coordinator) runs in
        a thread while this one serialises: the client waits on the network without the GIL.
        A record that does not serialise fails the commit only when it is to be written."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="trident-kafka-sink") as pool:
            check = pool.submit(self._already_written, readers, txid)
            try:
                payload = _serialised(self.factory.key_format, self.factory.value_format, chunks)
            except StateError:
                if check.result():
                    return None
                raise
            return None if check.result() else payload

    # -- the transaction ----------------------------------------------------------------------
    def _where(self, txid: int) -> str:
        return (
            f"kafka sink {self.factory.prefix!r} (topic {self.factory.topic!r}), txid {txid} "
            f"partition {self.index}/{self.count}"
        )

    def _producer(self, config: Mapping[str, str], txid: int) -> Any:
        """A transactional producer of this partition, initialised: every older producer of
        its ``transactional.id`` is fenced, a transaction one left open is aborted, one it was
        committing is complete."""
        from confluent_kafka import KafkaException, Producer

        settings = connections.kafka_client_settings(config)
        settings.setdefault("partitioner", "murmur2_random")  # the Java client's, by key
        settings["transactional.id"] = self.transactional_id
        settings, _ = watched(settings, f"kafka_sink {self.factory.prefix!r}")
        producer = Producer(settings)
        try:
            producer.init_transactions(self.factory.timeout_s)
            meta = producer.list_topics(self.factory.topic, timeout=self.factory.timeout_s)
        except KafkaException as exc:
            msg = (
                f"{self._where(txid)}: initialising transactional id "
                f"{self.transactional_id!r} failed ({exc.args[0]}); nothing was written; hint: "
                f"check the broker (transactions need a transaction state log: "
                f"transaction.state.log.replication.factor <= brokers), then retry"
            )
            raise StateError(msg) from exc
        found = meta.topics.get(self.factory.topic)
        if found is None or found.error is not None or not found.partitions:
            msg = (
                f"{self._where(txid)}: the topic does not exist "
                f"({None if found is None else found.error}); nothing was written; hint: "
                f"create it (the sink creates no topic)"
            )
            raise StateError(msg)
        return producer

    def _already_written(self, readers: tuple[Any, Any], txid: int) -> bool:
        """Whether this partition must write nothing of ``txid`` (see the module's doc)."""
        topic, timeout = self.factory.topic, self.factory.timeout_s
        last = _committed_record(readers[1], topic, timeout, self.factory.prefix)
        if last is not None:
            last_txid, count = int(last["txid"]), int(last["partitions"])
            if last_txid > txid:
                log.info(
                    "%s: older than txid %d, the newest the sink wrote (%d partitions): "
                    "complete in the topic, this partition writes nothing",
                    self._where(txid), last_txid, count,
                )  # fmt: skip
                return True
            if last_txid == txid and count != self.count:
                msg = (
                    f"{self._where(txid)}: txid {txid} was written with {count} partitions and "
                    f"is committed again with {self.count}; writing would repeat records. "
                    f"Nothing was written; hint: replay the txid with the topology's "
                    f"parallelism of its first commit (docs/reliability.md: a txid's shape on "
                    f"replay)"
                )
                raise StateError(msg)
        mine = _committed_record(readers[0], topic, timeout, self.partition_group)
        if mine is not None and int(mine["txid"]) >= txid:
            log.info(
                "%s: already written (the partition's last txid is %s): skipped",
                self._where(txid), mine["txid"],
            )  # fmt: skip
            return True
        return False

    def _record(self, txid: int, *, partition: bool) -> str:
        record: dict[str, Any] = {
            "topology": self.factory.topology,
            "sink": self.factory.name,
            "txid": txid,
            "partitions": self.count,
        }
        if partition:
            record["partition"] = self.index
        return json.dumps(record, separators=(",", ":"))

    def _transaction(
        self,
        producer: Any,
        readers: tuple[Any, Any],
        records: tuple[list[bytes | None], list[bytes | None]],
        txid: int,
    ) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        timeout = self.factory.timeout_s
        topic = self.factory.topic
        committing = False
        try:
            producer.begin_transaction()
            self._produce(producer, records, self.headers(txid))
            for reader, partition in ((readers[0], True), (readers[1], False)):
                record = self._record(txid, partition=partition)
                offsets = [TopicPartition(topic, RECORD_PARTITION, txid, metadata=record)]
                producer.send_offsets_to_transaction(
                    offsets, reader.consumer_group_metadata(), timeout
                )
            committing = True
            self._end_transaction(producer, txid)
        except KafkaException as exc:
            raise self._failed(producer, txid, exc.args[0], committing=committing) from exc
        except BaseException:
            if not committing:
                self._abort(producer, txid)
            raise
        log.info("%s: %d records committed", self._where(txid), len(records[0]))

    def _produce(
        self,
        producer: Any,
        records: tuple[list[bytes | None], list[bytes | None]],
        headers: list[tuple[str, bytes]],
    ) -> None:
        """Produce the serialised ``records`` in the open transaction (the broker holds them
        back from ``read_committed`` consumers until the commit). No delivery callback: a
        record that fails for good puts the transaction in the abortable error state, and
        ``commit_transaction`` then fails (librdkafka's transactional API), so a Python call
        per record would tell nothing more; the reports are served every
        :data:`_POLL_EVERY` records."""
        topic, produce, poll = self.factory.topic, producer.produce, producer.poll
        keys, values = records
        for start in range(0, len(keys), _POLL_EVERY):
            end = start + _POLL_EVERY
            for key, value in zip(keys[start:end], values[start:end], strict=True):
                while True:
                    try:
                        produce(topic, value=value, key=key, headers=headers)
                        break
                    except BufferError:  # the local queue is full: let it drain
                        poll(0.05)
            poll(0)

    def _end_transaction(self, producer: Any, txid: int) -> None:
        """Commit the transaction (it flushes the records first); a retriable error is retried."""
        from confluent_kafka import KafkaException

        for attempt in range(_COMMIT_TRIES):
            try:
                producer.commit_transaction(self.factory.timeout_s)
                return
            except KafkaException as exc:
                error = exc.args[0]
                if not error.retriable() or attempt == _COMMIT_TRIES - 1:
                    raise
                log.warning("%s: committing the transaction: %s; retrying", self._where(txid),
                            error)  # fmt: skip

    def _abort(self, producer: Any, txid: int) -> None:
        try:
            producer.abort_transaction(self.factory.timeout_s)
        except Exception as exc:  # the retry's init_transactions aborts it anyway
            log.warning("%s: aborting the transaction failed (%s); the next attempt's "
                        "init_transactions aborts it", self._where(txid), exc)  # fmt: skip

    def _failed(self, producer: Any, txid: int, error: Any, *, committing: bool) -> StateError:
        """The error of a failed transaction, after aborting it when it can be."""
        where = self._where(txid)
        if error.fatal():
            return StateError(
                f"{where}: this producer was fenced or failed fatally ({error}): another "
                f"attempt initialised transactional id {self.transactional_id!r} after it "
                f"(this one is a zombie), or the broker refused it. Its transaction is not "
                f"committed: nothing of it is visible to read_committed consumers; the newer "
                f"attempt, or the retry, commits the txid"
            )
        if not committing or error.txn_requires_abort():
            self._abort(producer, txid)
            return StateError(
                f"{where}: the Kafka transaction failed ({error}) and was aborted: nothing was "
                f"written; hint: retry the commit"
            )
        return StateError(
            f"{where}: the Kafka transaction's outcome is unknown ({error}); the retry's "
            f"init_transactions completes or aborts it, and its txid check skips a committed "
            f"one; hint: retry the commit"
        )


class KafkaWriter(StateUpdater[KafkaSinkState]):
    """Writes each tuple as one record of a :class:`KafkaSinkState`.

    Parameters
    ----------
    key:
        A field name (the record key is its value), several (a JSON object of them), or
        ``None``: no key (the producer spreads such records over the partitions).
    value:
        A field name (its value), several (a JSON object of them), or ``None``: every field of
        the tuple as a JSON object.
    """

    def __init__(
        self, key: str | Sequence[str] | None = None, value: str | Sequence[str] | None = None
    ) -> None:
        self.key = key if key is None or isinstance(key, str) else tuple(key)
        self.value = value if value is None or isinstance(value, str) else tuple(value)

    def update_state(
        self, state: KafkaSinkState, tuples: Sequence[TridentTuple], collector: TridentCollector
    ) -> None:
        """Add the partition's tuples to the state's commit in progress."""
        if not tuples:
            return
        kind = type(tuples[0])
        if all(type(t) is kind for t in tuples):  # one field list: picked as the commit encodes
            fields = tuples[0].fields
            key = _picker(fields, self.key, whole=False)
            value = _picker(fields, self.value, whole=True)
            key(tuples[0]), value(tuples[0])  # a field the tuples lack fails here, not at commit
            state.write_tuples(tuples, key, value)
            return
        state.write(self._records(tuples))

    def _records(self, tuples: Sequence[TridentTuple]) -> list[tuple[Any, Any]]:
        """``(key, value)`` of each tuple; the fields are looked up once per field list, not
        per tuple."""
        pickers: dict[tuple[str, ...], tuple[_Pick, _Pick]] = {}
        out = []
        for t in tuples:
            pick = pickers.get(t.fields)
            if pick is None:
                pick = pickers[t.fields] = (_picker(t.fields, self.key, whole=False),
                                            _picker(t.fields, self.value, whole=True))  # fmt: skip
            out.append((pick[0](t), pick[1](t)))
        return out


def _picker(names: tuple[str, ...], chosen: str | tuple[str, ...] | None, *, whole: bool) -> _Pick:
    """What :class:`KafkaWriter` takes of a tuple of fields ``names``: field ``chosen``'s value,
    a dict of several fields' values, nothing (``None``), or with ``whole`` every field as a
    dict. A field the tuple lacks raises ``KeyError`` naming it (``TridentTuple.get``).

    >>> from airflow_trident.tuple import TridentTuple
    >>> t = TridentTuple(("the", 2), ("word", "n"))
    >>> [_picker(t.fields, c, whole=w)(t) for c, w in (("n", 0), (("n", "word"), 0), (None, 1))]
    [2, {'n': 2, 'word': 'the'}, {'word': 'the', 'n': 2}]
    >>> _picker(t.fields, None, whole=False)(t) is None
    True
    """
    if chosen is None:
        if not whole:
            return lambda t: None
        return lambda t: dict(zip(names, t, strict=True))
    wanted = (chosen,) if isinstance(chosen, str) else chosen
    if not set(wanted) <= set(names):  # t.get raises the KeyError that names the field
        if isinstance(chosen, str):
            return lambda t: t.get(chosen)
        return lambda t: {f: t.get(f) for f in wanted}
    if isinstance(chosen, str):
        return operator.itemgetter(names.index(chosen))
    at = [(f, names.index(f)) for f in wanted]
    return lambda t: {f: t[i] for f, i in at}
