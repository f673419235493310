"""The main job's real data: JSON-lines files landing in a directory, counted by word.

* :func:`land_files` — a small generator: a few JSON-lines files per partition, written under a
  temp name and renamed (the landing convention of ``docs/sources/file_log.md``);
* :data:`file_word_count` — a :class:`~airflow_trident.spout.file_log.FileLogSpout` over
  ``<data dir>/landing`` -> split -> group by word -> persistent count (transactional SQL state
  in the run's state database), every sentence also appended to the Delta table
  ``<data dir>/delta/sentences`` (exactly-once by Delta's application transaction), and the DRPC
  stream ``words`` summing the counts of the words asked for.

The data directory is ``TRIDENT_DATA_DIR`` (default ``~/.airflow_trident/data``): the DAG's
tasks and its ``spark-submit`` read it from their environment.

>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> land_files(root, batch=1, files_per_partition=2, records_per_file=3)
{'p0': 6, 'p1': 6}
>>> sorted(p.name for p in (root / "p0").iterdir())
['000001-000.jsonl', '000001-001.jsonl']
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from airflow_trident.operation import Count, FilterNull, MapGet, Split, Sum
from airflow_trident.spout.file_log import FileLogSpout
from airflow_trident.state.delta import DeltaWriter, delta_state
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology

__all__ = ["DATA_ENV", "data_dir", "delta_path", "file_word_count", "land_files", "landing_dir"]

DATA_ENV = "TRIDENT_DATA_DIR"
SENTENCES = (
    "the cow jumped over the moon",
    "the man went to the store and bought some candy",
    "four score and seven years ago",
    "how many apples can you eat",
    "to be or not to be the person",
)


def data_dir() -> Path:
    """``TRIDENT_DATA_DIR``, else ``~/.airflow_trident/data``."""
    return Path(os.environ.get(DATA_ENV) or Path.home() / ".airflow_trident" / "data")


def landing_dir() -> Path:
    """Where the files land: ``<data dir>/landing/<partition>/<file>``."""
    return data_dir() / "landing"


def delta_path() -> Path:
    """The Delta table of every sentence read."""
    return data_dir() / "delta" / "sentences"


def land_files(
    root: Path,
    *,
    batch: int,
    partitions: tuple[str, ...] = ("p0", "p1"),
    files_per_partition: int = 2,
    records_per_file: int = 20,
) -> dict[str, int]:
    """Land ``files_per_partition`` JSON-lines files of seed sentences in each partition of
    ``root`` (names ``<batch>-<n>.jsonl``, so later batches sort after); records per partition."""
    rng = random.Random(batch)
    landed: dict[str, int] = {}
    for partition in partitions:
        directory = root / partition
        directory.mkdir(parents=True, exist_ok=True)
        for n in range(files_per_partition):
            name = f"{batch:06d}-{n:03d}.jsonl"
            lines = [
                json.dumps({"sentence": rng.choice(SENTENCES)}) for _ in range(records_per_file)
            ]
            tmp = directory / f"_{name}"
            tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            tmp.rename(directory / name)  # complete: now a batch may read it
        landed[partition] = files_per_partition * records_per_file
    return landed


def _build() -> TridentTopology:
    topology = TridentTopology("file_word_count")
    sentences = topology.new_stream("sentences", FileLogSpout(landing_dir(), ["sentence"]))
    sentences.partition_persist(
        delta_state(str(delta_path()), "file_word_count.sentences"),
        ["sentence"],
        DeltaWriter(),
        name="sentences_delta",
    )
    counts = (
        sentences.each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(
            sql_state(None, "file_word_counts", "transactional", key_fields=("word",),
                      value_type="bigint"),
            Count(),
            ["count"],
            name="word_counts",
        )
    )  # fmt: skip
    (
        topology.new_drpc_stream("words")
        .each(["args"], Split(), ["word"])
        .group_by(["word"])
        .state_query(counts, ["word"], MapGet(), ["count"])
        .each(["count"], FilterNull())
        .aggregate(["count"], Sum(), ["sum"])
    )
    return topology


file_word_count = _build()
