"""Airflow hooks of airflow-trident: the coordinating ZooKeeper and the state database.

Only this adapter layer (with operators, sensors, triggers and the DAG factory) imports ``airflow``.
"""

from __future__ import annotations

from airflow_trident.hooks.state_store import StateStoreHook
from airflow_trident.hooks.zookeeper import ZooKeeperHook

__all__ = ["StateStoreHook", "ZooKeeperHook"]
