"""The ZooKeeper layout, as pure functions of names (no I/O).

``/<root>/<topology>/coordinator/{current_txid, committed_txid, attempts/<txid>,
meta/<spout>/<txid>, runs/<run_id>, txid_runs/<txid>/<run_id>, commits_started/<txid>}`` and
``/<root>/<topology>/spout_state/<spout>/{txids/<txid>, committed, base, layout}`` for
partitioned spouts' metadata (``/<root>/<topology>/user/<spout>/...`` before). Txid nodes are
zero-padded so that ZooKeeper's lexical child order is numeric order.

>>> p = CoordinatorPaths(root="/trident", topology="word_count")
>>> p.committed_txid
'/trident/word_count/coordinator/committed_txid'
>>> p.meta("sentences", 12)
'/trident/word_count/coordinator/meta/sentences/00000000000000000012'
>>> p.run("manual__2026-11-23T06:00:00+00:00")
'/trident/word_count/coordinator/runs/manual__2026-11-23T06%3A00%3A00%2B00%3A00'
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_trident.errors import InvalidNameError
from airflow_trident.names import encode_segment, validate_name

__all__ = ["CoordinatorPaths", "parse_txid_node", "txid_node"]

_WIDTH = 20


def txid_node(txid: int) -> str:
    """The znode name of ``txid``: zero-padded so lexical order is numeric order."""
    return str(txid).zfill(_WIDTH)


def parse_txid_node(name: str) -> int | None:
    """The txid a znode name stands for, ``None`` for a foreign node."""
    return int(name) if name.isdigit() else None


@dataclass(frozen=True, slots=True)
class CoordinatorPaths:
    """Every znode path of one topology under ``root``."""

    root: str
    topology: str

    def __post_init__(self) -> None:
        validate_name(self.topology, kind="topology")
        if not self.root.startswith("/") or (self.root.endswith("/") and self.root != "/"):
            msg = f"ZooKeeper root {self.root!r} must start with '/' and not end with '/'"
            raise InvalidNameError(msg)
        for segment in self.root.strip("/").split("/"):
            if segment:
                validate_name(segment, kind="ZooKeeper root segment")

    @property
    def base(self) -> str:
        """``/<root>/<topology>``."""
        return f"{self.root.rstrip('/')}/{self.topology}"

    @property
    def coordinator(self) -> str:
        """Parent of the coordinator's nodes."""
        return f"{self.base}/coordinator"

    @property
    def current_txid(self) -> str:
        """The last txid allocated."""
        return f"{self.coordinator}/current_txid"

    @property
    def committed_txid(self) -> str:
        """The last txid committed (advanced by compare-and-set only)."""
        return f"{self.coordinator}/committed_txid"

    @property
    def attempts(self) -> str:
        """Parent of the per-txid attempt counters."""
        return f"{self.coordinator}/attempts"

    def attempt(self, txid: int) -> str:
        """The attempt counter of ``txid``."""
        return f"{self.attempts}/{txid_node(txid)}"

    def meta_root(self, spout: str) -> str:
        """Parent of ``spout``'s per-txid batch metadata."""
        return f"{self.coordinator}/meta/{validate_name(spout, kind='spout')}"

    def meta(self, spout: str, txid: int) -> str:
        """``spout``'s metadata for ``txid``."""
        return f"{self.meta_root(spout)}/{txid_node(txid)}"

    @property
    def runs(self) -> str:
        """Parent of the run-id -> txid bindings."""
        return f"{self.coordinator}/runs"

    def run(self, run_id: str) -> str:
        """The binding of ``run_id`` (any string, encoded as one segment)."""
        return f"{self.runs}/{encode_segment(run_id)}"

    @property
    def txid_runs_root(self) -> str:
        """Parent of the txid -> runs index (which runs were bound to each txid)."""
        return f"{self.coordinator}/txid_runs"

    def txid_runs(self, txid: int) -> str:
        """Parent of one node per run bound to ``txid``."""
        return f"{self.txid_runs_root}/{txid_node(txid)}"

    def txid_run(self, txid: int, run_id: str) -> str:
        """The index node saying ``run_id`` is bound to ``txid``."""
        return f"{self.txid_runs(txid)}/{encode_segment(run_id)}"

    @property
    def commits_started(self) -> str:
        """Parent of one node per txid whose commit started applying state."""
        return f"{self.coordinator}/commits_started"

    def commit_started(self, txid: int) -> str:
        """The node saying a commit of ``txid`` started applying state."""
        return f"{self.commits_started}/{txid_node(txid)}"

    def spout_state(self, spout: str) -> str:
        """Root of partitioned spout ``spout``'s partition metadata: ``txids/<txid>`` (every
        partition's metadata of a txid in one value), ``committed`` (every partition's committed
        metadata), ``base`` (rotated txids folded) and ``layout`` (see
        :mod:`airflow_trident.coordination.spout_state`)."""
        return f"{self.base}/spout_state/{validate_name(spout, kind='spout')}"

    def user(self, spout: str) -> str:
        """Root of ``spout``'s own state (partitioned spouts' metadata before 0.2: one node per
        partition and txid, read once when a topology is upgraded)."""
        return f"{self.base}/user/{validate_name(spout, kind='spout')}"
