"""A file log topology for DAG tests: ``FileLogSpout`` / ``OpaqueFileLogSpout`` over a landing
directory, words counted into SQL state of the same kind.

Configured by the environment, as the tasks and their ``spark-submit`` see it:

* ``TRIDENT_TEST_LANDING``: the log's root (``<root>/<partition>/<file>.jsonl``, field
  ``sentence``);
* ``TRIDENT_TEST_TOPOLOGY``: the topology name, also the state table (default
  ``e2e_file_log``);
* ``TRIDENT_TEST_FILE_LOG_KIND``: ``opaque`` (default) or ``transactional``.

>>> import json, tempfile
>>> from pathlib import Path
>>> root = Path(tempfile.mkdtemp())
>>> land(root, "p0", "0001.jsonl", ["a b", "b"])
>>> word_counts(root)
Counter({'b': 2, 'a': 1})
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from airflow_trident.operation import Count, Split
from airflow_trident.spout.file_log import FileLogSpout, OpaqueFileLogSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.topology import TridentTopology

__all__ = ["LANDING_ENV", "file_log_word_count", "land", "word_counts"]

LANDING_ENV = "TRIDENT_TEST_LANDING"
KIND_ENV = "TRIDENT_TEST_FILE_LOG_KIND"


def land(root: Path, partition: str, name: str, sentences: list[str]) -> None:
    """Land a JSON-lines file of ``sentences``: written under ``_name``, then renamed."""
    directory = root / partition
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f"_{name}"
    tmp.write_text("".join(json.dumps({"sentence": s}) + "\n" for s in sentences))
    tmp.rename(directory / name)


def word_counts(root: Path) -> Counter[str]:
    """The words of every landed file under ``root`` (what the state holds once all is read)."""
    total: Counter[str] = Counter()
    for path in sorted(root.glob("*/*.jsonl")):
        if not path.name.startswith(("_", ".")):
            for line in path.read_text().splitlines():
                total.update(json.loads(line)["sentence"].split())
    return total


def file_log_word_count() -> TridentTopology:
    """Sentences from the landing directory -> split -> count per word (SQL state)."""
    name = os.environ.get("TRIDENT_TEST_TOPOLOGY", "e2e_file_log")
    kind = os.environ.get(KIND_ENV, "opaque")
    root = os.environ.get(LANDING_ENV, "")
    spout_class = OpaqueFileLogSpout if kind == "opaque" else FileLogSpout
    topology = TridentTopology(name)
    topology.new_stream("sentences", spout_class(root, ["sentence"])).each(
        ["sentence"], Split(), ["word"]
    ).group_by(["word"]).persistent_aggregate(
        sql_state(None, name, kind, key_fields=("word",), value_type="bigint"),
        Count(),
        ["count"],
        name="counts",
    )
    return topology
