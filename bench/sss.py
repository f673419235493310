"""Benchmark: per-batch cost of our Connect mode against Spark Structured Streaming
(``Trigger.AvailableNow`` + ``foreachBatch``), the same word counts into PostgreSQL exactly once.

Each round lands one batch of new JSON-lines files (``{"sentence": "<10 words>"}``, a
1,000-word vocabulary, one file per partition directory ``p0..p3``) under one log root, then
runs one batch of each side over exactly those files, alternating which goes first:

* *ours* (``process_mode="connect"``, as the DAG's tasks do it, without Airflow): ``begin`` on
  the real ZooKeeper; attach to the topology's shared session on the running Spark Connect
  server (``[trident] connect_session_reuse``, as the tasks do), a new attempt, the
  emit (a :class:`~airflow_trident.spout.file_log.FileLogSpout` range read by Spark), the plan
  on Spark (``Split -> group_by(word) -> persistent_aggregate(Count)``) and its staging as
  Parquet, detach from the session; ``commit`` (the worker commit: the staged counts upserted into a
  transactional ``sql_state`` in PostgreSQL, the txid's compare-and-set in ZooKeeper, the
  ledger row); ``success``.
* *SSS*: ``spark.readStream.schema("sentence STRING").json(<root>/*/*.jsonl)`` (the same
  files, no schema inference) ``-> explode(split) -> groupBy(word).count()`` in
  ``foreachBatch`` with ``trigger(availableNow=True)`` and a checkpoint kept across rounds: a
  new query per batch, as a scheduler runs an AvailableNow job. ``foreachBatch`` collects the
  batch's counts and, in one PostgreSQL transaction, inserts the ``batchId`` into a table of
  applied batches (``ON CONFLICT DO NOTHING``; a replayed batch id changes nothing) and, only
  when that inserted a row, upserts the counts (``val = val + excluded.val``) into a table
  ``(word PRIMARY KEY, batch_id, val)``: ours' table is ``(word PRIMARY KEY, txid, val)``.
  The query runs on the same Spark Connect server, in one session kept open across rounds
  (``foreachBatch`` runs in a Python worker the server starts per query).

Sizes: ``--small-words`` (10,000 by default) and ``--large-words`` (5,000,000) per batch; the
first round of each size is a warm-up. Both tables must equal the expected counts at the end.
Printed per size: each round, the medians, our phases (median seconds), and a last line per
size ``ratio=<ours s per batch / SSS s per batch>`` (target <= 1.0); the large size's is last.

    source scripts/env.sh
    flock /tmp/heavy.lock .venv/bin/python bench/sss.py --rounds 5
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests/
from tests.harness import export_project_path

export_project_path()  # Airflow tasks and Spark's Python workers load tests.harness's topologies

PARTITIONS = 4
WORDS_PER_SENTENCE = 10
ZK_ROOT = "/trident_bench_sss"


def vocabulary(seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.choice(['w', 'W'])}ord{i:04d}" for i in range(1000)]


def land(root: Path, index: int, words: int, expected: Counter[str]) -> None:
    """One batch of ``words`` words: a new file per partition (written aside, then renamed)."""
    import json

    rng = random.Random(1000 + index)
    vocab = vocabulary()
    sentences = max(1, words // WORDS_PER_SENTENCE)
    per = -(-sentences // PARTITIONS)
    for p in range(PARTITIONS):
        count = min(per, sentences - p * per)
        lines = []
        for _ in range(max(0, count)):
            chosen = rng.choices(vocab, k=WORDS_PER_SENTENCE)
            expected.update(chosen)
            lines.append(json.dumps({"sentence": " ".join(chosen)}))
        part = root / f"p{p}"
        part.mkdir(parents=True, exist_ok=True)
        tmp = root / f".p{p}-{index:05d}.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(part / f"{index:05d}.jsonl")


def topology(root: Path, table: str) -> Any:
    from airflow_trident.operation import Count, Split
    from airflow_trident.spout.file_log import FileLogSpout
    from airflow_trident.state.sql import sql_state
    from airflow_trident.topology import TridentTopology

    t = TridentTopology(table)
    t.new_stream("sentences", FileLogSpout(root, ["sentence"])).each(
        ["sentence"], Split(), ["word"]
    ).group_by(["word"]).persistent_aggregate(
        sql_state(None, table, "transactional", key_fields=("word",), value_type="bigint"),
        Count(),
        ["count"],
        name="counts",
    )
    return t


class Ours:
    """One batch through the lifecycle, timed per phase."""

    def __init__(self, steps: Any, connect_url: str) -> None:
        self.steps, self.url = steps, connect_url

    def batch(self, run_id: str) -> tuple[float, dict[str, float]]:
        from airflow_trident.batch.on_spark import stage_frames
        from airflow_trident.hooks.spark import connect_share_key
        from airflow_trident.runtime.spark import SparkBatchProcessor
        from airflow_trident.runtime.spark.session import remote_session

        phases: dict[str, float] = {}
        started = mark = time.perf_counter()

        def lap(name: str) -> None:
            nonlocal mark
            now = time.perf_counter()
            phases[name] = phases.get(name, 0.0) + now - mark
            mark = now

        steps = self.steps
        txid = int(steps.begin(run_id)["txid"])
        lap("begin")
        # the topology's shared session, as the Connect tasks attach to it
        with remote_session(self.url, share=connect_share_key(steps)) as spark:
            lap("session open")
            plan = steps.begins.new_attempt(txid)
            sources = steps.emit(plan)
            lap("attempt+emit")
            processor = SparkBatchProcessor(steps.topology, states=steps.states)
            with processor.process(spark, plan.txid, sources) as result:
                lap("plan on Spark")
                stage_frames(steps.staging, plan, result)
                lap("Spark job + staging")
        lap("session close")
        steps.commit(txid)
        lap("commit")
        steps.success(txid)
        lap("success")
        if steps.store.commits.committed_txid() != txid:
            msg = f"txid {txid} was not committed"
            raise RuntimeError(msg)
        return time.perf_counter() - started, phases


def sss_batch_function(pg_url: str, table: str, batches: str) -> Any:
    """The ``foreachBatch`` body: counts, then one transaction de-duplicated by batch id."""

    def apply(df: Any, batch_id: int) -> None:
        import psycopg
        from pyspark.sql import functions as F

        counts = (
            df.select(F.explode(F.split("sentence", r"\s+")).alias("word"))
            .where(F.col("word") != "")
            .groupBy("word")
            .count()
            .collect()
        )
        with psycopg.connect(pg_url) as conn, conn.cursor() as cur:
            cur.execute(
                f'INSERT INTO "{batches}" (batch_id) VALUES (%s) ON CONFLICT DO NOTHING',
                (batch_id,),
            )
            if cur.rowcount == 1:  # a new batch id: apply; a replayed one changes nothing
                cur.execute(
                    f'CREATE TEMP TABLE "{table}_in" (word text, val bigint) ON COMMIT DROP'
                )
                with cur.copy(f'COPY "{table}_in" (word, val) FROM STDIN') as copy:
                    for row in counts:
                        copy.write_row((row[0], row[1]))
                cur.execute(
                    f'INSERT INTO "{table}" (word, batch_id, val) SELECT word, %s, val '
                    f'FROM "{table}_in" ORDER BY word ON CONFLICT (word) DO UPDATE '
                    f'SET batch_id = excluded.batch_id, val = "{table}".val + excluded.val',
                    (batch_id,),
                )

    return apply


class Sss:
    """One AvailableNow query per batch over the log root, the checkpoint kept across them."""

    def __init__(self, spark: Any, root: Path, checkpoint: Path, pg_url: str, table: str) -> None:
        self.spark, self.root = spark, root
        self.checkpoint = str(checkpoint)
        self.table, self.batches = table, f"{table}_batches"
        libpq = sa.engine.make_url(pg_url).set(drivername="postgresql")
        self.fn = sss_batch_function(
            libpq.render_as_string(hide_password=False), self.table, self.batches
        )

    def batch(self) -> tuple[float, dict[str, float]]:
        """(query start -> stopped seconds, the batch's phases from its progress: Spark's
        ``durationMs`` in seconds, ``triggerExecution`` the whole batch)."""
        started = time.perf_counter()
        frame = self.spark.readStream.schema("sentence STRING").json(f"{self.root}/*/*.jsonl")
        query = (
            frame.writeStream.foreachBatch(self.fn)
            .option("checkpointLocation", self.checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        elapsed = time.perf_counter() - started
        progress = query.lastProgress or {}
        if query.exception() is not None:
            msg = f"the SSS query failed: {query.exception()}"
            raise RuntimeError(msg)
        durations = progress.get("durationMs", {}) or {}
        return elapsed, {str(k): float(v) / 1000 for k, v in durations.items()}


def sss_worker(root: str, checkpoint: str, table: str) -> int:
    """``--sss-worker``: a warm ``local[2]`` session in this process; one AvailableNow query
    per ``batch`` line read from stdin, answered by ``<seconds> <its phases as JSON>``. The
    database URL comes from the inherited ``TRIDENT_PG_URL``, never the command line."""
    import json

    pg_url = os.environ["TRIDENT_PG_URL"]

    from airflow_trident.runtime.spark import local_session

    spark = local_session("local[2]", shuffle_partitions=4, app_name="bench-sss-local")
    spark.sparkContext.setLogLevel("ERROR")
    sss = Sss(spark, Path(root), Path(checkpoint), pg_url, table)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "batch":
            break
        elapsed, own = sss.batch()
        print(f"{elapsed} {json.dumps(own, separators=(',', ':'))}", flush=True)
    spark.stop()
    return 0


class SssWorker:
    """An SSS side in a ``local[2]`` session of a process of its own (a classic session and a
    Connect client do not mix in one Python process): ``script --sss-worker *args``, asked for
    one batch per ``batch()`` line by line."""

    def __init__(self, script: str, args: list[str], pg_url: str) -> None:
        import subprocess

        self.process = subprocess.Popen(
            [sys.executable, script, "--sss-worker", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,  # its stderr: ours
            env={**os.environ, "TRIDENT_PG_URL": pg_url},  # the password stays off argv
        )  # fmt: skip
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.stdin, self.stdout = self.process.stdin, self.process.stdout
        if self.stdout.readline().strip() != "ready":
            msg = "the local SSS worker did not start"
            raise RuntimeError(msg)

    def batch(self) -> tuple[float, dict[str, float]]:
        import json

        self.stdin.write("batch\n")
        self.stdin.flush()
        answer = self.stdout.readline().split(maxsplit=1)
        if len(answer) != 2:
            msg = "the local SSS worker failed (run it alone to see why)"
            raise RuntimeError(msg)
        return float(answer[0]), dict(json.loads(answer[1]))

    def close(self) -> None:
        with contextlib.suppress(BrokenPipeError):
            self.stdin.write("stop\n")
            self.stdin.close()
        self.process.wait(timeout=60)


class LocalSss(SssWorker):
    """The file log's SSS side in a ``local[2]`` session of a process of its own."""

    def __init__(self, root: Path, work: Path, pg_url: str, table: str) -> None:
        super().__init__(__file__, [str(root), str(work / "local"), table], pg_url)


@contextlib.contextmanager
def sss_session(connect_url: str) -> Iterator[Any]:
    """A Connect session of its own (not the process's default one, which ours opens and
    stops per batch as the process task does)."""
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    spark = RemoteSession(connection=connect_url)
    try:
        yield spark
    finally:
        spark.stop()


def tree_cpu(pid: int, *, descendants: bool = True) -> Counter[str]:
    """CPU seconds (user + system) process ``pid`` and all its descendants have used, the
    children they have already reaped included, by process name (``java``: a JVM, ``python``:
    Spark's Python workers or a Python driver); ``descendants=False``: ``pid``'s own only."""
    import psutil

    spent: Counter[str] = Counter()
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)] if descendants else [root]
    except psutil.NoSuchProcess:
        return spent
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            t = proc.cpu_times()
            name = "java" if proc.name() == "java" else "python"
            spent[name] += t.user + t.system
            if descendants:
                spent[name] += t.children_user + t.children_system
    return spent


def listening_pid(port: int) -> int:
    """The process listening on 127.0.0.1 ``port`` (a Connect server's JVM)."""
    import psutil

    for conn in psutil.net_connections("tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
            return int(conn.pid)
    msg = f"no process listens on port {port}"
    raise RuntimeError(msg)


def spread(values: list[float]) -> str:
    """``median [min, max], spread (max - min) / median`` of ``values``, and the values."""
    mid = statistics.median(values)
    width = (max(values) - min(values)) / mid
    rounded = [round(v, 3) for v in values]
    return (
        f"median {mid:.3f} [{min(values):.3f}, {max(values):.3f}], spread {width:.0%} of {rounded}"
    )


SIDES = {"ours": "ours", "connect": "SSS on Connect", "local": "SSS local[2]"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed batches per side and size")
    parser.add_argument("--small-words", type=int, default=10_000)
    parser.add_argument("--large-words", type=int, default=5_000_000)
    parser.add_argument("--sizes", default="small,large", help="small, large or both")
    parser.add_argument("--sss", default="connect,local", help="SSS sides: connect, local")
    parser.add_argument("--sss-worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sss_worker:
        return sss_worker(*args.sss_worker)
    pg_url, hosts = os.environ.get("TRIDENT_PG_URL"), os.environ.get("TRIDENT_ZK_HOSTS")
    if not pg_url or not hosts:
        print("TRIDENT_PG_URL / TRIDENT_ZK_HOSTS unset: source scripts/env.sh", file=sys.stderr)
        return 2
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from airflow_trident.batch.lifecycle import zookeeper_batch_steps
    from airflow_trident.coordination.client import ZkConfig, connect
    from tests.harness.connect import running_connect_server

    tag = uuid.uuid4().hex[:8]
    sss_sides = [side for side in ("connect", "local") if side in args.sss.split(",")]
    tables = {"ours": f"bench_sss_ours_{tag}"}
    tables.update({side: f"bench_sss_{side}_{tag}" for side in sss_sides})
    work = Path(tempfile.mkdtemp(prefix="trident-sss-"))
    root = work / "log"
    root.mkdir()
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
    steps = zookeeper_batch_steps(
        topology(root, tables["ours"]), client, root=ZK_ROOT,
        staging_root=str(work / "staging"), state_url=pg_url,
    )  # fmt: skip
    expected: Counter[str] = Counter()
    sizes = {"small": args.small_words, "large": args.large_words}
    chosen = [s for s in ("small", "large") if s in args.sizes.split(",")]
    ratios: dict[str, dict[str, float]] = {}
    spreads: dict[tuple[str, str], list[float]] = {}
    exact = False
    index = 0
    local: LocalSss | None = None
    try:
        with (
            running_connect_server(work / "connect", quick_jit=False) as url,
            sss_session(url) as spark,
        ):
            runners: dict[str, Any] = {"ours": Ours(steps, url)}
            if "connect" in sss_sides:
                runners["connect"] = Sss(spark, root, work / "connect-ckpt", pg_url,
                                         tables["connect"])  # fmt: skip
            if "local" in sss_sides:
                local = LocalSss(root, work, pg_url, tables["local"])
                runners["local"] = local
            print(f"ours and SSS on the Connect server {url} (local[2]); "
                  f"SSS local[2]: {'local' in sss_sides} (a warm session in its own process)",
                  flush=True)  # fmt: skip
            for size in chosen:
                words = sizes[size]
                times: dict[str, list[float]] = defaultdict(list)
                phases: dict[str, list[float]] = defaultdict(list)
                sss_phases: dict[str, dict[str, list[float]]] = defaultdict(
                    lambda: defaultdict(list)
                )
                sides = ["ours", *sss_sides]
                for r in range(args.rounds + 1):
                    index += 1
                    land(root, index, words, expected)
                    shift = r % len(sides)
                    line = []
                    for side in sides[shift:] + sides[:shift]:  # each side goes first in turn
                        if side == "ours":
                            elapsed, spent = runners["ours"].batch(f"bench-sss-{index}")
                            line.append(f"ours {elapsed:.2f} s")
                            if r:
                                for name, value in spent.items():
                                    phases[name].append(value)
                        else:
                            elapsed, own = runners[side].batch()
                            batch_s = own.get("triggerExecution", 0.0)
                            line.append(
                                f"{SIDES[side]} {elapsed:.2f} s (its batch {batch_s:.2f} s)"
                            )
                            if r:
                                times[f"{side}_batch"].append(batch_s)
                                own["query start + stop (outside the batch)"] = elapsed - batch_s
                                for name, value in own.items():
                                    sss_phases[side][name].append(value)
                        if r:
                            times[side].append(elapsed)
                    warm = " (warm-up)" if r == 0 else ""
                    print(f"{size} round {r}: {', '.join(line)}{warm}", flush=True)
                med = {k: statistics.median(v) for k, v in times.items()}
                best = min(sss_sides, key=lambda side: med[side])
                print(f"{size} ({words:,} words per batch) median per batch: ours "
                      f"{med['ours']:.3f} s, SSS {med[best]:.3f} s ({SIDES[best]}, the faster; "
                      + ", ".join(f"{SIDES[x]} {med[x]:.3f} s, its batch alone "
                                  f"{med[x + '_batch']:.3f} s" for x in sss_sides)
                      + f"), {args.rounds} rounds")  # fmt: skip
                for side in ["ours", *sss_sides]:
                    print(f"{size} {SIDES[side]} per batch: {spread(times[side])}")
                total = sum(statistics.median(v) for v in phases.values())
                phase_text = ", ".join(
                    f"{name} {statistics.median(v):.3f}" for name, v in phases.items()
                )
                print(f"{size} phases (median s): {phase_text} (sum {total:.3f})")
                for side in sss_sides:
                    text = ", ".join(f"{name} {statistics.median(v):.3f}"
                                     for name, v in sorted(sss_phases[side].items()))  # fmt: skip
                    print(f"{size} {SIDES[side]} phases (median s, Spark's durationMs): {text}")
                ratios[size] = {side: med["ours"] / med[side] for side in sss_sides}
                ratios[size]["best"] = med["ours"] / med[best]
                for side in sss_sides:  # the same round's batches: the spread of the ratio
                    per_round = [o / x for o, x in zip(times["ours"], times[side], strict=True)]
                    print(f"{size} ours / {SIDES[side]}, per round: {spread(per_round)}")
                    spreads[(size, side)] = per_round
        want = dict(expected)
        exact = True
        with engine.begin() as conn:
            for side, table in tables.items():
                found = conn.execute(sa.text(f'SELECT word, val FROM "{table}"')).all()
                rows: dict[str, int] = {str(w): int(v) for w, v in found}
                applied = (
                    ""
                    if side == "ours"
                    else ", batch ids applied: "
                    + str(conn.execute(sa.text(f'SELECT count(*) FROM "{table}_batches"')).scalar())
                )
                print(f"{SIDES[side]}: table equals the expected counts after {index} batches"
                      f"{applied}: {rows == want}")  # fmt: skip
                exact = exact and rows == want
    finally:
        if local is not None:
            local.close()
        with contextlib.suppress(Exception):
            steps.store.delete_all()  # type: ignore[attr-defined]  # the ZooKeeper store's
        client.stop()
        client.close()
        with engine.begin() as conn:
            for table in tables.values():
                conn.execute(sa.text(f'DROP TABLE IF EXISTS "{table}"'))
                conn.execute(sa.text(f'DROP TABLE IF EXISTS "{table}_batches"'))
        engine.dispose()
        shutil.rmtree(work, ignore_errors=True)
    for size in chosen:
        for side in sss_sides:
            print(f"ratio_{size}_vs_{side}={ratios[size][side]:.3f} ({sizes[size]:,} words per "
                  f"batch, ours / {SIDES[side]})")  # fmt: skip
    for (size, side), per_round in spreads.items():
        print(f"ratio_{size}_vs_{side}_per_round_median={statistics.median(per_round):.3f} "
              f"[{min(per_round):.3f}, {max(per_round):.3f}]")  # fmt: skip
    for size in chosen:
        print(f"ratio_{size}={ratios[size]['best']:.3f} (ours / the faster SSS)")
    for size in chosen:
        print(f"ratio={ratios[size]['best']:.3f}")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
