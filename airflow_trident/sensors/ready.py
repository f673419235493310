"""The readiness sensor: waits until every spout's coordinator says the next batch may start."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator

from airflow_trident.hooks.trident import TridentHook
from airflow_trident.triggers.zookeeper import BatchReadyTrigger

__all__ = ["BatchReadySensor"]


class BatchReadySensor(BaseSensorOperator):
    """Poke (or defer to the triggerer) until the topology's spouts are ready (``is_ready``).

    :param topology: ``package.module:attribute`` of the topology (templated).
    :param staging_root: the staging root (templated).
    :param deferrable: wait in the triggerer instead of a worker slot.
    """

    template_fields: Sequence[str] = ("topology", "staging_root")
    ui_color = "#f0e8fd"

    def __init__(
        self,
        *,
        topology: str,
        staging_root: str,
        zookeeper_conn_id: str = "trident_zookeeper_default",
        deferrable: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.topology = topology
        self.staging_root = staging_root
        self.zookeeper_conn_id = zookeeper_conn_id
        self.deferrable = deferrable

    def _ready(self) -> bool:
        hook = TridentHook(zookeeper_conn_id=self.zookeeper_conn_id)
        with hook.batch_steps(self.topology, staging_root=self.staging_root) as steps:
            ready: bool = steps.is_ready()
            return ready

    def execute(self, context: Any) -> Any:
        if not self.deferrable or self._ready():
            return super().execute(context)
        self.defer(
            trigger=BatchReadyTrigger(
                topology=self.topology,
                zookeeper_conn_id=self.zookeeper_conn_id,
                staging_root=self.staging_root,
                poll_interval=self.poke_interval,
            ),
            method_name="execute_complete",
        )
        return None  # pragma: no cover - defer() raises

    def poke(self, context: Any) -> bool:
        return self._ready()

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> None:
        """Resume after the trigger saw the spouts ready."""
        self.log.info("spouts ready: %s", event)
