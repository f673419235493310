"""airflow-trident: Storm Trident's exactly-once transactional micro-batches on Airflow and Spark.

Importing the package imports neither Airflow nor Spark; the adapters that need them live in
their own modules.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
