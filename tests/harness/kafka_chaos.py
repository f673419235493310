"""The Kafka source-chaos schedule (issues 35 and 36): :class:`KafkaSpout` or
:class:`OpaqueKafkaSpout` under the faults of a real broker, into SQL states and a
:func:`~airflow_trident.state.kafka.kafka_sink`, checked key by key and record by record after
every commit. Run through :func:`tests.harness.source_chaos_schedule.run_source_chaos` with
``SourceChaosConfig(source="kafka", ...)``.

The schedule owns its broker: a single-node KRaft cluster
(:class:`~tests.harness.kafka.PrivateKafkaCluster` of size 1, started from the project's jars;
never the shared broker of ``scripts/services.sh``), which it kills (``SIGKILL`` of the process
group it started) and restarts. A caller may pass one in (``broker=``) to share it between
schedules; each schedule makes topics of its own. Its faults (:data:`KAFKA_FAULTS`):

* records produced between a batch's begin and process, and between process and commit;
* a partition added to the source topic mid-stream (up to 4): the spout picks it up at a
  begin and reads it from its earliest offset;
* the broker killed and restarted: before a begin (the begin fails with
  ``SpoutUnavailableError``, its retry re-binds the run's txid), between a begin and the first
  process attempt (transactional: the process fails; opaque: the batch skips the partitions it
  cannot read, they catch up later), between process and commit (the commit fails: the Kafka
  sink cannot write; the SQL states may have committed; the retry after the restart commits);
* aborted transactions: a transactional producer writes 1-3 records and aborts (under
  ``read_committed`` they are never emitted; their offsets and markers leave gaps);
* retention: ``AdminClient.delete_records`` moves a partition's log start offset, as retention
  does. Transactional mode deletes only committed offsets (a range still to be read would stop
  the topology: the documented limit), then replays a committed txid whose range is gone: the
  replay must be refused with ``SpoutEmitError`` naming topic, partition and offsets, never
  partial. Opaque mode deletes also offsets not yet committed, between batches and between a
  failed attempt and its retry: the batch skips them and records ``"lost": [from, to)``;
* malformed records (not JSON) and mistyped ones (``{"word": 7}``, ``{"n": "five"}``...): dead
  letters; the dead-letter files must name every malformed offset of the committed ranges;
* attempts failing after processing or after writing their states, a committed txid's commit
  run again;
* the Kafka sink's last commit partition dying at a point of its commit (before produce,
  mid-produce, after produce, after Kafka's commit: :data:`~tests.harness.kafka_sinks.
  CRASH_POINTS`), the commit then retried.

**The reference** is what the schedule produced, by offset (the delivery reports of an
idempotent producer, and of the aborting transactional one): after every commit each
partition's range ``[first, next)`` of the txid is taken from the coordinator; the ranges of
a partition must follow each other (``first`` of one is ``next`` of the one before), except
where an opaque batch recorded a loss, which must be exactly the gap and lie below an offset
the schedule deleted (what opaque legitimately lost is counted, never expected). The expected
counts and sums by word are those of the valid committed records (not aborted, not malformed)
in the committed ranges; both SQL states are compared key by key. The Kafka sink writes every
tuple (key the word; value source partition, offset and ``n``); a ``read_committed`` consumer's
records, grouped by their ``trident.txid`` header, must be exactly each committed txid's valid
records: 0 duplicates, 0 losses, nothing else. At the end (drained without faults) every valid
record the schedule produced is committed or counted as lost by opaque.

Opaque mode: the Kafka sink refuses an opaque spout unless ``at_least_once=True`` (a txid
re-emitted differently after its Kafka transaction committed keeps the first emit's records).
The schedule passes it, and an attempt that fails after writing its states writes the SQL
states only, so the sink check stays exact; commits are retried without processing again, as
a retried commit task does.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.errors import SpoutEmitError
from airflow_trident.operation import Count, Sum
from airflow_trident.runtime.staging import StagingArea
from airflow_trident.spout.kafka import KafkaSpout, OpaqueKafkaSpout, partition_id
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.kafka import KafkaWriter
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology
from tests.harness.kafka import PrivateKafkaCluster, create_topic
from tests.harness.kafka_sinks import CRASH_POINTS, CrashingKafkaSink

if TYPE_CHECKING:
    from tests.harness.source_chaos_schedule import SourceChaosConfig, SourceChaosReport

__all__ = ["KAFKA_FAULTS", "KafkaChaos"]

SPOUT = "events"
STATES = ("counts", "sums")
MAX_PARTITIONS = 4
QUIET = {"log_level": "0"}
"""librdkafka's own log lines off for the schedule's clients (a killed broker makes many)."""

KAFKA_FAULTS: dict[str, str] = {
    "produced_during_batch": "kafka: records produced between begin and process, or process "
    "and commit",
    "partition_added": "kafka: a partition added to the source topic mid-stream",
    "broker_killed_before_begin": "kafka: the broker killed before a begin, then restarted",
    "broker_killed_before_process": "kafka: the broker killed between begin and process",
    "broker_killed_before_commit": "kafka: the broker killed between process and commit",
    "aborted_transaction": "kafka: a transactional producer writes 1-3 records and aborts",
    "retention_delete": "kafka: records deleted from a partition's start (delete_records)",
    "retention_before_retry": "kafka (opaque): records of a failed attempt deleted before retry",
    "replay_aged_out": "kafka (transactional): a committed txid replayed after its range was "
    "deleted (must be refused)",
    "malformed_record": "a record that is not JSON (dead-lettered)",
    "mistyped_record": "a field of another type (dead-lettered)",
    "fail_after_process": "an attempt fails after processing (nothing written)",
    "fail_after_state": "an attempt fails after writing its states, before the compare-and-set",
    "commit_again": "a committed txid's commit runs again",
    "sink_crash": "kafka sink: the last commit partition dies in its commit; commit retried",
}
"""Fault kind -> what it simulates (merged into ``SOURCE_FAULTS``)."""


def _valid(value: bytes | None) -> tuple[str, int] | None:
    """``(word, n)`` of a record the spout's typed JSON rules accept, else ``None``.

    >>> _valid(b'{"word": "a", "n": 2}'), _valid(b'{"word": 7, "n": 1}'), _valid(b"{")
    (('a', 2), None, None)
    """
    if value is None:
        return None
    try:
        record = json.loads(value)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    word, n = record.get("word"), record.get("n")
    if not isinstance(word, str) or isinstance(n, bool) or not isinstance(n, int):
        return None
    return word, n


class KafkaChaos:
    """One Kafka schedule: its broker, topics, producers, topology and reference."""

    def __init__(
        self,
        config: SourceChaosConfig,
        url: str,
        process: Callable[[BatchSteps, int], Any],
        store: Any,
        staging: str,
        name: str,
        echo: Callable[[str], None],
        broker: PrivateKafkaCluster | None = None,
    ) -> None:
        from tests.harness.source_chaos_schedule import SourceChaosReport

        self.c = config
        self.rng = random.Random(config.seed)
        self.url = url
        self.process = process
        self.store = store
        self.echo = echo
        self.name = name
        self.base = Path(staging).parent / f"{name}_kafka"
        self.base.mkdir(parents=True, exist_ok=True)
        self.own_broker = broker is None
        self.broker = broker or PrivateKafkaCluster(self.base, size=1)
        if self.own_broker:
            self.broker.start()
        self.bootstrap = self.broker.bootstrap
        self.topic = f"{name}_in"
        self.out = f"{name}_out"
        self.partitions = config.partitions
        create_topic(self.bootstrap, self.topic, partitions=self.partitions)
        create_topic(self.bootstrap, self.out, partitions=2)
        self.report: SourceChaosReport = SourceChaosReport(config)
        # the reference: what was produced, by (partition, offset): (word, n) or None (invalid)
        self.produced: dict[tuple[int, int], tuple[str, int] | None] = {}
        self.malformed: set[tuple[int, int]] = set()
        self.aborted: set[tuple[int, int]] = set()
        self.deleted: dict[int, int] = {}  # partition -> log start offset the schedule set
        self.ranges: dict[int, list[tuple[int, int, int, list[int] | None]]] = {}
        self.lost_records = 0
        self.committed: dict[int, Counter[tuple[int, int, str, int]]] = {}  # txid -> records
        self.sink_seen: Counter[tuple[int, int, int, str, int]] = Counter()
        self.duplicates = 0
        self.losses = 0
        self._producer: Any = None
        self._aborter: Any = None
        self._reader: Any = None
        self.dead = self.base / "dead"
        opaque = config.mode == "opaque"
        kind: Any = OpaqueKafkaSpout if opaque else KafkaSpout
        self.spout = kind(
            self.topic,
            config={"bootstrap.servers": self.bootstrap, **QUIET},
            value_format="json",
            fields=["word", "n"],
            types={"word": "string", "n": "bigint"},
            dead_letter=self.dead,
            max_offsets_per_partition=config.max_rows,
            timeout_s=5.0,
        )
        self.factories = {
            s: sql_state(None, f"{name}_{s}", config.mode, key_fields=("word",),
                         value_type="bigint")
            for s in STATES
        }  # fmt: skip
        self.sink = CrashingKafkaSink(
            self.out,
            config={"bootstrap.servers": self.bootstrap, **QUIET},
            topology=name,
            timeout_s=20.0,
        )
        t = TridentTopology(name)
        stream = t.new_stream(SPOUT, self.spout)
        words = stream.group_by(["word"])
        words.persistent_aggregate(self.factories["counts"], Count(), ["c"], name="counts")
        words.persistent_aggregate(self.factories["sums"], ["n"], Sum(), ["total"], name="sums")
        stream.partition_by(["word"]).parallelism_hint(2).partition_persist(
            self.sink,
            ["word", "n", "partition", "offset"],
            KafkaWriter(key="word", value=("partition", "offset", "n")),
            name="out",
            at_least_once=opaque,
        )
        self.steps = BatchSteps(t, store, StagingArea(staging, name), states=StateBinding(url))
        self.engine = sa.create_engine(url)

    # -- producing ------------------------------------------------------------------------------

    def producer(self) -> Any:
        from confluent_kafka import Producer

        if self._producer is None:
            self._producer = Producer(
                {"bootstrap.servers": self.bootstrap, "enable.idempotence": "true",
                 "linger.ms": "0", **QUIET}
            )  # fmt: skip
        return self._producer

    def _value(self) -> bytes:
        roll = self.rng.random()
        if roll < 0.05:
            self.report.faults["malformed_record"] += 1
            return b'{"word": "broken"'
        if roll < 0.1:
            self.report.faults["mistyped_record"] += 1
            bad = self.rng.choice(
                [{"word": "x", "n": "five"}, {"word": 7, "n": 1}, {"word": "y", "n": True},
                 {"word": ["a"], "n": 2}]
            )  # fmt: skip
            return json.dumps(bad).encode()
        word = f"w{int(self.rng.paretovariate(1.2)) % 40:02d}"
        return json.dumps({"word": word, "n": self.rng.randint(1, 9)}).encode()

    def _send(self, producer: Any, n: int) -> list[tuple[int, int, bytes]]:
        """Produce ``n`` records to random partitions; ``(partition, offset, value)`` of each
        once delivered."""
        delivered: list[tuple[int, int, bytes]] = []
        errors: list[str] = []

        def report(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                delivered.append((int(msg.partition()), int(msg.offset()), bytes(msg.value())))

        for _ in range(n):
            part = self.rng.randrange(self.partitions)
            producer.produce(self.topic, value=self._value(), partition=part, on_delivery=report)
        left = producer.flush(30)
        if errors or left:
            msg = f"producing to {self.topic}: {errors or f'{left} records not delivered'}"
            raise RuntimeError(msg)
        return delivered

    def produce(self, n: int) -> None:
        for part, offset, value in self._send(self.producer(), n):
            got = _valid(value)
            self.produced[(part, offset)] = got
            if got is None:
                self.malformed.add((part, offset))

    def abort_transaction(self) -> None:
        """1-3 records in a transaction that aborts (never emitted under read_committed)."""
        from confluent_kafka import Producer

        if self._aborter is None:
            self._aborter = Producer(
                {"bootstrap.servers": self.bootstrap, "transactional.id": f"{self.name}_abort",
                 **QUIET}
            )  # fmt: skip
            self._aborter.init_transactions(30)
        self._aborter.begin_transaction()
        sent = self._send(self._aborter, self.rng.randint(1, 3))
        self._aborter.abort_transaction(30)
        for part, offset, _ in sent:
            self.produced[(part, offset)] = None
            self.aborted.add((part, offset))
        self.report.faults["aborted_transaction"] += 1

    def _fresh_clients(self) -> None:
        """New producers (after a restart or a partition added: fresh metadata)."""
        for client in (self._producer, self._aborter):
            if client is not None:
                client.flush(5)
        self._producer = None
        self._aborter = None

    def add_partition(self) -> None:
        from confluent_kafka.admin import AdminClient, NewPartitions  # type: ignore[attr-defined]

        if self.partitions >= MAX_PARTITIONS:
            return
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})
        futures = admin.create_partitions([NewPartitions(self.topic, self.partitions + 1)])
        for future in futures.values():
            future.result(30)
        deadline = time.monotonic() + 30
        while len(admin.list_topics(self.topic, timeout=10).topics[self.topic].partitions) <= (
            self.partitions
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.topic}: partition {self.partitions} never appeared")
            time.sleep(0.1)
        self.partitions += 1
        self._fresh_clients()
        self.report.faults["partition_added"] += 1

    def delete_before(self, part: int, offset: int) -> None:
        """Move ``part``'s log start offset to ``offset`` (what retention does)."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient

        if offset <= self.deleted.get(part, 0):
            return
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})
        for future in admin.delete_records([TopicPartition(self.topic, part, offset)]).values():
            future.result(30)
        self.deleted[part] = offset

    def _high(self, part: int) -> int:
        from confluent_kafka import Consumer, TopicPartition

        reader = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "chaos", **QUIET})
        try:
            return int(reader.get_watermark_offsets(TopicPartition(self.topic, part), 10)[1])
        finally:
            reader.close()

    # -- the broker -----------------------------------------------------------------------------

    def kill(self, kind: str) -> None:
        self.broker.node(1).kill()
        self.report.faults[kind] += 1

    def restart(self) -> None:
        if not self.broker.node(1).running:
            self.broker.start()
            self._fresh_clients()

    # -- the reference --------------------------------------------------------------------------

    def _metas(self, txid: int) -> dict[int, dict[str, Any]]:
        state = self.store.partition_state(SPOUT)
        found = {}
        for part in range(self.partitions):
            meta = state.get(partition_id(self.topic, part), txid)
            if isinstance(meta, dict) and "end" in meta:  # opaque: {"start", "end"}
                meta = meta["end"]
            if isinstance(meta, dict) and meta.get("next") is not None:
                found[part] = meta
        return found

    def record(self, txid: int) -> None:
        """Take ``txid``'s ranges from the coordinator and check they follow the committed ones."""
        records: Counter[tuple[int, int, str, int]] = Counter()
        for part, meta in self._metas(txid).items():
            first, nxt = int(meta["first"]), int(meta["next"])
            lost = meta.get("lost")
            done = self.ranges.setdefault(part, [])
            before = done[-1][2] if done else 0
            if done and (first, nxt) == done[-1][1:3] and lost == done[-1][3]:
                continue  # an opaque batch that could not read the partition: its last range
            if lost is not None:
                if self.c.mode != "opaque":
                    self._violation(f"txid {txid} partition {part}: a transactional loss {lost}")
                elif lost != [before, first] or first > self.deleted.get(part, 0):
                    self._violation(
                        f"txid {txid} partition {part}: lost {lost}, the gap is [{before}, "
                        f"{first}), the schedule deleted below {self.deleted.get(part, 0)}"
                    )
                self.lost_records += sum(
                    1 for o in range(int(lost[0]), int(lost[1]))
                    if self.produced.get((part, o)) is not None
                )  # fmt: skip
            elif first != before:
                self._violation(f"txid {txid} partition {part}: [{first}, {nxt}) after {before}")
            done.append((txid, first, nxt, lost))
            for offset in range(first, nxt):
                got = self.produced.get((part, offset))
                if got is not None:
                    records[(part, offset, got[0], got[1])] += 1
        self.committed[txid] = records

    def reference(self) -> dict[str, Counter[str]]:
        counts: Counter[str] = Counter()
        sums: Counter[str] = Counter()
        for records in self.committed.values():
            for (_, _, word, n), k in records.items():
                counts[word] += k
                sums[word] += n * k
        return {"counts": counts, "sums": sums}

    def stored(self) -> dict[str, dict[str, int]]:
        found: dict[str, dict[str, int]] = {}
        for s, factory in self.factories.items():
            with self.engine.connect() as conn:
                rows = conn.execute(sa.select(factory.layout.table)).mappings().all()
            found[s] = {str(r["word"]): int(r["val"]) for r in rows}
        return found

    def check(self, txid: int) -> None:
        want, have = self.reference(), self.stored()
        for s in STATES:
            for key in sorted(set(want[s]) | set(have[s])):
                expected, got = want[s].get(key), have[s].get(key)
                if (expected or None) != (got or None) and not (expected is None and got == 0):
                    self._difference(f"txid={txid} state={s} key={key!r} expected={expected} "
                                     f"got={got}")  # fmt: skip
        self.check_sink(txid)

    def _sink_reader(self) -> Any:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        if self._reader is None:
            self._reader = Consumer(
                {"bootstrap.servers": self.bootstrap, "group.id": f"{self.name}_check",
                 "enable.auto.commit": "false", "isolation.level": "read_committed",
                 "auto.offset.reset": "earliest", **QUIET}
            )  # fmt: skip
            self._reader.assign([TopicPartition(self.out, p, OFFSET_BEGINNING) for p in (0, 1)])
        return self._reader

    def _read_sink(self) -> None:
        """What a ``read_committed`` consumer reads of the sink's topic since last time, to
        each partition's last stable offset."""
        from confluent_kafka import TopicPartition

        reader = self._sink_reader()
        ends = {p: reader.get_watermark_offsets(TopicPartition(self.out, p), 30)[1]
                for p in (0, 1)}  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            at = {
                tp.partition: tp.offset
                for tp in reader.position([TopicPartition(self.out, p) for p in (0, 1)])
            }
            if all(ends[p] == 0 or at.get(p, -1) >= ends[p] for p in (0, 1)):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.out}: read_committed stuck at {at}, ends {ends}")
            message = reader.poll(0.2)
            if message is None or message.error() is not None:
                continue
            found: Any = message
            headers = {str(k): bytes(v).decode() for k, v in (found.headers() or [])}
            value = json.loads(found.value())
            key = (int(headers["trident.txid"]), int(value["partition"]), int(value["offset"]),
                   json.loads(found.key()), int(value["n"]))  # fmt: skip
            self.sink_seen[key] += 1

    def check_sink(self, txid: int) -> None:
        """Each committed txid's records in the sink once; nothing else."""
        self._read_sink()
        want: Counter[tuple[int, int, int, str, int]] = Counter(
            {(t, p, o, w, n): k for t, recs in self.committed.items()
             for (p, o, w, n), k in recs.items()}
        )  # fmt: skip
        extra, missing = self.sink_seen - want, want - self.sink_seen
        duplicates = sum(n for key, n in extra.items() if want[key])
        if extra or missing:
            self.duplicates = max(self.duplicates, duplicates)
            self.losses = max(self.losses, sum(missing.values()))
            first = sorted(set(extra) | set(missing))[:3]
            self._difference(
                f"txid={txid} sink: {sum(extra.values())} records more than the reference "
                f"({duplicates} duplicates), {sum(missing.values())} missing; first: "
                + ", ".join(f"{k} expected={want[k]} got={self.sink_seen[k]}" for k in first)
            )
            self.report.rows_different = max(
                self.report.rows_different, sum(extra.values()) + sum(missing.values())
            )

    def check_dead_letters(self) -> None:
        """Every malformed record of a committed range is in a dead-letter file."""
        lettered: set[tuple[int, int]] = set()
        for path in self.dead.rglob("txid=*.jsonl"):
            for line in path.read_text().splitlines():
                letter = json.loads(line)
                lettered.add((int(letter["partition"]), int(letter["offset"])))
        for part, done in self.ranges.items():
            for txid, first, nxt, _ in done:
                for offset in range(first, nxt):
                    key = (part, offset)
                    if key in self.malformed and key not in lettered:
                        self._violation(f"txid {txid}: malformed record {key} not dead-lettered")
                    if key in lettered and key not in self.malformed:
                        self._violation(f"txid {txid}: valid record {key} dead-lettered")

    def check_all_read(self) -> None:
        """After the drain: every valid record produced is committed or counted lost."""
        for part in range(self.partitions):
            done = self.ranges.get(part, [])
            end = done[-1][2] if done else 0
            high = self._high(part)
            if end != high:
                self._violation(f"partition {part}: committed up to {end}, the log ends at {high}")

    # -- the driver -----------------------------------------------------------------------------

    def _difference(self, text: str) -> None:
        text = f"seed={self.c.seed} mode={self.c.mode} {text}"
        self.report.differences.append(text)
        self.echo(f"DIFFERENCE {text}")

    def _violation(self, what: str) -> None:
        message = f"seed={self.c.seed} mode={self.c.mode}: {what}"
        self.report.violations.append(message)
        self.echo(f"VIOLATION {message}")

    def _fault(self, rate: float | None = None) -> bool:
        return self.rng.random() < (self.c.fault_rate if rate is None else rate)

    def _begin(self, faults: bool) -> int:
        run_id = f"chaos__{uuid.uuid4().hex[:12]}"  # a retried begin re-binds its txid
        killed = faults and self._fault(self.c.broker_kills)
        if killed:
            self.kill("broker_killed_before_begin")
        for attempt in range(1, 6):
            try:
                return int(self.steps.begin(run_id)["txid"])
            except Exception as exc:
                self.report.refused[type(exc).__name__] += 1
                if not killed or attempt > 1:
                    self._violation(f"begin attempt {attempt} failed with the broker up: {exc!r}")
                self.restart()
        raise RuntimeError("begin never succeeded")

    def _commit(self, txid: int, faults: bool) -> dict[str, Any]:
        """The commit, retried after an injected sink crash or a broker down."""
        if faults and self._fault(self.c.broker_kills):
            self.kill("broker_killed_before_commit")
        elif faults and self._fault(0.15):
            self.sink.point = self.rng.choice(CRASH_POINTS)
            self.report.faults["sink_crash"] += 1
        for attempt in range(1, 6):
            try:
                return dict(self.steps.commit(txid))
            except Exception as exc:
                self.report.refused[type(exc).__name__] += 1
                if attempt > 2:
                    self._violation(f"txid {txid} commit attempt {attempt}: {exc!r}")
                self.restart()
            finally:
                self.sink.point = None
        return {}

    def _fail_after_state(self, txid: int) -> None:
        plan = self.steps.plan(txid)
        manifest = self.steps.staging.verified_manifest(plan.attempt, plan.metas)
        if self.c.mode == "opaque":  # the SQL states only (the sink is at-least-once there)
            # as apply_staged does: record that a commit of the txid started (its retry then
            # reverts the opaque keys this attempt wrote and the retry does not)
            revert = self.steps.commits.start_commit(txid, manifest)
            staged = self.steps.staging.read_states(manifest)
            self.steps.commits.apply_result(txid, staged, only=frozenset(STATES), revert=revert)
        else:
            self.steps.apply_staged(plan, manifest)
        self.report.faults["fail_after_state"] += 1

    def _delete_uncommitted(self, kind: str) -> None:
        """Opaque: a partition's records deleted past its committed offsets."""
        part = self.rng.randrange(self.partitions)
        done = self.ranges.get(part, [])
        start = max(done[-1][2] if done else 0, self.deleted.get(part, 0))
        high = self._high(part)
        if high > start:
            self.delete_before(part, self.rng.randint(start + 1, high))
            self.report.faults[kind] += 1

    def _retention(self) -> None:
        """Records deleted as retention would; transactional: only committed ones, then a
        committed txid whose range is gone is replayed and must be refused."""
        if self.c.mode == "opaque":
            self._delete_uncommitted("retention_delete")
            return
        newest = self.store.commits.committed_txid()
        window = [(p, r) for p, done in self.ranges.items() for r in done
                  if r[0] > newest - 12 and r[2] > max(r[1], self.deleted.get(p, 0))]  # fmt: skip
        if not window:
            return
        part, (txid, first, nxt, _) = self.rng.choice(window)
        self.delete_before(part, self.rng.randint(max(first, self.deleted.get(part, 0)) + 1, nxt))
        self.report.faults["retention_delete"] += 1
        self.report.faults["replay_aged_out"] += 1
        try:
            self.steps.begin(f"replay__{uuid.uuid4().hex[:12]}", txid)
            self.process(self.steps, txid)
        except SpoutEmitError as exc:
            # the first partition of the txid whose range is gone (in emit order) is named
            named = re.search(rf"topic '{self.topic}' partition (\d+) offsets \[(\d+), (\d+)\)",
                              str(exc))  # fmt: skip
            gone = {
                (p, f, n) for p, done in self.ranges.items() for t, f, n, _ in done
                if t == txid and f < self.deleted.get(p, 0)
            }  # fmt: skip
            if named is None or tuple(int(g) for g in named.groups()) not in gone:
                self._violation(f"replay of txid {txid} refused without naming one of its "
                                f"deleted ranges {sorted(gone)}: {exc}")  # fmt: skip
            self.report.refused["SpoutEmitError (aged out)"] += 1
            return
        except Exception as exc:
            self._violation(f"replay of aged-out txid {txid}: not the documented error: {exc!r}")
            return
        self._violation(f"replay of txid {txid}: partition {part} [{first}, {nxt}) aged out, "
                        f"yet the replay was not refused")  # fmt: skip

    def batch(self, *, faults: bool) -> None:
        if faults and self._fault(0.1):
            self.abort_transaction()
        if faults and self._fault(0.04):
            self.add_partition()
        txid = self._begin(faults)
        if faults and self._fault():
            self.produce(self.rng.randint(1, 3))
            self.report.faults["produced_during_batch"] += 1
        for attempt in range(1, 31):
            faulty = faults and attempt <= 5
            killed = faulty and attempt == 1 and self._fault(self.c.broker_kills)
            if killed:
                self.kill("broker_killed_before_process")
            try:
                self.process(self.steps, txid)
            except Exception as exc:
                self.report.refused[type(exc).__name__] += 1
                if not killed:
                    self._violation(f"txid {txid} attempt {attempt}: {exc!r}")
                    return
                self.restart()
                continue
            read = {p: (m["first"], m["next"]) for p, m in self._metas(txid).items()}
            if killed and self.c.mode == "transactional" and any(f != n for f, n in read.values()):
                # (a batch whose ranges are all empty needs no broker: it reads nothing)
                self._violation(f"txid {txid}: read {read} with the broker down")
            self.restart()
            if faulty and self._fault():
                self.produce(self.rng.randint(1, 2))
                self.report.faults["produced_during_batch"] += 1
            if faulty and self._fault():
                if self.rng.random() < 0.6:
                    self._fail_after_state(txid)
                else:
                    self.report.faults["fail_after_process"] += 1
                if self.c.mode == "opaque" and self._fault(0.3):
                    self._delete_uncommitted("retention_before_retry")
                continue
            summary = self._commit(txid, faults)
            if not summary.get("applied"):
                self._violation(f"txid {txid}: commit did not apply: {summary}")
                return
            self.steps.success(txid)
            self.record(txid)
            if faults and self._fault(0.2):
                again = self.steps.commit(txid)
                self.report.faults["commit_again"] += 1
                if again.get("applied"):
                    self._violation(f"txid {txid}: a second commit applied again")
            self.check(txid)
            if faults and self._fault(self.c.fault_rate / 4):
                self._retention()
            return
        self._violation(f"txid {txid} did not commit in 30 attempts")

    def _drained(self) -> bool:
        for part in range(self.partitions):
            done = self.ranges.get(part, [])
            if (done[-1][2] if done else 0) < self._high(part):
                return False
        return True

    def run(self) -> SourceChaosReport:
        started = time.monotonic()
        try:
            self.produce(2 * self.partitions)
            while self.store.commits.committed_txid() < self.c.batches and self.report.ok:
                if self.rng.random() < 0.7:
                    self.produce(self.rng.randint(0, 2 * self.c.max_rows))
                self.batch(faults=True)
            self.restart()
            for _ in range(200):  # drain without faults
                if not self.report.ok or self._drained():
                    break
                self.batch(faults=False)
            if self.report.ok:
                self.check_all_read()
                self.check_dead_letters()
            self.report.batches = self.store.commits.committed_txid()
            self.report.rows = len(self.produced)
            self.report.lost = self.lost_records
            self.report.sink_records = sum(self.sink_seen.values())
        finally:
            self.report.elapsed_s = time.monotonic() - started
            self.close()
        return self.report

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._producer = self._aborter = None
        if self.own_broker:
            self.broker.stop()

    def drop(self) -> None:
        with self.engine.begin() as conn:
            for factory in self.factories.values():
                conn.execute(sa.schema.DropTable(factory.layout.table, if_exists=True))
        self.engine.dispose()
        if self.own_broker:
            shutil.rmtree(self.base, ignore_errors=True)
        else:
            from confluent_kafka.admin import AdminClient

            admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})
            for future in admin.delete_topics([self.topic, self.out]).values():
                future.result(30)
