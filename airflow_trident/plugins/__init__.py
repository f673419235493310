"""Airflow plugins of airflow-trident (registered under the ``airflow.plugins`` entry point)."""
