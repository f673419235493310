"""The DRPC HTTP endpoint, served inside the Airflow 3 API server: :class:`TridentDRPCPlugin`.

``GET /trident/drpc/dags/{dag_id}/functions/{function}?args=...`` (or ``POST`` with the JSON body
``{"args": "..."}``); the routes, their authentication and their errors:
:mod:`airflow_trident.plugins.drpc_app`.

Every Airflow process loads plugins (task processes too, for macros), so this module imports
neither FastAPI nor Airflow's API server: the app is built on the API server's first request to
it (:class:`~airflow_trident.plugins.lazy.LazyApp`). The plugin is registered by the
``airflow.plugins`` entry point of this distribution.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_trident.plugins.lazy import LazyApp
from airflow_trident.plugins.urls import DRPC_URL_PREFIX as URL_PREFIX

__all__ = ["URL_PREFIX", "TridentDRPCPlugin"]


class TridentDRPCPlugin(AirflowPlugin):
    """Serves Trident DRPC at ``/trident/drpc`` in the Airflow API server."""

    name = "trident_drpc"
    fastapi_apps = [  # noqa: RUF012 (AirflowPlugin declares it a list attribute)
        {
            "app": LazyApp("airflow_trident.plugins.drpc_app:create_app"),
            "url_prefix": URL_PREFIX,
            "name": "Trident DRPC",
        }
    ]
