"""In-memory map state factories (Trident's ``MemoryMapState``), for tests and demos.

States made under one name share their data within a process.

>>> factory = memory_state("counts", "transactional")
>>> state = factory.make_state()
>>> state.begin_commit(1); state.multi_put([("a",)], [3]); state.commit(1)
>>> memory_state("counts", "transactional").make_state().multi_get([("a",)])
[3]
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_trident.names import validate_name
from airflow_trident.state.base import StateType
from airflow_trident.state.map.backing import BackingMap, memory_store
from airflow_trident.state.map.base import RuleMap
from airflow_trident.state.map.cached import CachedMap
from airflow_trident.state.map.non_transactional import NonTransactionalMap
from airflow_trident.state.map.opaque import OpaqueMap
from airflow_trident.state.map.transactional import TransactionalMap

__all__ = ["MemoryMapStateFactory", "make_rule_map", "memory_state"]

_RULE_MAPS: dict[StateType, type[RuleMap]] = {
    StateType.TRANSACTIONAL: TransactionalMap,
    StateType.OPAQUE: OpaqueMap,
    StateType.NON_TRANSACTIONAL: NonTransactionalMap,
}


def make_rule_map(
    backing: BackingMap, state_type: StateType | str, *, name: str, cache_size: int = 0
) -> RuleMap:
    """The map applying ``state_type``'s rule over ``backing`` (behind an LRU when asked)."""
    store: BackingMap = CachedMap(backing, max_size=cache_size) if cache_size > 0 else backing
    return _RULE_MAPS[StateType.parse(state_type)](store, name=name)


@dataclass(frozen=True)
class MemoryMapStateFactory:
    """Makes map states over the process-wide in-memory store called ``name``."""

    name: str
    state_type: StateType = StateType.OPAQUE
    cache_size: int = 0

    def make_state(self, partition_index: int = 0, num_partitions: int = 1) -> RuleMap:
        """The state (every partition shares the one store)."""
        return make_rule_map(
            memory_store(self.name), self.state_type, name=self.name, cache_size=self.cache_size
        )


def memory_state(
    name: str, state_type: StateType | str = StateType.OPAQUE, *, cache_size: int = 0
) -> MemoryMapStateFactory:
    """A factory of in-memory map states (opaque by default, as Trident's ``MemoryMapState``)."""
    return MemoryMapStateFactory(
        validate_name(name, kind="state"), StateType.parse(state_type), cache_size
    )
