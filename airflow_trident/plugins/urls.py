"""Where the plugins' apps are mounted in the Airflow API server: apart from both the light
plugin modules (:mod:`~airflow_trident.plugins.status_view`, :mod:`~airflow_trident.plugins.drpc`,
loaded by every Airflow process) and the apps (:mod:`~airflow_trident.plugins.status_app`,
:mod:`~airflow_trident.plugins.drpc_app`, built on the first request), which both need them."""

from __future__ import annotations

__all__ = ["DRPC_URL_PREFIX", "STATUS_URL_PREFIX"]

STATUS_URL_PREFIX = "/trident-status"
DRPC_URL_PREFIX = "/trident/drpc"
