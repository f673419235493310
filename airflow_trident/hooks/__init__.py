"""Airflow hooks of airflow-trident: the coordinating ZooKeeper, the state database and the
Iceberg catalog of Iceberg sinks.

Only this adapter layer (with operators, sensors, triggers and the DAG factory) imports ``airflow``.
"""

from __future__ import annotations

from airflow_trident.hooks.iceberg import IcebergCatalogHook
from airflow_trident.hooks.state_store import StateStoreHook
from airflow_trident.hooks.zookeeper import ZooKeeperHook

__all__ = ["IcebergCatalogHook", "StateStoreHook", "ZooKeeperHook"]
