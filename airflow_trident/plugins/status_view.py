"""The Trident status view inside the Airflow UI: an Airflow plugin with a FastAPI app.

The api-server mounts the app under ``/trident-status`` and the UI shows it in two places:

* a **Trident** tab on every DAG's page (``/dags/<dag_id>/plugin/trident-status``; a DAG that is
  not a Trident DAG says so), rendering ``/trident-status/dags/<dag_id>``;
* **Trident topologies** under *Browse*, listing the Trident DAGs the user may read.

The routes, and how they are protected: :mod:`airflow_trident.plugins.status_app`. Every Airflow
process loads plugins (task processes too, for macros), so this module stays light: the app is
built, with its FastAPI and security imports, on the api-server's first request to it. The
plugin is registered by the ``airflow.plugins`` entry point of this distribution.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_trident.plugins.urls import STATUS_URL_PREFIX as URL_PREFIX

__all__ = ["URL_PREFIX", "TridentStatusPlugin"]

_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class _LazyApp:
    """An ASGI app that builds the view's FastAPI app on its first request."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: MutableMapping[str, Any], receive: _Receive,
                       send: _Send) -> None:  # fmt: skip
        if self._app is None:
            from airflow_trident.plugins.status_app import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


class TridentStatusPlugin(AirflowPlugin):
    """Registers the status view's app and its two places in the UI."""

    name = "trident_status"
    fastapi_apps = [  # noqa: RUF012 (AirflowPlugin's own attributes are plain lists)
        {"app": _LazyApp(), "url_prefix": URL_PREFIX, "name": "Trident status"}
    ]
    external_views = [  # noqa: RUF012
        {
            "name": "Trident",
            "href": f"{URL_PREFIX}/dags/{{DAG_ID}}",
            "destination": "dag",
            "url_route": "trident-status",
        },
        {
            "name": "Trident topologies",
            "href": f"{URL_PREFIX}/",
            "destination": "nav",
            "category": "browse",
            "url_route": "trident-topologies",
        },
    ]
