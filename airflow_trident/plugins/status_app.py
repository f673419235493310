"""The FastAPI app of the Trident status view (see :mod:`airflow_trident.plugins.status_view`,
the plugin that mounts it under ``/trident-status``).

Routes (every one behind Airflow's authentication: the UI's session cookie or a
``Authorization: Bearer <JWT>`` header, as for Airflow's own REST API; the DAG routes also ask the
auth manager whether the user may read the DAG's runs):

``GET /trident-status/``                 the list of Trident DAGs (HTML)
``GET /trident-status/dags/{dag_id}``    the page: facts, batch timeline, rows per txid, lag
``GET /trident-status/api/dags/{dag_id}`` the same facts as JSON (``airflow-trident status --json``)
``GET /trident-status/dags/{dag_id}/runs/{run_id}``      one run's page (its Trident tab): its
                                         txid as soon as its begin bound it, and its phase
``GET /trident-status/api/dags/{dag_id}/runs/{run_id}``  the same as JSON

The facts are those of ``airflow-trident status`` (:mod:`airflow_trident.status`), read from
ZooKeeper, the commit ledger and the staging area through the DAG's own connections.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import HTMLResponse, JSONResponse

from airflow_trident.batch.status import RunStatus, TopologyStatus
from airflow_trident.errors import TridentError
from airflow_trident.hooks.dag_tasks import DagTopology, dag_topology, trident_dag_ids
from airflow_trident.plugins.status_page import render_index, render_page, render_run
from airflow_trident.plugins.urls import STATUS_URL_PREFIX as URL_PREFIX
from airflow_trident.status import collect_run_status, collect_status

__all__ = ["URL_PREFIX", "create_app"]

log = logging.getLogger(__name__)


_T = TypeVar("_T")

_READ_RUNS = Depends(requires_access_dag("GET", DagAccessEntity.RUN))


def _authorized_trident_dags(user: Any) -> list[str]:
    from airflow.api_fastapi.app import get_auth_manager

    readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET")
    return trident_dag_ids(sorted(readable))


def create_app(
    *,
    resolve: Callable[[str], DagTopology] = dag_topology,
    collect: Callable[[DagTopology], TopologyStatus] = collect_status,
    list_dags: Callable[[Any], Iterable[str]] = _authorized_trident_dags,
    collect_run: Callable[[DagTopology, str], RunStatus] = collect_run_status,
) -> FastAPI:
    """The view's FastAPI app; ``resolve``, ``collect``, ``list_dags`` and ``collect_run`` say
    where the facts come from (defaults: the DAG's connections, the metadata database)."""
    app = FastAPI(title="Trident status", docs_url=None, redoc_url=None, openapi_url=None)

    def status_of(dag_id: str) -> TopologyStatus:
        return _answer(dag_id, lambda: collect(resolve(dag_id)))

    def run_of(dag_id: str, run_id: str) -> RunStatus:
        return _answer(dag_id, lambda: collect_run(resolve(dag_id), run_id))

    @app.get("/", response_class=HTMLResponse)
    def index(user: GetUserDep) -> str:
        return render_index(list(list_dags(user)), base=f"{URL_PREFIX}/")

    @app.get("/dags/{dag_id}", response_class=HTMLResponse, dependencies=[_READ_RUNS])
    def page(dag_id: str) -> HTMLResponse:
        try:
            status = status_of(dag_id)
        except HTTPException as exc:
            return _error_page(exc)
        return HTMLResponse(render_page(status, json_href=f"{URL_PREFIX}/api/dags/{dag_id}"))

    @app.get("/api/dags/{dag_id}", dependencies=[_READ_RUNS])
    def facts(dag_id: str) -> JSONResponse:
        return JSONResponse(status_of(dag_id).to_dict())

    @app.get("/dags/{dag_id}/runs/{run_id}", response_class=HTMLResponse,
             dependencies=[_READ_RUNS])  # fmt: skip
    def run_page(dag_id: str, run_id: str) -> HTMLResponse:
        try:
            status = run_of(dag_id, run_id)
        except HTTPException as exc:
            return _error_page(exc)
        return HTMLResponse(render_run(
            status, topology_href=f"{URL_PREFIX}/dags/{dag_id}",
            json_href=f"{URL_PREFIX}/api/dags/{dag_id}/runs/{run_id}",
        ))  # fmt: skip

    @app.get("/api/dags/{dag_id}/runs/{run_id}", dependencies=[_READ_RUNS])
    def run_facts(dag_id: str, run_id: str) -> JSONResponse:
        return JSONResponse(run_of(dag_id, run_id).to_dict())

    return app


def _answer(dag_id: str, read: Callable[[], _T]) -> _T:
    """``read()``, its failures as HTTP errors: 404 for an unknown or non-Trident DAG or a
    missing connection, 503 when ZooKeeper or the state database does not answer."""
    try:
        return read()
    except LookupError as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from exc
    except TridentError as exc:
        log.warning("status of DAG %s: %s", dag_id, exc)
        raise HTTPException(status_code=503, detail=str(exc)) from exc


def _error_page(exc: HTTPException) -> HTMLResponse:
    body = (f'<!DOCTYPE html><html><body><h1>Trident</h1><p class="error">'
            f"{_escape(str(exc.detail))}</p></body></html>")  # fmt: skip
    return HTMLResponse(body, status_code=exc.status_code)


def _escape(text: str) -> str:
    from html import escape

    return escape(text)
