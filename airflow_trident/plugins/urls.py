"""Where the status view's app is mounted in the Airflow API server: apart from both the light
plugin module (:mod:`~airflow_trident.plugins.status_view`, loaded by every Airflow process) and
the app (:mod:`~airflow_trident.plugins.status_app`, built on the first request), which both
need it."""

from __future__ import annotations

__all__ = ["STATUS_URL_PREFIX"]

STATUS_URL_PREFIX = "/trident-status"
