"""Fault points around what :class:`~airflow_trident.batch.steps.BatchSteps` is given.

Long on purpose: every fault point wraps one seam of the lifecycle (store, partition state, state,
spouts' emitters) with the same arming rules; they are one catalogue for users to read.

Faults are injected without touching production code paths: the harness wraps the coordinator
store, the spouts, the state factories and adds a Function step, and every wrapper calls
:meth:`FaultInjector.hit` with a *point* name before and after delegating (the store's parts,
partition states and states through one generic proxy, :class:`FaultPoints`):

==================================  =========================================================
point                               what a fault there means
==================================  =========================================================
``store.commit.before``             states written, ZooKeeper's compare-and-set not done
``store.commit.after``              compare-and-set done, the task died before reporting it
``store.<method>.before|after``     any other call of a store part (``store.runs.bind_run``:
                                    ``store.bind_run``, next_attempt, ...) or cleanup_before
``partition_state.<m>.before|after`` a partitioned spout's own metadata in ZooKeeper
``spout.emit.before|after``         the emitter of one partition, before or after it emitted
``function.execute``                user code of the processing phase (one tuple)
``state.<op>.before|after``         one state partition: begin_commit, multi_combine, commit...
==================================  =========================================================

:meth:`FaultInjector.arm` makes the n-th hit of a point (``fnmatch`` pattern: ``"state.commit.*"``,
``"*"``) run an action: raise :class:`InjectedFault` (default), expire the ZooKeeper session,
restart a private server, or ``SIGKILL`` the process (:func:`kill_this_process`).

Not fault points (as they never were): the store's ``runs_of_txid``, ``bind_new_run``,
``attempt_started_at``, ``mark_commit_started`` and ``commit_shape``, a partition state's
``cached`` (a read scope) and a state's ``rollback``.

Examples
--------
>>> from airflow_trident.coordination.memory import MemoryCoordinatorStore
>>> injector = FaultInjector()
>>> store = FaultyStore(MemoryCoordinatorStore("doc"), injector)
>>> injector.arm("store.commit.before")
>>> store.runs.bind_run("r1")
1
>>> try:
...     store.commits.commit(1)
... except InjectedFault as exc:
...     print(exc)
injected fault at store.commit.before (hit 1 of 'store.commit.before')
>>> store.commits.committed_txid(), injector.fired
(0, Counter({'store.commit.before': 1}))
>>> store.commits.commit(1); store.commits.committed_txid()
1
"""

from __future__ import annotations

import fnmatch
import os
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from airflow_trident.coordination.protocol import (
    FLAT_NAMES,
    CoordinatorStoreProtocol,
    StorePaths,
    moved_to_part,
)
from airflow_trident.errors import TridentError
from airflow_trident.operation.base import Function
from airflow_trident.spout.tx_state import PartitionState
from airflow_trident.state.base import State
from airflow_trident.tuple import TridentCollector, TridentTuple

__all__ = [
    "FailWhenArmed",
    "FaultInjector",
    "FaultPoints",
    "FaultyOpaqueSpout",
    "FaultySpout",
    "FaultyPartitionState",
    "FaultyState",
    "FaultyStateFactory",
    "FaultyStore",
    "FaultyTransactionalSpout",
    "InjectedFault",
    "faulty",
    "faulty_spout",
    "kill_this_process",
]


T = TypeVar("T")


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


class FaultPoints:
    """Any object, each call of a public method of it a fault point ``<prefix>.<method>``
    (``before`` and ``after`` the call); the one proxy every wrapper here is made of.

    ``passthrough`` names methods called without a fault point, ``hidden`` attributes the code
    under test must not see; ``points``, when given, the only methods that are fault points,
    each with its point's name. Other attributes (values, ``_private`` ones) pass through.

    >>> injector = FaultInjector()
    >>> words = FaultPoints(["a"], injector, "words")
    >>> words.append("b"); words.count("a"), sorted(injector.hits)
    (1, ['words.append.after', 'words.append.before', 'words.count.after', 'words.count.before'])
    """

    def __init__(
        self,
        inner: Any,
        injector: FaultInjector,
        prefix: str,
        *,
        passthrough: frozenset[str] = frozenset(),
        hidden: frozenset[str] = frozenset(),
        points: Mapping[str, str] | None = None,
    ) -> None:
        self.inner = inner
        self.injector = injector
        self._prefix = prefix
        self._passthrough = passthrough
        self._hidden = hidden
        self._points = points

    def __getattr__(self, name: str) -> Any:
        if name in self.__dict__.get("_hidden", ()):
            msg = f"{name!r} is hidden from the runtime by the fault harness"
            raise AttributeError(msg)
        if "inner" not in self.__dict__:  # not initialised (copy, pickle): no delegation yet
            raise AttributeError(name)
        value = getattr(self.inner, name)
        if not callable(value) or name.startswith("_") or name in self._passthrough:
            return value
        point = f"{self._prefix}.{name}" if self._points is None else self._points.get(name)
        if point is None:
            return value

        def hooked(*args: Any, **kwargs: Any) -> Any:
            return self.injector.around(point, lambda: value(*args, **kwargs))

        return hooked


def faulty(
    inner: T, injector: FaultInjector, prefix: str, *, passthrough: frozenset[str] = frozenset()
) -> T:
    """``inner`` behind :class:`FaultPoints`, typed as ``inner`` (it is a stand-in for it)."""
    return cast(T, FaultPoints(inner, injector, prefix, passthrough=passthrough))


class FaultyPartitionState(FaultPoints):
    """A partitioned spout's metadata store whose every call is a fault point
    ``partition_state.<method>`` (``cached``, a read scope, is not)."""

    def __init__(self, inner: PartitionState, injector: FaultInjector) -> None:
        super().__init__(inner, injector, "partition_state", passthrough=frozenset({"cached"}))


# Store calls that were never fault points: kept so, so that fault plans armed by hit counts
# (``store.*`` at its n-th hit) land where they always did.
_NOT_STORE_POINTS = frozenset(
    {"runs_of_txid", "bind_new_run", "attempt_started_at", "mark_commit_started", "commit_shape"}
)


class FaultyStore:
    """A :class:`~airflow_trident.coordination.protocol.CoordinatorStoreProtocol` delegating to
    ``inner`` (the real ZooKeeper store): each part (``runs``, ``attempts``, ``metas``,
    ``commits``) behind :class:`FaultPoints`, each call a fault point ``store.<method>``
    (``store.commit``, ``store.bind_run``...), and ``store.cleanup_before``.

    ``store.commit.before`` is "the states were written, the compare-and-set was not done";
    ``store.commit.after`` is "it was done, and the task died before it could say so".
    Attributes the protocol does not name (``client``, ``delete_all``...) pass through.
    """

    def __init__(self, inner: CoordinatorStoreProtocol, injector: FaultInjector) -> None:
        self.inner = inner
        self.injector = injector
        self.runs = faulty(inner.runs, injector, "store", passthrough=_NOT_STORE_POINTS)
        self.attempts = faulty(inner.attempts, injector, "store", passthrough=_NOT_STORE_POINTS)
        self.metas = faulty(inner.metas, injector, "store")
        self.commits = faulty(inner.commits, injector, "store")

    def __getattr__(self, name: str) -> Any:
        if "inner" not in self.__dict__:  # not initialised (copy, pickle): no delegation yet
            raise AttributeError(name)
        if name in FLAT_NAMES:
            return moved_to_part(self, name)  # deprecated flat names, still fault points
        return getattr(self.inner, name)

    @property
    def paths(self) -> StorePaths:
        return self.inner.paths

    def cleanup_before(self, txid: int, *, runs_before: int | None = None) -> int:
        result: int = self.injector.around(
            "store.cleanup_before",
            lambda: self.inner.cleanup_before(txid, runs_before=runs_before),
        )
        return result

    def partition_state(self, spout: str) -> PartitionState:
        return cast(
            PartitionState, FaultyPartitionState(self.inner.partition_state(spout), self.injector)
        )


class FaultyState(FaultPoints):
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
        super().__init__(inner, injector, "state", hidden=hidden)
        self.partition_index = partition_index
        self.hidden = hidden

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
        return cast(State, FaultyState(inner, self.injector, partition_index, hidden=self.hidden))

    def __repr__(self) -> str:
        return f"FaultyStateFactory({self.inner!r})"


_EMITS = {"emit_partition_batch": "spout.emit", "emit_partition_batch_new": "spout.emit"}
_EMITTERS = frozenset({"get_partitioned_emitter", "get_opaque_emitter"})


class FaultySpout(FaultPoints):
    """A partitioned spout, transactional or opaque, whose emitter's emits are the fault point
    ``spout.emit``; everything else is the wrapped spout's."""

    def __init__(self, inner: Any, injector: FaultInjector) -> None:
        super().__init__(inner, injector, "spout", points={})

    @property
    def output_fields(self) -> tuple[str, ...]:
        return tuple(self.inner.output_fields)

    def __getattr__(self, name: str) -> Any:
        value = super().__getattr__(name)
        if name not in _EMITTERS:
            return value
        injector = self.injector
        return lambda: FaultPoints(value(), injector, "spout", points=_EMITS)


FaultyTransactionalSpout = FaultySpout
"""A partitioned transactional spout's fault-point wrapper (:class:`FaultySpout`)."""
FaultyOpaqueSpout = FaultySpout
"""An opaque partitioned spout's fault-point wrapper (:class:`FaultySpout`)."""


def faulty_spout(inner: Any, injector: FaultInjector) -> FaultySpout:
    """The fault-point wrapper of a partitioned (transactional or opaque) spout.

    Raises
    ------
    TypeError
        If ``inner`` is neither kind.
    """
    if hasattr(inner, "get_partitioned_coordinator") or hasattr(inner, "get_opaque_coordinator"):
        return FaultySpout(inner, injector)
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
