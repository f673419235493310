"""Records of a Kafka topic partition: how a consumed record becomes a tuple (one parser, run
in this process and on Spark's executors, so both runtimes emit the same values), and
:class:`KafkaRange`, the ``[first, next)`` offsets of one partition as a source range.

A raw record is ``(key, value, topic, partition, offset, timestamp_ms, headers)``: key and
value as bytes (or ``None``), headers as ``[(name, bytes or None), ...]`` -- what
confluent-kafka's ``Message`` gives in process and what Spark's ``format("kafka")`` gives
(``unix_millis(timestamp)``). :class:`KafkaRecordParser` makes it the spout's tuple:

* ``value_format="str"`` / ``"bytes"``: the tuple is ``(key, value, topic, partition, offset,
  timestamp, headers)``; ``"str"`` decodes key and value as UTF-8 (invalid bytes shown as
  ``\\xNN``, the same on both runtimes); ``"bytes"`` keeps them as bytes;
* ``value_format="json"`` / ``"csv"``: the value is one JSON object / one CSV line, decoded by
  the file log's record rules (:func:`~airflow_trident.spout.file_records.parse_record`: typed
  fields, ``rescue``); the tuple is ``(key, *fields[, _rescued_data], topic, partition,
  offset, timestamp, headers)``. A malformed value fails the batch naming topic, partition and
  offset, or is dropped when the spout dead-lettered it while planning the batch.

``headers`` is a JSON text: ``[[name, value], ...]`` in the record's order, values decoded as
UTF-8 as above (``null`` for a header without value), ``null`` for a record without headers.

>>> p = KafkaRecordParser("json", (("n", "bigint"),), False, False)
>>> p.fields
('key', 'n', 'topic', 'partition', 'offset', 'timestamp', 'headers')
>>> p.parse((b"k", b'{"n": 3}', "t", 0, 7, 1000, [("h", b"v")]))
('k', 3, 't', 0, 7, 1000, '[["h", "v"]]')
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_trident.errors import MalformedRecordError, SpoutEmitError
from airflow_trident.spout.file_records import RESCUED, parse_record
from airflow_trident.spout.ranges import ReadSpec

__all__ = [
    "META_FIELDS",
    "RAW_FIELDS",
    "VALUE_FORMATS",
    "KafkaRange",
    "KafkaReadSpec",
    "KafkaRecordParser",
    "KafkaSpan",
    "RawRecord",
    "headers_json",
    "offset_options",
    "spark_options",
    "text",
]

Row = tuple[Any, ...]
RawRecord = tuple[Any, ...]
"""``(key, value, topic, partition, offset, timestamp_ms, headers)``"""

VALUE_FORMATS = ("str", "bytes", "json", "csv")
META_FIELDS = ("topic", "partition", "offset", "timestamp", "headers")
RAW_FIELDS = ("key", "value", *META_FIELDS)
_META_TYPES = (("topic", "string"), ("partition", "int"), ("offset", "bigint"),
               ("timestamp", "bigint"), ("headers", "string"))  # fmt: skip


def text(data: bytes | bytearray | memoryview | str | None) -> str | None:
    """Bytes as UTF-8 text, an invalid byte as ``\\xNN`` (deterministic on every runtime)."""
    if data is None or isinstance(data, str):
        return data
    return bytes(data).decode("utf-8", "backslashreplace")


def headers_json(headers: Any) -> str | None:
    """A record's ``headers`` field: ``None`` without headers, else ``[[name, value], ...]``
    as JSON text (values as :func:`text`).

    >>> headers_json([("h", b"v"), ("e", None)])
    '[["h", "v"], ["e", null]]'
    """
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return json.dumps([[str(name), text(value)] for name, value in pairs])


@dataclass(frozen=True)
class KafkaRecordParser:
    """Makes a raw record the spout's tuple (see the module docs); picklable, so Spark's
    executors run it as this process does. ``drop``: a malformed value gives ``None`` (it was
    dead-lettered when the batch was planned) instead of failing; ``where`` names the batch in
    errors."""

    value_format: str
    schema: tuple[tuple[str, str], ...] = ()
    rescue: bool = False
    drop: bool = False
    where: str = ""

    @property
    def fields(self) -> tuple[str, ...]:
        """The tuple's field names."""
        return tuple(name for name, _ in self.out_schema)

    @functools.cached_property
    def out_schema(self) -> tuple[tuple[str, str], ...]:
        """The tuple's fields with their types (a read spec's kinds)."""
        if self.value_format in ("str", "bytes"):
            kind = "string" if self.value_format == "str" else "binary"
            return (("key", kind), ("value", kind), *_META_TYPES)
        rescued = ((RESCUED, "string"),) if self.rescue else ()
        return (("key", "string"), *self.schema, *rescued, *_META_TYPES)

    def decode(self, raw: RawRecord) -> Row:
        """The tuple of ``raw``; ``ValueError`` when its value is malformed (a CSV value
        with an unquoted line break, a JSON value nested too deeply for the parser too)."""
        key, value, topic, partition, offset, timestamp, headers = raw
        meta = (topic, int(partition), int(offset), None if timestamp is None else int(timestamp),
                headers_json(headers))  # fmt: skip
        if self.value_format == "bytes":
            return (None if key is None else bytes(key), None if value is None else bytes(value),
                    *meta)  # fmt: skip
        if self.value_format == "str":
            return (text(key), text(value), *meta)
        if value is None:
            raise ValueError("no value (a tombstone)")
        line = bytes(value).decode("utf-8")  # strict: invalid UTF-8 is malformed
        stripped = line.strip()
        if not stripped:
            raise ValueError("an empty value")
        try:
            fields = parse_record(stripped if self.value_format == "json" else line.rstrip("\r\n"),
                                  self.value_format, self.schema, self.rescue)  # fmt: skip
        except csv.Error as exc:  # a line break in an unquoted CSV cell (no file line has one)
            raise ValueError(str(exc)) from None
        except RecursionError:
            raise ValueError("nested too deeply") from None
        return (text(key), *fields, *meta)

    def parse(self, raw: RawRecord) -> Row | None:
        """The tuple of ``raw``, ``None`` for a malformed one with ``drop``; else a malformed
        value raises :class:`MalformedRecordError` naming topic, partition and offset."""
        try:
            return self.decode(raw)
        except ValueError as exc:
            if self.drop:
                return None
            value = text(raw[1]) or ""
            msg = (
                f"{self.where}: malformed record at topic {raw[2]!r} partition {raw[3]} offset "
                f"{raw[4]}: {exc}: {value[:200]!r}; the batch fails and nothing is committed. "
                f"Hint: give the spout a dead_letter location, or rescue=True"
            )
            raise MalformedRecordError(msg) from None


@dataclass(frozen=True)
class KafkaSpan:
    """Offsets ``[first, next)`` of one topic partition."""

    topic: str
    partition: int
    first: int
    next: int


@dataclass(frozen=True)
class KafkaReadSpec(ReadSpec):
    """How Spark reads Kafka ranges: ``spark.read.format("kafka")`` of ``spans`` (the topic
    partitions' offsets, as data) with ``options`` (the connection's ``kafka.*`` settings, the
    isolation level: :func:`spark_options`), then ``parser`` on the executors
    (:mod:`airflow_trident.runtime.spark.readers.kafka`). :meth:`reader_options` gives the
    connector everything at once."""

    parser: KafkaRecordParser | None = None
    spans: tuple[KafkaSpan, ...] = ()

    def reader_options(self) -> dict[str, str]:
        """The options of Spark's Kafka reader: :attr:`options` and the spans' offsets
        (:func:`offset_options`)."""
        return {**self.options, **offset_options(self.spans)}


@dataclass
class KafkaRange:
    """Offsets ``[first, next)`` of one topic partition, as a
    :class:`~airflow_trident.spout.ranges.SourceRange`: what lies there under the spout's
    isolation level (``read_committed``: no aborted record, no transaction marker; a compacted
    topic: what compaction kept). ``records``: the count when the batch was planned by reading
    it (dead letters), else ``None`` (counted by the job that reads it)."""

    topic: str
    partition: int
    first: int
    next: int
    parser: KafkaRecordParser
    config: Mapping[str, str]
    spark_options: Mapping[str, str]
    records: int | None = None
    timeout_s: float = 30.0
    isolation: str = "read_committed"
    """The spout's isolation level: the in-process read's, as Spark's ``spark_options``."""
    _rows: list[Row] | None = field(default=None, repr=False, compare=False)
    _raws: list[RawRecord] | None = field(default=None, repr=False, compare=False)
    """Read ahead by :meth:`read_together`, parsed when the range is read."""
    _error: Exception | None = field(default=None, repr=False, compare=False)
    """The error :meth:`read_together` met reading this range, raised when it is read."""

    @classmethod
    def read_together(cls, ranges: Sequence[KafkaRange]) -> None:
        """Read ``ranges`` ahead, those of one connection, isolation level and timeout by one
        consumer (:func:`~airflow_trident.spout.kafka_client.read_spans`): each then parses
        its records when read, and a range the read failed raises that error then, so a
        batch meets the errors (malformed records, a range gone, a leader down) in the
        order reading the ranges one by one meets them."""
        from airflow_trident.spout.kafka_client import read_spans

        groups: dict[tuple[str, str, float], list[KafkaRange]] = {}
        for source in ranges:
            if source._rows is None and source._raws is None and source.next > source.first:
                key = (json.dumps(dict(source.config), sort_keys=True, default=str),
                       source.isolation, source.timeout_s)  # fmt: skip
                groups.setdefault(key, []).append(source)
        for group in groups.values():
            by_span = {source.span: source for source in group}
            partitions = {(source.topic, source.partition) for source in group}
            if len(group) < 2 or len(partitions) < len(group):  # one, or two of a partition
                continue
            first = group[0]
            read = read_spans(first.config, list(by_span), first.timeout_s,
                              {span: s.where for span, s in by_span.items()},
                              first.isolation)  # fmt: skip
            for span, raws in read.records.items():
                by_span[span]._raws = raws
            if read.failed is not None:
                by_span[read.failed]._error = read.error

    @property
    def span(self) -> tuple[str, int, int, int]:
        """``(topic, partition, first, next)``."""
        return (self.topic, self.partition, self.first, self.next)

    @property
    def where(self) -> str:
        return self.parser.where

    @property
    def counted(self) -> bool:
        return self.records is not None

    @property
    def size_records(self) -> int | None:
        """At most this many records: the range's offsets (markers and compaction leave gaps),
        or its count when known (the Spark runtime's driver read limit,
        ``[trident] spark_read_here_records``); ``None`` in a process without the Kafka client
        (a Spark driver on a cluster node without the ``kafka`` extra): Spark's connector reads
        the range there."""
        if importlib.util.find_spec("confluent_kafka") is None:
            return None
        return self.records if self.records is not None else max(0, self.next - self.first)

    @property
    def count(self) -> int:
        if self.records is not None:
            return self.records
        return len(self._read())

    def _read(self) -> list[Row]:
        if self._rows is None:
            from airflow_trident.spout.kafka_client import read_range

            if self._error is not None:
                error, self._error = self._error, None  # read again if asked again
                raise error
            raws, self._raws = self._raws, None
            if raws is None:
                topic, partition, first, end = self.span
                raws = read_range(self.config, topic, partition, first, end, self.timeout_s,
                                  self.where, self.isolation)  # fmt: skip
            rows = [self.parser.parse(raw) for raw in raws]
            self._rows = [r for r in rows if r is not None]
        return self._rows

    def rows(self) -> Iterator[Row]:
        return iter(self._read())

    def gone(self) -> SpoutEmitError | None:
        """The in-process read's refusal of this range when the broker no longer holds its
        first offset (retention or deletion removed it), else ``None``: asked by the Spark
        runtime when a batch fails, so a replay of an aged-out range is refused alike on both
        runtimes (Spark's connector fails with its own ``OffsetOutOfRangeException``)."""
        if self.next <= self.first:
            return None
        from airflow_trident.spout.kafka_client import consumer, range_gone, watermarks

        reader = consumer(self.config, self.isolation)
        try:
            held = watermarks(reader, self.topic, [self.partition], self.timeout_s)
        finally:
            reader.close()
        low = held.get(self.partition)
        return range_gone(low, self.where, self.topic, self.partition, self.first, self.next)

    def read_spec(self) -> ReadSpec:
        drop = "drop" if self.parser.drop else "fail"
        span = KafkaSpan(self.topic, self.partition, self.first, self.next)
        return KafkaReadSpec("kafka", (), self.parser.out_schema, drop, self.spark_options,
                             parser=self.parser, spans=(span,))  # fmt: skip


def spark_options(
    config: Mapping[str, Any], isolation: str, given: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Spark's Kafka source options for a librdkafka ``config``: the Java client's settings
    (``kafka.*``: TLS stores, SASL's JAAS line..., by
    :func:`~airflow_trident.spout.kafka_security.spark_settings`, with the spout's own
    ``spark_kafka_options`` ``given`` over them), ``includeHeaders``, the isolation level and
    ``failOnDataLoss=true`` (a range is planned within what the broker holds).

    >>> sorted(spark_options({"bootstrap.servers": "b:9092"}, "read_committed").items())[:2]
    [('failOnDataLoss', 'true'), ('includeHeaders', 'true')]

    Raises
    ------
    ConfigurationError
        For a setting Spark's connector cannot carry (named with the path).
    """
    from airflow_trident.spout.kafka_security import spark_settings

    out = spark_settings(config, given)
    out.update({"includeHeaders": "true", "kafka.isolation.level": isolation,
                "failOnDataLoss": "true"})  # fmt: skip
    return out


def offset_options(spans: Sequence[KafkaSpan]) -> dict[str, str]:
    """Spark's Kafka source options reading exactly ``spans`` (``assign``, ``startingOffsets``,
    ``endingOffsets``; with :func:`spark_options`, all a read is given).

    >>> offset_options([KafkaSpan("t", 0, 3, 9), KafkaSpan("t", 2, 0, 4)])["endingOffsets"]
    '{"t": {"0": 9, "2": 4}}'
    """
    assign: dict[str, list[int]] = {}
    starts: dict[str, dict[str, int]] = {}
    ends: dict[str, dict[str, int]] = {}
    for span in spans:
        assign.setdefault(span.topic, []).append(span.partition)
        starts.setdefault(span.topic, {})[str(span.partition)] = span.first
        ends.setdefault(span.topic, {})[str(span.partition)] = span.next
    return {"assign": json.dumps(assign), "startingOffsets": json.dumps(starts),
            "endingOffsets": json.dumps(ends)}  # fmt: skip


def parsed(parser: KafkaRecordParser, raws: Sequence[RawRecord]) -> list[Row]:
    """The tuples of ``raws`` (malformed dropped or raised as the parser says)."""
    rows = [parser.parse(raw) for raw in raws]
    return [r for r in rows if r is not None]
