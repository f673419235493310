"""The Trident status view inside the Airflow UI: an Airflow plugin with a FastAPI app.

The api-server mounts the app under ``/trident-status`` and the UI shows it in three places:

* a **Trident** tab on every DAG's page (``/dags/<dag_id>/plugin/trident-status``; a DAG that is
  not a Trident DAG says so), rendering ``/trident-status/dags/<dag_id>``;
* a **Trident** tab on every DAG run's page (``/dags/<dag_id>/runs/<run_id>/plugin/trident-run``),
  rendering ``/trident-status/dags/<dag_id>/runs/<run_id>``: the run's txid from the moment its
  begin binds it in ZooKeeper (the run's note gets it only when the run ends: under a scheduler
  no task may write the metadata database), and its batch's phase;
* **Trident topologies** under *Browse*, listing the Trident DAGs the user may read.

The routes, and how they are protected: :mod:`airflow_trident.plugins.status_app`. Every Airflow
process loads plugins (task processes too, for macros), so this module stays light: the app is
built, with its FastAPI and security imports, on the api-server's first request to it. The
plugin is registered by the ``airflow.plugins`` entry point of this distribution.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_trident.plugins.lazy import LazyApp
from airflow_trident.plugins.urls import STATUS_URL_PREFIX as URL_PREFIX

__all__ = ["URL_PREFIX", "TridentStatusPlugin"]


class TridentStatusPlugin(AirflowPlugin):
    """Registers the status view's app and its three places in the UI."""

    name = "trident_status"
    fastapi_apps = [  # noqa: RUF012 (AirflowPlugin's own attributes are plain lists)
        {
            "app": LazyApp("airflow_trident.plugins.status_app:create_app"),
            "url_prefix": URL_PREFIX,
            "name": "Trident status",
        }
    ]
    external_views = [  # noqa: RUF012
        {
            "name": "Trident",
            "href": f"{URL_PREFIX}/dags/{{DAG_ID}}",
            "destination": "dag",
            "url_route": "trident-status",
        },
        {
            "name": "Trident",
            "href": f"{URL_PREFIX}/dags/{{DAG_ID}}/runs/{{RUN_ID}}",
            "destination": "dag_run",
            "url_route": "trident-run",
        },
        {
            "name": "Trident topologies",
            "href": f"{URL_PREFIX}/",
            "destination": "nav",
            "category": "browse",
            "url_route": "trident-topologies",
        },
    ]
