"""Benchmark: per-batch cost of our Kafka source in Connect mode against Spark Structured
Streaming's Kafka source (``Trigger.AvailableNow`` + ``foreachBatch``), the same word counts
into PostgreSQL exactly once (issue 35); and records/s of our Spark read of a batch's ranges
against ``spark.read.format("kafka")`` over the same offsets.

``bench/sss.py`` does the same for the file log; this is its Kafka twin. Each round produces one
batch of new records (``{"sentence": "<10 words>"}``, a 1,000-word vocabulary, spread evenly over
the topic's 4 partitions; a plain idempotent producer, no transactions) to one topic, then runs
one batch of each side over exactly those records, alternating which goes first:

* *ours* (``process_mode="connect"``, as ``bench/sss.py``'s ours: the lifecycle without
  Airflow): ``begin`` on the real ZooKeeper; attach to the topology's shared session on the
  running Spark Connect server, a new attempt, the emit (a transactional
  :class:`~airflow_trident.spout.kafka.KafkaSpout` with ``value_format="json"``: each
  partition's ``[first, next)`` fixed in ZooKeeper, read by Spark's ``format("kafka")`` and
  parsed by the spout's parser), the plan on Spark (``Split -> group_by(word) ->
  persistent_aggregate(Count)``) and its staging, detach; ``commit`` (the worker commit into a
  transactional ``sql_state`` in PostgreSQL, the compare-and-set in ZooKeeper); ``success``.
* *SSS*: ``spark.readStream.format("kafka")`` (``subscribe``, ``startingOffsets=earliest``,
  ``kafka.isolation.level=read_committed``, ``failOnDataLoss=true``) ``->
  from_json(CAST(value AS STRING), "sentence STRING")`` and ``bench/sss.py``'s
  ``foreachBatch``: ``explode(split) -> groupBy(word).count()``, then one PostgreSQL
  transaction that inserts the ``batchId`` (``ON CONFLICT DO NOTHING``) and only then adds the
  counts; ``trigger(availableNow=True)`` and a checkpoint kept across rounds (a new query per
  batch, as a scheduler runs an AvailableNow job). On the same Connect server (a session of
  its own) and in a warm ``local[2]`` session of a process of its own.

Sizes: ``--sizes`` (records per batch, comma-separated; ``10000,5000000`` by default); the first
``--warm-up`` rounds of each size (1 by default) are warm-ups, untimed, for both sides alike.
Both tables must equal the expected counts at the end.
Printed per size: each round, the medians with their spreads, our phases, the CPU seconds
each side's batch used (the JVM that ran it with its Spark Python workers, and for ours this
process too, where begin and the commit run: on 2 cores a side whose CPU is higher than its
wall time x 2 is bound by the cores, not by waiting), and a last line per size
``ratio=<ours s per batch / SSS s per batch>`` (the faster SSS; target <= 1.0).

The read figure (``--read-rounds``, after each size's rounds): the ranges of that size's last
batch, read on the Connect server (both in the topology's shared session, as ours reads) into
Spark's ``noop`` sink, alternating: *ours* is the Spark runtime's read of a batch's ranges as a
batch reads them (:func:`~airflow_trident.runtime.spark.inputs.source` with the default limits:
up to ``[trident] spark_read_here_records`` offsets, 50,000, the driver's read with the spout's
consumer handed to Spark as one Arrow table; beyond it one ``format("kafka")`` read of all the
ranges, the spout's parser in ``mapInArrow``, the rows counted by an observation); *Spark*
is one ``spark.read.format("kafka")`` of the same ``startingOffsets``/``endingOffsets`` with the
same options, the value parsed by ``from_json``, the same fields. Printed: records/s of each,
median and spread, and ``read_ratio=<ours records/s / Spark records/s>`` (target >= 0.95).

    source scripts/env.sh
    timeout 900 flock /tmp/heavy.lock .venv/bin/python bench/kafka_sss.py --rounds 5 --sizes 10000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests/
from tests.harness import export_project_path

export_project_path()  # Spark's Python workers load the spout's parser and bench.sss

from bench.kafka_sink import delete_topics  # noqa: E402
from bench.sss import (  # noqa: E402
    Ours,
    SssWorker,
    listening_pid,
    spread,
    sss_batch_function,
    sss_session,
    tree_cpu,
)

PARTITIONS = 4
WORDS_PER_SENTENCE = 10
POOL = 10_007
"""Distinct sentences; record ``j`` of batch ``i`` is sentence ``(i * 7919 + j) % POOL``."""
ZK_ROOT = "/trident_bench_kafka_sss"


def sentences(seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    vocab = [f"{rng.choice(['w', 'W'])}ord{i:04d}" for i in range(1000)]
    return [" ".join(rng.choices(vocab, k=WORDS_PER_SENTENCE)) for _ in range(POOL)]


class Topic:
    """The benchmark's topic: batches produced to it, the expected counts, each batch's ranges."""

    def __init__(self, bootstrap: str, name: str) -> None:
        from confluent_kafka import Producer

        self.bootstrap, self.name = bootstrap, name
        self.pool = sentences()
        self.values = [json.dumps({"sentence": s}).encode() for s in self.pool]
        self.words = [Counter(s.split()) for s in self.pool]
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": "true",
                                  "linger.ms": "50", "queue.buffering.max.messages": "500000",
                                  "queue.buffering.max.kbytes": "1048576"})  # fmt: skip
        self.offset = [0] * PARTITIONS
        self.ranges: list[dict[int, tuple[int, int]]] = []

    def land(self, index: int, records: int, expected: Counter[str]) -> None:
        """Produce batch ``index`` of ``records`` records, evenly over the partitions, and add
        its words to ``expected``."""
        start = index * 7919
        values, produce, poll = self.values, self.producer.produce, self.producer.poll
        for j in range(records):
            while True:
                try:
                    produce(self.name, values[(start + j) % POOL], partition=j % PARTITIONS)
                    break
                except BufferError:
                    poll(0.05)
        if self.producer.flush(300) != 0:
            msg = f"batch {index}: records not delivered"
            raise RuntimeError(msg)
        full, rest = divmod(records, POOL)
        for m in range(POOL):
            uses = full + (1 if (m - start) % POOL < rest else 0)
            if uses:
                for word, n in self.words[m].items():
                    expected[word] += n * uses
        batch = {}
        for p in range(PARTITIONS):
            taken = records // PARTITIONS + (1 if p < records % PARTITIONS else 0)
            batch[p] = (self.offset[p], self.offset[p] + taken)
            self.offset[p] += taken
        self.ranges.append(batch)


def topology(spout: Any, table: str) -> Any:
    from airflow_trident.operation import Count, Split
    from airflow_trident.state.sql import sql_state
    from airflow_trident.topology import TridentTopology

    t = TridentTopology(table)
    t.new_stream("sentences", spout).each(["sentence"], Split(), ["word"]).group_by(
        ["word"]
    ).persistent_aggregate(
        sql_state(None, table, "transactional", key_fields=("word",), value_type="bigint"),
        Count(),
        ["count"],
        name="counts",
    )
    return t


class KafkaSss:
    """One AvailableNow query per batch over the topic, the checkpoint kept across them."""

    def __init__(
        self, spark: Any, bootstrap: str, topic: str, checkpoint: Path, pg_url: str, table: str
    ) -> None:
        self.spark, self.bootstrap, self.topic = spark, bootstrap, topic
        self.checkpoint = str(checkpoint)
        libpq = sa.engine.make_url(pg_url).set(drivername="postgresql")
        self.fn = sss_batch_function(
            libpq.render_as_string(hide_password=False), table, f"{table}_batches"
        )

    def batch(self) -> tuple[float, dict[str, float]]:
        """(query start -> stopped seconds, Spark's ``durationMs`` of the batch in seconds)."""
        started = time.perf_counter()
        frame = (
            self.spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", self.topic)
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed")
            .option("failOnDataLoss", "true")
            .load()
            .selectExpr("from_json(CAST(value AS STRING), 'sentence STRING').sentence AS sentence")
        )
        query = (
            frame.writeStream.foreachBatch(self.fn)
            .option("checkpointLocation", self.checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        elapsed = time.perf_counter() - started
        if query.exception() is not None:
            msg = f"the SSS query failed: {query.exception()}"
            raise RuntimeError(msg)
        durations = (query.lastProgress or {}).get("durationMs", {}) or {}
        return elapsed, {str(k): float(v) / 1000 for k, v in durations.items()}


def sss_worker(bootstrap: str, topic: str, checkpoint: str, table: str) -> int:
    """``--sss-worker``: a warm ``local[2]`` session (the Kafka connector on its
    ``spark.jars``); one AvailableNow query per ``batch`` line read from stdin, answered by
    ``<seconds> <its phases as JSON>``. The database URL comes from ``TRIDENT_PG_URL``."""
    from airflow_trident.runtime.spark import local_session
    from tests.harness.jars import spark_jars_conf

    spark = local_session("local[2]", shuffle_partitions=4, app_name="bench-kafka-sss-local",
                          conf=spark_jars_conf())  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    sss = KafkaSss(spark, bootstrap, topic, Path(checkpoint), os.environ["TRIDENT_PG_URL"], table)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "batch":
            break
        elapsed, own = sss.batch()
        print(f"{elapsed} {json.dumps(own, separators=(',', ':'))}", flush=True)
    spark.stop()
    return 0


class LocalKafkaSss(SssWorker):
    """The Kafka SSS side in a ``local[2]`` session of a process of its own."""

    def __init__(self, bootstrap: str, topic: str, work: Path, pg_url: str, table: str) -> None:
        super().__init__(__file__, [bootstrap, topic, str(work / "local"), table], pg_url)


def our_read(spark: Any, spout: Any, topic: str, batch: dict[int, tuple[int, int]]) -> int:
    """The Spark runtime's read of ``batch``'s ranges (as a batch reads them: by the driver or
    by Spark's tasks, :func:`~airflow_trident.runtime.spark.inputs.source`) into the ``noop``
    sink; its records."""
    from airflow_trident.attempt import TransactionAttempt
    from airflow_trident.runtime.spark import inputs
    from airflow_trident.spout.kafka import partition_id
    from airflow_trident.spout.ranges import PartitionRows

    attempt = TransactionAttempt(1, 0)
    parts = {}
    for p, (first, nxt) in sorted(batch.items()):
        rows = PartitionRows()
        meta = {"topic": topic, "partition": p, "first": first, "next": nxt}
        rows.add_range(spout.range_of(attempt, meta))
        parts[partition_id(topic, p)] = rows
    fields = tuple(spout.output_fields)
    frame = inputs.source(spark, fields, parts, fields, exact=False, sentinel=False, sample_rows=0)
    frame.df.write.format("noop").mode("overwrite").save()
    seen = sum(rows.records() for rows in parts.values())
    return seen


def spark_read(spark: Any, bootstrap: str, topic: str, batch: dict[int, tuple[int, int]]) -> int:
    """One ``spark.read.format("kafka")`` of ``batch``'s offsets into the ``noop`` sink."""
    ranges = sorted(batch.items())
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "assign": json.dumps({topic: [p for p, _ in ranges]}),
        "startingOffsets": json.dumps({topic: {str(p): r[0] for p, r in ranges}}),
        "endingOffsets": json.dumps({topic: {str(p): r[1] for p, r in ranges}}),
        "includeHeaders": "true",
        "kafka.isolation.level": "read_committed",
        "failOnDataLoss": "true",
    }
    (
        spark.read.format("kafka").options(**options).load()
        .selectExpr("CAST(key AS STRING) AS key",
                    "from_json(CAST(value AS STRING), 'sentence STRING').sentence AS sentence",
                    "topic", "partition", "offset", "unix_millis(timestamp) AS timestamp",
                    "headers")
        .write.format("noop").mode("overwrite").save()
    )  # fmt: skip
    return sum(r[1] - r[0] for _, r in ranges)


def read_figure(
    spark: Any, spout: Any, bootstrap: str, topic: str, batch: dict[int, tuple[int, int]],
    rounds: int, label: str,
) -> float:  # fmt: skip
    """Alternating rounds of both reads of ``batch``; ours / Spark records/s (the medians)."""
    records = sum(r[1] - r[0] for r in batch.values())
    rates: dict[str, list[float]] = defaultdict(list)
    sides = ["ours", "spark"]
    for r in range(rounds + 1):
        line = []
        for side in sides[r % 2 :] + sides[: r % 2]:
            started = time.perf_counter()
            if side == "ours":
                seen = our_read(spark, spout, topic, batch)
            else:
                seen = spark_read(spark, bootstrap, topic, batch)
            elapsed = time.perf_counter() - started
            if seen != records:
                msg = f"{side} read {seen} records, not {records}"
                raise RuntimeError(msg)
            line.append(f"{side} {elapsed:.2f} s ({records / elapsed:,.0f} records/s)")
            if r:
                rates[side].append(records / elapsed)
        warm = " (warm-up)" if r == 0 else ""
        print(f"{label} read round {r}: {', '.join(line)}{warm}", flush=True)
    for side in sides:
        mid = statistics.median(rates[side])
        width = (max(rates[side]) - min(rates[side])) / mid
        print(f"{label} read {side} records/s: median {mid:,.0f} [{min(rates[side]):,.0f}, "
              f"{max(rates[side]):,.0f}], spread {width:.0%}")  # fmt: skip
    per_round = [o / s for o, s in zip(rates["ours"], rates["spark"], strict=True)]
    print(f"{label} read ours / Spark, per round: {spread(per_round)}")
    return statistics.median(rates["ours"]) / statistics.median(rates["spark"])


SIDES = {"ours": "ours", "connect": "SSS on Connect", "local": "SSS local[2]"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed batches per side and size")
    parser.add_argument(
        "--warm-up",
        type=int,
        default=1,
        metavar="N",
        help="untimed batches per side before a size's timed ones (both JVMs warm up over "
        "several 5M batches: docs/performance.md)",
    )
    parser.add_argument("--sizes", default="10000,5000000", help="records per batch, a list")
    parser.add_argument("--sss", default="connect,local", help="SSS sides: connect, local")
    parser.add_argument("--read-rounds", type=int, default=5, help="timed reads per side (0: none)")
    parser.add_argument(
        "--server-conf", action="append", default=[], metavar="KEY=VALUE",
        help="a Spark setting of the Connect server ours runs on (a probe)",
    )  # fmt: skip
    parser.add_argument("--sss-worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.warm_up < 0 or args.rounds < 1:
        parser.error("--warm-up must be >= 0 and --rounds >= 1")
    if args.sss_worker:
        return sss_worker(*args.sss_worker)
    pg_url, hosts = os.environ.get("TRIDENT_PG_URL"), os.environ.get("TRIDENT_ZK_HOSTS")
    bootstrap = os.environ.get("TRIDENT_KAFKA_BOOTSTRAP")
    if not pg_url or not hosts or not bootstrap:
        print("TRIDENT_PG_URL / TRIDENT_ZK_HOSTS / TRIDENT_KAFKA_BOOTSTRAP unset: source "
              "scripts/env.sh", file=sys.stderr)  # fmt: skip
        return 2
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from airflow_trident.batch.lifecycle import zookeeper_batch_steps
    from airflow_trident.coordination.client import ZkConfig, connect
    from airflow_trident.hooks.spark import connect_share_key
    from airflow_trident.runtime.spark.session import remote_session
    from airflow_trident.spout.kafka import KafkaSpout
    from tests.harness.connect import running_connect_server
    from tests.harness.kafka import create_topic

    tag = uuid.uuid4().hex[:8]
    sss_sides = [side for side in ("connect", "local") if side in args.sss.split(",")]
    tables = {"ours": f"bench_ksss_ours_{tag}"}
    tables.update({side: f"bench_ksss_{side}_{tag}" for side in sss_sides})
    topic_name = f"bench_ksss_{tag}"
    create_topic(bootstrap, topic_name, partitions=PARTITIONS)
    topic = Topic(bootstrap, topic_name)
    work = Path(tempfile.mkdtemp(prefix="trident-kafka-sss-"))
    engine = sa.create_engine(pg_url)
    with engine.begin() as conn:
        for side in sss_sides:
            conn.execute(
                sa.text(
                    f'CREATE TABLE "{tables[side]}" '
                    "(word text PRIMARY KEY, batch_id bigint, val bigint)"
                )
            )
            conn.execute(sa.text(f'CREATE TABLE "{tables[side]}_batches" '
                                 "(batch_id bigint PRIMARY KEY)"))  # fmt: skip
    client = connect(ZkConfig(hosts=hosts, root=ZK_ROOT))
    spout = KafkaSpout(topic_name, config={"bootstrap.servers": bootstrap}, value_format="json",
                       fields=["sentence"])  # fmt: skip
    steps = zookeeper_batch_steps(
        topology(spout, tables["ours"]), client, root=ZK_ROOT, staging_root=str(work / "staging"),
        state_url=pg_url,
    )  # fmt: skip
    expected: Counter[str] = Counter()
    sizes = [int(s) for s in args.sizes.split(",")]
    ratios: dict[int, dict[str, float]] = {}
    read_ratios: dict[int, float] = {}
    exact = False
    index = 0
    local: LocalKafkaSss | None = None
    try:
        with (
            running_connect_server(
                work / "connect",
                quick_jit=False,
                conf=dict(item.split("=", 1) for item in args.server_conf),
            ) as url,
            sss_session(url) as spark,
        ):
            runners: dict[str, Any] = {"ours": Ours(steps, url)}
            server = listening_pid(int(url.rsplit(":", 1)[1]))  # ours and SSS on Connect
            bench_pid = os.getpid()  # ours' driver side (begin, commit) runs here

            def side_cpu(pids: list[int]) -> Counter[str]:
                # this process alone: the Connect server and the SSS worker are its children
                return sum((tree_cpu(p, descendants=p != bench_pid) for p in pids), Counter())

            if "connect" in sss_sides:
                runners["connect"] = KafkaSss(spark, bootstrap, topic_name, work / "connect-ckpt",
                                              pg_url, tables["connect"])  # fmt: skip
            if "local" in sss_sides:
                local = LocalKafkaSss(bootstrap, topic_name, work, pg_url, tables["local"])
                runners["local"] = local
            print(f"topic {topic_name} ({PARTITIONS} partitions) on {bootstrap}; ours and SSS "
                  f"on the Connect server {url} (local[2]); SSS local[2]: "
                  f"{'local' in sss_sides}", flush=True)  # fmt: skip
            for records in sizes:
                size = f"{records:,}"
                times: dict[str, list[float]] = defaultdict(list)
                phases: dict[str, list[float]] = defaultdict(list)
                sides = ["ours", *sss_sides]
                for r in range(args.rounds + args.warm_up):
                    timed = r >= args.warm_up
                    index += 1
                    landed = time.perf_counter()
                    topic.land(index, records, expected)
                    landed = time.perf_counter() - landed
                    shift = r % len(sides)
                    line = []
                    for side in sides[shift:] + sides[:shift]:  # each side goes first in turn
                        cpu_pids = {
                            "ours": [server, bench_pid],
                            "connect": [server],
                            "local": [local.process.pid] if local else [],
                        }[side]
                        cpu_before = side_cpu(cpu_pids)
                        if side == "ours":
                            elapsed, spent = runners["ours"].batch(f"bench-ksss-{index}")
                            big = ", ".join(f"{k} {v:.1f}" for k, v in spent.items() if v >= 0.5)
                            line.append(f"ours {elapsed:.2f} s ({big})")
                            if timed:
                                for name, value in spent.items():
                                    phases[name].append(value)
                        else:
                            elapsed, own = runners[side].batch()
                            batch_s = own.get("triggerExecution", 0.0)
                            line.append(f"{SIDES[side]} {elapsed:.2f} s (its batch "
                                        f"{batch_s:.2f} s)")  # fmt: skip
                            if timed:
                                times[f"{side}_batch"].append(batch_s)
                        used = side_cpu(cpu_pids)
                        used.subtract(cpu_before)
                        cpu = sum(used.values())
                        by_name = ", ".join(f"{k} {v:.1f}" for k, v in sorted(used.items()))
                        line[-1] += f" [CPU {cpu:.1f} s: {by_name}]"
                        if timed:
                            times[side].append(elapsed)
                            times[f"{side}_cpu"].append(cpu)
                    warm = "" if timed else " (warm-up)"
                    print(f"{size} round {r}: {', '.join(line)}{warm} [produced in "
                          f"{landed:.1f} s]", flush=True)  # fmt: skip
                med = {k: statistics.median(v) for k, v in times.items()}
                best = min(sss_sides, key=lambda side: med[side])
                print(f"{size} records per batch, median per batch: ours {med['ours']:.3f} s, "
                      f"SSS {med[best]:.3f} s ({SIDES[best]}, the faster; "
                      + ", ".join(f"{SIDES[x]} {med[x]:.3f} s, its batch alone "
                                  f"{med[x + '_batch']:.3f} s" for x in sss_sides)
                      + f"), {args.rounds} rounds")  # fmt: skip
                for side in ["ours", *sss_sides]:
                    print(f"{size} {SIDES[side]} per batch: {spread(times[side])}")
                    print(f"{size} {SIDES[side]} CPU s per batch (its JVM, Spark's Python "
                          f"workers{', this process' if side == 'ours' else ''}): "
                          f"{spread(times[side + '_cpu'])}")  # fmt: skip
                total = sum(statistics.median(v) for v in phases.values())
                text = ", ".join(f"{k} {statistics.median(v):.3f}" for k, v in phases.items())
                print(f"{size} phases (median s): {text} (sum {total:.3f})")
                ratios[records] = {side: med["ours"] / med[side] for side in sss_sides}
                ratios[records]["best"] = med["ours"] / med[best]
                for side in sss_sides:
                    per_round = [o / x for o, x in zip(times["ours"], times[side], strict=True)]
                    print(f"{size} ours / {SIDES[side]}, per round: {spread(per_round)}")
                if args.read_rounds:  # both in the topology's shared session, as ours reads
                    with remote_session(url, share=connect_share_key(steps)) as reader:
                        read_ratios[records] = read_figure(
                            reader, spout, bootstrap, topic_name, topic.ranges[-1],
                            args.read_rounds, size,
                        )  # fmt: skip
        want = dict(expected)
        exact = True
        with engine.begin() as conn:
            for side, table in tables.items():
                found = conn.execute(sa.text(f'SELECT word, val FROM "{table}"')).all()
                rows: dict[str, int] = {str(w): int(v) for w, v in found}
                print(f"{SIDES[side]}: table equals the expected counts after {index} batches: "
                      f"{rows == want}")  # fmt: skip
                exact = exact and rows == want
    finally:
        if local is not None:
            local.close()
        with contextlib.suppress(Exception):
            steps.store.delete_all()  # type: ignore[attr-defined]
        client.stop()
        client.close()
        with engine.begin() as conn:
            for table in tables.values():
                conn.execute(sa.text(f'DROP TABLE IF EXISTS "{table}"'))
                conn.execute(sa.text(f'DROP TABLE IF EXISTS "{table}_batches"'))
        engine.dispose()
        delete_topics(bootstrap, [topic_name])
        shutil.rmtree(work, ignore_errors=True)
    for records, by_side in ratios.items():
        for side in sss_sides:
            print(f"ratio_{records}_vs_{side}={by_side[side]:.3f} ({records:,} records per batch, "
                  f"ours / {SIDES[side]})")  # fmt: skip
    for records, ratio in read_ratios.items():
        print(f"read_ratio_{records}={ratio:.3f} ({records:,} records, ours / spark.read "
              f"records/s; target >= 0.95)")  # fmt: skip
    for records, by_side in ratios.items():
        print(f"ratio={by_side['best']:.3f} ({records:,} records per batch, ours / the faster SSS)")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
