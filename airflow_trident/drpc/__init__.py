"""DRPC: Trident's distributed RPC over a topology's committed state.

A DRPC stream (``topology.new_drpc_stream(function)``) turns each request into its own batch with
no txid, run in-process against committed state only (:class:`DRPCExecutor`). The Airflow side —
the Python client, the ``airflow-trident drpc`` command and the HTTP endpoint in the Airflow API
server — lives in :mod:`airflow_trident.hooks.drpc` and :mod:`airflow_trident.plugins.drpc`.
"""

from __future__ import annotations

from airflow_trident.drpc.committed import committed_state, committed_value
from airflow_trident.drpc.executor import DRPC_TXID, DRPCExecutor, result_json

__all__ = ["DRPC_TXID", "DRPCExecutor", "committed_state", "committed_value", "result_json"]
