"""Fault points around what :class:`~airflow_trident.batch.steps.BatchSteps` is given.

Long on purpose: every fault point wraps one seam of the lifecycle (store, partition state, state,
spouts' emitters) with the same arming rules; they are one catalogue for users to read.

Faults are injected without touching production code paths: the harness wraps the coordinator
store, the spouts, the state factories and adds a Function step, and every wrapper calls
:meth:`FaultInjector.hit` with a *point* name before and after delegating:

==================================  =========================================================
point                               what a fault there means
==================================  =========================================================
``store.commit.before``             states written, ZooKeeper's compare-and-set not done
``store.commit.after``              compare-and-set done, the task died before reporting it
``store.<method>.before|after``     any other coordinator call (bind_run, next_attempt, ...)
``partition_state.<m>.before|after`` a partitioned spout's own metadata in ZooKeeper
``spout.emit.before|after``         the emitter of one partition, before or after it emitted
``function.execute``                user code of the processing phase (one tuple)
``state.<op>.before|after``         one state partition: begin_commit, multi_combine, commit...
==================================  =========================================================

:meth:`FaultInjector.arm` makes the n-th hit of a point (``fnmatch`` pattern: ``"state.commit.*"``,
``"*"``) run an action: raise :class:`InjectedFault` (default), expire the ZooKeeper session,
restart a private server, or ``SIGKILL`` the process (:func:`kill_this_process`).

Examples
--------
>>> from airflow_trident.coordination.memory import MemoryCoordinatorStore
>>> injector = FaultInjector()
>>> store = FaultyStore(MemoryCoordinatorStore("doc"), injector)
>>> injector.arm("store.commit.before")
>>> store.bind_run("r1")
1
>>> try:
...     store.commit(1)
... except InjectedFault as exc:
...     print(exc)
injected fault at store.commit.before (hit 1 of 'store.commit.before')
>>> store.committed_txid(), injector.fired
(0, Counter({'store.commit.before': 1}))
>>> store.commit(1); store.committed_txid()
1
"""

from __future__ import annotations

import fnmatch
import os
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.coordination.protocol import CoordinatorStoreProtocol, StorePaths
from airflow_trident.errors import TridentError
from airflow_trident.operation.base import Function
from airflow_trident.spout.base import Collector
from airflow_trident.spout.tx_state import PartitionState
from airflow_trident.state.base import Key, State
from airflow_trident.tuple import TridentCollector, TridentTuple

__all__ = [
    "FailWhenArmed",
    "FaultInjector",
    "FaultyOpaqueSpout",
    "FaultyPartitionState",
    "FaultyState",
    "FaultyStateFactory",
    "FaultyStore",
    "FaultyTransactionalSpout",
    "InjectedFault",
    "faulty_spout",
    "kill_this_process",
]


class InjectedFault(TridentError):
    """A failure a fault harness injected on purpose."""


def kill_this_process() -> None:
    """``SIGKILL`` the calling process: no ``finally``, no rollback, no goodbye."""
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class _Armed:
    pattern: str
    at: int
    action: Callable[[], None] | None
    label: str
    hits: int = 0


class FaultInjector:
    """Counts hits of fault points and fires armed faults (thread-safe).

    Attributes
    ----------
    hits:
        Hits per point since creation (to choose where a later fault lands).
    fired:
        Faults fired, by label (the point, unless :meth:`arm` named it).
    """

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.fired: Counter[str] = Counter()
        self._armed: list[_Armed] = []
        self._lock = threading.Lock()
        self.enabled = True

    def arm(
        self,
        pattern: str,
        *,
        at: int = 1,
        action: Callable[[], None] | None = None,
        label: str | None = None,
    ) -> None:
        """Fire once at the ``at``-th hit (counted from now) of a point matching ``pattern``.

        ``action`` runs in place of raising :class:`InjectedFault` (if it returns, the code
        under test continues).
        """
        with self._lock:
            self._armed.append(_Armed(pattern, max(1, at), action, label or pattern))

    def disarm(self) -> list[str]:
        """Drop every armed fault; return the labels of those that never fired."""
        with self._lock:
            unfired, self._armed = [a.label for a in self._armed], []
        return unfired

    @property
    def armed(self) -> bool:
        """Whether a fault is waiting to fire."""
        return bool(self._armed)

    def hit(self, point: str) -> None:
        """Count a hit of ``point`` and fire a fault armed for it.

        Raises
        ------
        InjectedFault
            When a fault without an action fires here.
        """
        if not self.enabled:
            return
        fire: _Armed | None = None
        with self._lock:
            self.hits[point] += 1
            for armed in self._armed:
                if fnmatch.fnmatchcase(point, armed.pattern):
                    armed.hits += 1
                    if armed.hits >= armed.at:
                        fire = armed
                        break
            if fire is not None:
                self._armed.remove(fire)
                self.fired[fire.label] += 1
        if fire is None:
            return
        if fire.action is not None:
            fire.action()
            return
        msg = f"injected fault at {point} (hit {fire.at} of {fire.pattern!r})"
        raise InjectedFault(msg)

    def around(self, prefix: str, call: Callable[[], Any]) -> Any:
        """``hit(prefix.before)``, ``call()``, ``hit(prefix.after)``; the call's result."""
        self.hit(f"{prefix}.before")
        result = call()
        self.hit(f"{prefix}.after")
        return result


class FaultyPartitionState:
    """A partitioned spout's metadata store whose every call is a fault point."""

    def __init__(self, inner: PartitionState, injector: FaultInjector) -> None:
        self.inner = inner
        self.injector = injector

    def _do(self, name: str, call: Callable[[], Any]) -> Any:
        return self.injector.around(f"partition_state.{name}", call)

    def get(self, partition: str, txid: int) -> Any:
        return self._do("get", lambda: self.inner.get(partition, txid))

    def put(self, partition: str, txid: int, meta: Any) -> None:
        self._do("put", lambda: self.inner.put(partition, txid, meta))

    def latest_before(self, partition: str, txid: int) -> tuple[int, Any] | None:
        found: tuple[int, Any] | None = self._do(
            "latest_before", lambda: self.inner.latest_before(partition, txid)
        )
        return found

    def get_committed(self, partition: str) -> Any:
        return self._do("get_committed", lambda: self.inner.get_committed(partition))

    def committed_path(self, partition: str) -> str | None:
        return self.inner.committed_path(partition)

    def put_committed(self, partition: str, meta: Any) -> None:
        self._do("put_committed", lambda: self.inner.put_committed(partition, meta))

    def cleanup_before(self, txid: int) -> int:
        cleanup = getattr(self.inner, "cleanup_before", None)
        if not callable(cleanup):
            return 0
        removed: int = self._do("cleanup_before", lambda: cleanup(txid))
        return removed


class FaultyStore:
    """A :class:`~airflow_trident.coordination.protocol.CoordinatorStoreProtocol` delegating to
    ``inner`` (the real ZooKeeper store), each call a fault point ``store.<method>``.

    ``store.commit.before`` is "the states were written, the compare-and-set was not done";
    ``store.commit.after`` is "it was done, and the task died before it could say so".
    Attributes the protocol does not name (``client``, ``delete_all``...) pass through.
    """

    def __init__(self, inner: CoordinatorStoreProtocol, injector: FaultInjector) -> None:
        self.inner = inner
        self.injector = injector

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _do(self, name: str, call: Callable[[], Any]) -> Any:
        return self.injector.around(f"store.{name}", call)

    @property
    def paths(self) -> StorePaths:
        return self.inner.paths

    def current_txid(self) -> int:
        result: int = self._do("current_txid", self.inner.current_txid)
        return result

    def allocate_txid(self) -> int:
        result: int = self._do("allocate_txid", self.inner.allocate_txid)
        return result

    def txid_for_run(self, run_id: str) -> int | None:
        result: int | None = self._do("txid_for_run", lambda: self.inner.txid_for_run(run_id))
        return result

    def bind_run(self, run_id: str, txid: int | None = None) -> int:
        result: int = self._do("bind_run", lambda: self.inner.bind_run(run_id, txid))
        return result

    def attempt(self, txid: int) -> TransactionAttempt | None:
        result: TransactionAttempt | None = self._do("attempt", lambda: self.inner.attempt(txid))
        return result

    def next_attempt(self, txid: int) -> TransactionAttempt:
        result: TransactionAttempt = self._do("next_attempt", lambda: self.inner.next_attempt(txid))
        return result

    def put_meta(self, spout: str, txid: int, meta: Any, *, overwrite: bool = False) -> None:
        self._do("put_meta", lambda: self.inner.put_meta(spout, txid, meta, overwrite=overwrite))

    def get_meta(self, spout: str, txid: int) -> Any:
        return self._do("get_meta", lambda: self.inner.get_meta(spout, txid))

    def has_meta(self, spout: str, txid: int) -> bool:
        result: bool = self._do("has_meta", lambda: self.inner.has_meta(spout, txid))
        return result

    def latest_meta_before(self, spout: str, txid: int) -> tuple[int, Any] | None:
        result: tuple[int, Any] | None = self._do(
            "latest_meta_before", lambda: self.inner.latest_meta_before(spout, txid)
        )
        return result

    def committed_txid(self) -> int:
        result: int = self._do("committed_txid", self.inner.committed_txid)
        return result

    def commit(
        self, txid: int, *, token: str | None = None, writes: Mapping[str, Any] | None = None
    ) -> None:
        self._do("commit", lambda: self.inner.commit(txid, token=token, writes=writes))

    def cleanup_before(self, txid: int, *, runs_before: int | None = None) -> int:
        result: int = self._do(
            "cleanup_before",
            lambda: self.inner.cleanup_before(txid, runs_before=runs_before),
        )
        return result

    def partition_state(self, spout: str) -> PartitionState:
        return FaultyPartitionState(self.inner.partition_state(spout), self.injector)


class FaultyState:
    """One partition's state whose every call is a fault point ``state.<op>``.

    ``state.commit.before`` at its n-th hit is "a commit failing after n-1 partitions (or
    states) were committed"; ``state.commit.after`` is "this partition's commit landed, and the
    task died before the next". Other attributes (``backing``, ``revert_txid``...) pass through,
    their calls hooked too.
    """

    def __init__(
        self,
        inner: Any,
        injector: FaultInjector,
        partition_index: int,
        *,
        hidden: frozenset[str] = frozenset(),
    ) -> None:
        self.inner = inner
        self.injector = injector
        self.partition_index = partition_index
        self.hidden = hidden

    def _do(self, name: str, call: Callable[[], Any]) -> Any:
        return self.injector.around(f"state.{name}", call)

    def __getattr__(self, name: str) -> Any:
        if name in self.__dict__.get("hidden", ()):
            msg = f"{name!r} is hidden from the runtime by the fault harness"
            raise AttributeError(msg)
        value = getattr(self.inner, name)
        if not callable(value) or name.startswith("_"):
            return value

        def hooked(*args: Any, **kwargs: Any) -> Any:
            return self._do(name, lambda: value(*args, **kwargs))

        return hooked

    def begin_commit(self, txid: int) -> None:
        self._do("begin_commit", lambda: self.inner.begin_commit(txid))

    def commit(self, txid: int) -> None:
        self._do("commit", lambda: self.inner.commit(txid))

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        result: list[Any] = self._do("multi_get", lambda: self.inner.multi_get(keys))
        return result

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        self._do("multi_put", lambda: self.inner.multi_put(keys, values))

    def multi_update(self, keys: Sequence[Key], updaters: Sequence[Any]) -> list[Any]:
        result: list[Any] = self._do(
            "multi_update", lambda: self.inner.multi_update(keys, updaters)
        )
        return result

    def multi_combine(self, keys: Sequence[Key], deltas: Sequence[Any], op: Any) -> None:
        self._do("multi_combine", lambda: self.inner.multi_combine(keys, deltas, op))

    def rollback(self) -> None:
        # Not a fault point: it runs while another failure is being handled.
        rollback = getattr(self.inner, "rollback", None)
        if callable(rollback):
            rollback()


class FaultyStateFactory:
    """A state factory whose states are :class:`FaultyState` s over ``inner``'s.

    It keeps what the runtime asks of a factory: ``state_type`` (the opaque revert reads it),
    and :meth:`located_at` (a run's state database, through its ``StateBinding``).

    ``hidden`` names optional state methods the runtime must not see (``revert_txid``): a
    mutation test of a harness, which must then find the bug that method prevents.
    """

    def __init__(
        self, inner: Any, injector: FaultInjector, *, hidden: frozenset[str] = frozenset()
    ) -> None:
        self.inner = inner
        self.injector = injector
        self.hidden = hidden

    @property
    def state_type(self) -> Any:
        """The rule of the wrapped factory's states."""
        return getattr(self.inner, "state_type", None)

    def located_at(self, url: str) -> FaultyStateFactory:
        """The wrapped factory located at ``url`` (when it can be), still faulty."""
        locate = getattr(self.inner, "located_at", None)
        if not callable(locate):
            return self
        return FaultyStateFactory(locate(url), self.injector, hidden=self.hidden)

    def make_state(self, partition_index: int = 0, num_partitions: int = 1) -> State:
        inner = self.inner.make_state(partition_index, num_partitions)
        state: State = FaultyState(inner, self.injector, partition_index, hidden=self.hidden)
        return state

    def __repr__(self) -> str:
        return f"FaultyStateFactory({self.inner!r})"


class _FaultyCollectorMixin:
    injector: FaultInjector

    def _emit(self, call: Callable[[], Any]) -> Any:
        return self.injector.around("spout.emit", call)


class _FaultyTransactionalEmitter(_FaultyCollectorMixin):
    def __init__(self, inner: Any, injector: FaultInjector) -> None:
        self.inner = inner
        self.injector = injector

    def get_ordered_partitions(self, all_partition_info: Any) -> Sequence[str]:
        partitions: Sequence[str] = self.inner.get_ordered_partitions(all_partition_info)
        return partitions

    def emit_partition_batch_new(
        self,
        attempt: TransactionAttempt,
        collector: Collector,
        partition: str,
        last_partition_meta: Any,
    ) -> Any:
        return self._emit(
            lambda: self.inner.emit_partition_batch_new(
                attempt, collector, partition, last_partition_meta
            )
        )

    def emit_partition_batch(
        self, attempt: TransactionAttempt, collector: Collector, partition: str, partition_meta: Any
    ) -> None:
        self._emit(
            lambda: self.inner.emit_partition_batch(attempt, collector, partition, partition_meta)
        )

    def close(self) -> None:
        self.inner.close()


class FaultyTransactionalSpout:
    """A partitioned transactional spout whose emitter is a fault point ``spout.emit``."""

    def __init__(self, inner: Any, injector: FaultInjector) -> None:
        self.inner = inner
        self.injector = injector

    @property
    def output_fields(self) -> tuple[str, ...]:
        return tuple(self.inner.output_fields)

    def get_partitioned_coordinator(self) -> Any:
        return self.inner.get_partitioned_coordinator()

    def get_partitioned_emitter(self) -> _FaultyTransactionalEmitter:
        return _FaultyTransactionalEmitter(self.inner.get_partitioned_emitter(), self.injector)


class _FaultyOpaqueEmitter(_FaultyCollectorMixin):
    def __init__(self, inner: Any, injector: FaultInjector) -> None:
        self.inner = inner
        self.injector = injector

    def get_ordered_partitions(self, all_partition_info: Any) -> Sequence[str]:
        partitions: Sequence[str] = self.inner.get_ordered_partitions(all_partition_info)
        return partitions

    def emit_partition_batch(
        self,
        attempt: TransactionAttempt,
        collector: Collector,
        partition: str,
        last_partition_meta: Any,
    ) -> Any:
        return self._emit(
            lambda: self.inner.emit_partition_batch(
                attempt, collector, partition, last_partition_meta
            )
        )

    def close(self) -> None:
        self.inner.close()


class FaultyOpaqueSpout:
    """An opaque partitioned spout whose emitter is a fault point ``spout.emit``."""

    def __init__(self, inner: Any, injector: FaultInjector) -> None:
        self.inner = inner
        self.injector = injector

    @property
    def output_fields(self) -> tuple[str, ...]:
        return tuple(self.inner.output_fields)

    def get_opaque_coordinator(self) -> Any:
        return self.inner.get_opaque_coordinator()

    def get_opaque_emitter(self) -> _FaultyOpaqueEmitter:
        return _FaultyOpaqueEmitter(self.inner.get_opaque_emitter(), self.injector)


def faulty_spout(
    inner: Any, injector: FaultInjector
) -> FaultyTransactionalSpout | FaultyOpaqueSpout:
    """The fault-point wrapper of a partitioned (transactional or opaque) spout.

    Raises
    ------
    TypeError
        If ``inner`` is neither kind.
    """
    if hasattr(inner, "get_partitioned_coordinator"):
        return FaultyTransactionalSpout(inner, injector)
    if hasattr(inner, "get_opaque_coordinator"):
        return FaultyOpaqueSpout(inner, injector)
    msg = f"{inner!r} is not a partitioned transactional or opaque spout"
    raise TypeError(msg)


class FailWhenArmed(Function):
    """Passes each tuple through; a fault point ``function.execute`` (processing failure).

    Use it as ``stream.each(fields, FailWhenArmed(injector), ["checked"])``: the output field
    repeats the tuple's values, so project it away.
    """

    def __init__(self, injector: FaultInjector) -> None:
        self.injector = injector

    def execute(self, tuple_: TridentTuple, collector: TridentCollector) -> None:
        self.injector.hit("function.execute")
        collector.emit(tuple_.values[:1])


def points_of(injector: FaultInjector, prefixes: Iterable[str]) -> list[str]:
    """The points hit so far whose names start with one of ``prefixes`` (sorted)."""
    wanted = tuple(prefixes)
    return sorted(p for p in injector.hits if p.startswith(wanted))
