"""Where a run's states live: the state database it was given, bound to the topology.

A topology says *what* its states are (``sql_state(None, "word_counts", "transactional")``:
a table, a rule, key and value types); *where* they live is the run's business: the Airflow
connection of the DAG (``state_conn_id``), the ``--state-conn-id`` of a CLI command, the URL a
Spark job received. A :class:`StateBinding` carries that database URL through one batch
lifecycle and gives every state factory that did not name a database of its own that URL
(factories that implement :class:`LocatableStateFactory`, as SQL states do). Nothing is read
from, or written to, the process environment on the way.

A binding is picklable, so a Spark task closure carries it to executors; it never prints its
password. It also carries the connections the topology's sources and sinks declared
(``delta_state(..., conn_id=...)``), resolved when it is pickled
(:func:`airflow_trident.connections.shipment`), so an executor that does not inherit the job's
environment (a cluster, a Spark Connect server) resolves them too.

Examples
--------
>>> from airflow_trident.state.sql import sql_state
>>> counts = sql_state(None, "bound_counts", "transactional", value_type="bigint")
>>> binding = StateBinding("sqlite://")
>>> binding
StateBinding('sqlite://')
>>> state = binding.make_state(counts)
>>> state.begin_commit(1); state.multi_put([("a",)], [3]); state.commit(1)
>>> binding.make_state(counts).multi_get([("a",)])
[3]
>>> StateBinding("postgresql://u:secret@db/x")
StateBinding('postgresql://u:***@db/x')
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol, runtime_checkable

from airflow_trident import connections
from airflow_trident.state.base import State

__all__ = ["LocatableStateFactory", "StateBinding"]

log = logging.getLogger(__name__)
_UNRESOLVED = object()


@runtime_checkable
class LocatableStateFactory(Protocol):
    """A state factory whose database can be given by the run."""

    def located_at(self, url: str) -> Any:
        """This factory with its database at ``url`` when it names none itself, else itself."""
        ...


class StateBinding:
    """The state database URL of one run, applied to the topology's state factories.

    Parameters
    ----------
    url:
        A SQLAlchemy URL, or ``None``: factories then use their own default (a SQL state with no
        URL: ``TRIDENT_STATE_URL``, else SQLite under ``~/.airflow_trident``).
    """

    def __init__(self, url: str | None = None) -> None:
        self.url = url
        self._located: dict[int, tuple[Any, Any]] = {}
        self._lock = threading.Lock()
        self._shipment: object = _UNRESOLVED

    def __repr__(self) -> str:
        if self.url is None:
            return "StateBinding(None)"
        import sqlalchemy as sa

        shown = sa.make_url(self.url).render_as_string(hide_password=True)
        return f"StateBinding({shown!r})"

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:  # resolved once per binding (one batch lifecycle)
            if self._shipment is _UNRESOLVED:
                self._shipment = connections.shipment()
            shipment = self._shipment
        return {"url": self.url, "connections": shipment}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"])  # type: ignore[misc]
        connections.receive(state.get("connections"))

    def factory(self, factory: Any) -> Any:
        """``factory`` located at this run's database (the same object when it cannot be)."""
        if self.url is None or not isinstance(factory, LocatableStateFactory):
            return factory
        with self._lock:
            found = self._located.get(id(factory))
            if found is None or found[0] is not factory:
                found = (factory, factory.located_at(self.url))
                self._located[id(factory)] = found
                if found[1] is factory:
                    log.warning(
                        "%r names its own database, so it does not use the run's state database "
                        "%s; hint: make it with url=None to follow the run's state connection",
                        factory,
                        self,
                    )
            return found[1]

    def make_state(self, factory: Any, partition_index: int = 0, num_partitions: int = 1) -> State:
        """The state of partition ``partition_index`` of ``num_partitions``, made by ``factory``
        located at this run's database."""
        state: State = self.factory(factory).make_state(partition_index, num_partitions)
        return state
