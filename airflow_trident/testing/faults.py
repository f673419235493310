"""Crash injection for testing topologies end to end (shipped so users can test theirs).

* :class:`FailOnce` — a Function that fails the first attempt of a batch (across processes);
* :func:`expire_session` — expire a kazoo client's ZooKeeper session, as a long GC pause or a
  network partition would (the fault harness of :mod:`airflow_trident.testing.schedule` uses
  it; :mod:`airflow_trident.testing.fault_points` has the in-process fault points).

>>> import tempfile, pathlib
>>> marker = pathlib.Path(tempfile.mkdtemp()) / "failed-once"
>>> fail = FailOnce(str(marker))
>>> from airflow_trident.tuple import TridentCollector, TridentTuple
>>> try:
...     fail.execute(TridentTuple(("x",), ("w",)), TridentCollector())
... except RuntimeError as exc:
...     print(exc)
injected failure (once): FailOnce at ...
>>> c = TridentCollector(); fail.execute(TridentTuple(("x",), ("w",)), c); c.rows
[('x',)]
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from kazoo.client import KazooClient, KazooState

from airflow_trident.operation.base import Function, OperationContext
from airflow_trident.tuple import TridentCollector, TridentTuple

__all__ = ["FailOnce", "expire_session"]


class FailOnce(Function):
    """Passes its input through, but raises on the first tuple it ever sees (across processes:
    a marker file remembers), so the first attempt of a batch fails and its retry succeeds.

    An empty ``marker`` disables it. Spark's driver-side type sample never fails it (its errors
    fail nothing: the marker must be left for the workers' run of the batch).
    """

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self._sample = False

    def prepare(self, context: OperationContext) -> None:
        self._sample = context.type_sample

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        if self.marker and not self._sample and not os.path.exists(self.marker):
            Path(self.marker).parent.mkdir(parents=True, exist_ok=True)
            Path(self.marker).write_text("failed once\n")
            msg = f"injected failure (once): FailOnce at {self.marker}"
            raise RuntimeError(msg)
        collector.emit(tuple_.values)


def expire_session(client: KazooClient, *, timeout_s: float = 15.0) -> bool:
    """Expire ``client``'s ZooKeeper session from outside, the documented way: a second client
    joins the same session (id and password) and closes it. ``client`` then sees its session
    lost, and kazoo reconnects with a new one (calls in flight raise ``SessionExpiredError``,
    which ``client.retry`` retries).

    Returns whether ``client`` noticed the loss within ``timeout_s`` (it may also notice only
    at its next call).
    """
    lost = threading.Event()

    def listener(state: KazooState) -> bool:
        if state == KazooState.LOST:
            lost.set()
            return True  # remove this listener
        return False

    client.add_listener(listener)
    hosts = ",".join(f"{host}:{port}" for host, port in client.hosts)
    other = KazooClient(hosts=hosts, client_id=client.client_id, timeout=timeout_s)
    try:
        other.start(timeout=timeout_s)
    finally:
        other.stop()
        other.close()
    noticed = lost.wait(timeout_s)
    if not noticed:
        client.remove_listener(listener)
    return noticed
