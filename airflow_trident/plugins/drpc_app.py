"""The FastAPI app of the DRPC HTTP endpoint (mounted under ``/trident/drpc`` by the plugin
:class:`~airflow_trident.plugins.drpc.TridentDRPCPlugin`, built on the API server's first request).

``GET /trident/drpc/dags/{dag_id}/functions/{function}?args=...`` (or ``POST`` with the JSON body
``{"args": "..."}``) answers one DRPC request of the Trident DAG ``dag_id`` from committed state
(:class:`~airflow_trident.hooks.drpc.DRPCClient`, one per DAG, kept for the server's life) and
returns Trident's JSON list of result tuples, e.g. ``[["cow",2]]``.

Airflow mounts a plugin's FastAPI app with ``app.mount()``: the core API's authentication does
not reach it. Every route here therefore depends on Airflow's own
``requires_access_dag("GET")`` — the caller's JWT (``Authorization: Bearer`` from
``POST /auth/token``, or the UI's cookie) is validated by the configured auth manager, which must
allow reading that DAG: no token is 401, a token without access is 403.

Errors are JSON ``{"detail": ..., "error": ...}``:

=====  ===================================================================================
code   when
=====  ===================================================================================
400    arguments missing or not a string, or a step of the DRPC stream failed on them
404    no such DAG, not a Trident DAG, or no such DRPC function
503    ZooKeeper or the state database unreachable, or a commit in progress holds a needed
       value (transactional state without ``prev``); ``Retry-After: 1``
500    anything else (a broken connection definition, say)
=====  ===================================================================================
"""

from __future__ import annotations

import logging
import threading
from typing import Annotated, Any

from airflow.api_fastapi.core_api.security import requires_access_dag
from fastapi import Body, Depends, FastAPI, Query
from fastapi.responses import JSONResponse, Response

from airflow_trident.errors import (
    CoordinatorUnavailableError,
    DRPCArgumentsError,
    DRPCCommitInProgressError,
    DRPCUnknownFunctionError,
    StateStoreUnavailableError,
    TridentError,
)
from airflow_trident.hooks.drpc import DRPCClient
from airflow_trident.plugins.urls import DRPC_URL_PREFIX as URL_PREFIX

__all__ = ["URL_PREFIX", "create_app", "status_of"]

log = logging.getLogger(__name__)

_CLIENTS: dict[str, DRPCClient] = {}
_CLIENTS_LOCK = threading.Lock()


def status_of(exc: BaseException) -> int:
    """The HTTP status of a DRPC error.

    >>> status_of(DRPCUnknownFunctionError("x")), status_of(DRPCArgumentsError("x"))
    (404, 400)
    >>> status_of(StateStoreUnavailableError("x")), status_of(TridentError("x"))
    (503, 500)
    """
    if isinstance(exc, DRPCUnknownFunctionError):
        return 404
    if isinstance(exc, DRPCArgumentsError):
        return 400
    if isinstance(
        exc, DRPCCommitInProgressError | CoordinatorUnavailableError | StateStoreUnavailableError
    ):
        return 503
    return 500


def _client(dag_id: str) -> DRPCClient:
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(dag_id)
        if client is None:
            client = _CLIENTS[dag_id] = DRPCClient(dag_id)
        return client


def _answer(dag_id: str, function: str, args: Any) -> Response:
    if args is None:
        exc: Exception = DRPCArgumentsError(
            f"DRPC function {function!r} of DAG {dag_id!r}: no arguments; hint: pass ?args=... "
            f'or the JSON body {{"args": "..."}}'
        )
        return _error(exc)
    try:
        text = _client(dag_id).execute(function, args)
    except TridentError as exc:
        return _error(exc)
    return Response(content=text, media_type="application/json")


def _error(exc: Exception) -> JSONResponse:
    code = status_of(exc)
    if code == 500:
        log.exception("DRPC request failed")
    headers = {"Retry-After": "1"} if code == 503 else None
    return JSONResponse(
        {"detail": str(exc), "error": type(exc).__name__}, status_code=code, headers=headers
    )


def create_app() -> FastAPI:
    """The DRPC endpoint's FastAPI app (every route behind ``requires_access_dag("GET")``)."""
    app = FastAPI(
        title="Trident DRPC",
        description="Trident DRPC requests answered from a topology's committed state.",
    )
    auth = [Depends(requires_access_dag("GET"))]

    @app.get("/dags/{dag_id}/functions/{function}", dependencies=auth)
    def drpc_get(dag_id: str, function: str, args: Annotated[Any, Query()] = None) -> Response:
        """One DRPC request: ``args`` is the request's argument string."""
        return _answer(dag_id, function, args)

    @app.post("/dags/{dag_id}/functions/{function}", dependencies=auth)
    def drpc_post(dag_id: str, function: str, body: Annotated[Any, Body()] = None) -> Response:
        """One DRPC request with the JSON body ``{"args": "..."}``."""
        args = body.get("args") if isinstance(body, dict) else None
        return _answer(dag_id, function, args)

    return app
