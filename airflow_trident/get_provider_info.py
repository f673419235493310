"""Provider metadata for Airflow's provider manager (``apache_airflow_provider`` entry point).

>>> info = get_provider_info()
>>> info["package-name"], info["versions"][0]
('airflow-trident', '0.1.0')
"""

from __future__ import annotations

from typing import Any

from airflow_trident import __version__

__all__ = ["get_provider_info"]


def get_provider_info() -> dict[str, Any]:
    """Describe the provider: package, versions, and (as they come to exist) its hooks,
    operators, sensors, triggers and connection types."""
    return {
        "package-name": "airflow-trident",
        "name": "Trident",
        "description": (
            "Storm Trident's exactly-once transactional micro-batches: one DAG run per txid, "
            "processing on Apache Spark, commits in strict txid order coordinated in ZooKeeper."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Trident",
                "external-doc-url": "https://storm.apache.org/releases/current/Trident-tutorial.html",
                "tags": ["software"],
            }
        ],
        "hooks": [],
        "operators": [],
        "sensors": [],
        "triggers": [],
        "connection-types": [],
    }
